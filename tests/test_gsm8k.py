"""prepare-gsm8k: exact verl 0.4.1 rows from a hand-written GSM8K-shaped fixture, bad rows, --strict,
prompt-length filtering checked against verl's own RLHFDataset, byte-identical and atomic writes,
every input format, and the hub code path run on local files. No test touches the network."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gsm8k_rows import TEST, TRAIN, run_prepare, write_jsonl
from verlfit import cli, gsm8k
from verlfit.errors import VerlfitError

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def row(split, index, source, ground_truth):
    question, answer = source["question"], source["answer"]
    return {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": question + " " + INSTRUCTION}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {"split": split, "index": index, "answer": answer, "question": question},
    }


EXPECTED_TRAIN = [
    row("train", 0, TRAIN[0], "1600"),
    row("train", 1, TRAIN[1], "-5"),
    row("train", 2, TRAIN[2], "2.5"),
    row("train", 6, TRAIN[6], "2500"),
    row("train", 7, TRAIN[7], "24"),
]
EXPECTED_TEST = [row("test", 0, TEST[0], "360"), row("test", 2, TEST[2], "30")]


def expected_bad_lines(source: Path) -> list[str]:
    """What prepare-gsm8k says of the bad rows of ``write_jsonl(source)``: each row's index in its split (its
    extra_info.index) and its file's line (new-user trial finding 19: the other messages name lines)."""
    train, test = source / "train.jsonl", source / "test.jsonl"
    return [
        f'skipped train row 3 ({train} line 4): answer has no "####"',
        f'skipped train row 4 ({train} line 5): no number after "####"',
        f"skipped train row 5 ({train} line 6): missing or blank question",
        f"skipped test row 1 ({test} line 2): missing or blank question",
    ]


@pytest.fixture(autouse=True)
def _offline(monkeypatch, tmp_path):
    """Offline everywhere, and the datasets cache in tmp: datasets/huggingface_hub read these at import."""
    import huggingface_hub

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets-cache")


def read_rows(path) -> list[dict]:
    return pq.read_table(path).to_pylist()


# --------------------------------------------------------------------------- rows


def test_exact_rows_from_jsonl(tmp_path):
    out = tmp_path / "out"
    result, lines = run_prepare(write_jsonl(tmp_path / "in"), out)
    expected_bad = expected_bad_lines(tmp_path / "in")
    assert read_rows(out / "train.parquet") == EXPECTED_TRAIN
    assert read_rows(out / "test.parquet") == EXPECTED_TEST
    assert result.rows == {"train": 5, "test": 2}
    assert result.paths == {"train": out / "train.parquet", "test": out / "test.parquet"}
    assert result.dropped == {} and result.lengths == {}
    assert [str(bad) for bad in result.bad] == [line.removeprefix("skipped ") for line in expected_bad]
    assert [line for line in lines if line.startswith("skipped")] == expected_bad
    assert lines[-2:] == [
        f"train: 5 rows written (3 bad) -> {out / 'train.parquet'}",
        f"test: 2 rows written (1 bad) -> {out / 'test.parquet'}",
    ]


def test_schema_is_verl_schema(tmp_path):
    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "in"), out)
    schema = pq.read_schema(out / "train.parquet")
    assert schema.remove_metadata() == pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            (
                "extra_info",
                pa.struct(
                    [("split", pa.string()), ("index", pa.int64()), ("answer", pa.string()), ("question", pa.string())]
                ),
            ),
        ]
    )


def _verl_script(input_dir: Path, output_dir: Path, cache_dir: Path) -> None:
    """verl 0.4.1 examples/data_preprocess/gsm8k.py (Apache-2.0), with load_dataset pointed at local files."""

    def extract_solution(solution_str):
        solution = re.search("#### (\\-?[0-9\\.\\,]+)", solution_str)
        assert solution is not None
        final_solution = solution.group(0)
        final_solution = final_solution.split("#### ")[1].replace(",", "")
        return final_solution

    data_source = "openai/gsm8k"
    files = {split: str(input_dir / f"{split}.jsonl") for split in ("train", "test")}
    dataset = datasets.load_dataset("json", data_files=files, cache_dir=str(cache_dir))
    instruction_following = 'Let\'s think step by step and output the final answer after "####".'

    def make_map_fn(split):
        def process_fn(example, idx):
            question_raw = example.pop("question")
            question = question_raw + " " + instruction_following
            answer_raw = example.pop("answer")
            solution = extract_solution(answer_raw)
            return {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": solution},
                "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw},
            }

        return process_fn

    output_dir.mkdir(parents=True)
    for split in ("train", "test"):
        dataset[split].map(function=make_map_fn(split), with_indices=True).to_parquet(
            str(output_dir / f"{split}.parquet")
        )


def test_the_same_rows_and_schema_as_verls_own_script(tmp_path):
    """What verl reads from our files equals what it reads from its own script's: every row, value for value, and the
    schema by content. Not byte for byte: the bytes depend on pyarrow's page layout, which differs between the test
    venv's pyarrow and the image's 20.0.0 (the in-image suite found our pages laid out apart from verl's there)."""
    import pyarrow.parquet as pq

    good = [item for item in TRAIN if gsm8k.check_row(item["question"], item["answer"])[1] is None]
    good_test = [item for item in TEST if gsm8k.check_row(item["question"], item["answer"])[1] is None]
    source = write_jsonl(tmp_path / "in", good, good_test)
    _verl_script(source, tmp_path / "verl", tmp_path / "verl-cache")
    run_prepare(source, tmp_path / "ours")
    for split in ("train", "test"):
        ours, verls = (
            pq.read_table(tmp_path / "ours" / f"{split}.parquet"),
            pq.read_table(tmp_path / "verl" / f"{split}.parquet"),
        )
        assert ours.to_pylist() == verls.to_pylist()
        assert len(ours.to_pylist()) == len(good if split == "train" else good_test)
        assert gsm8k.has_gsm8k_schema(tmp_path / "ours" / f"{split}.parquet") and gsm8k.has_gsm8k_schema(
            tmp_path / "verl" / f"{split}.parquet"
        )


def test_verl_reward_scores_each_reference_answer_1(tmp_path):
    from verl.utils.reward_score.gsm8k import compute_score

    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "in"), out)
    rows = read_rows(out / "train.parquet") + read_rows(out / "test.parquet")
    assert len(rows) == 7
    for item in rows:
        assert compute_score(item["extra_info"]["answer"], item["reward_model"]["ground_truth"]) == 1.0


@pytest.mark.parametrize(
    ("answer", "ground_truth", "reason"),
    [
        ("x\n#### 1,600", "1600", None),
        ("#### -5", "-5", None),
        ("#### 2.5", "2.5", None),
        ("#### 1,234,567.5", "1234567.5", None),
        ("first #### 10 then #### 20", "10", None),  # verl takes the first match
        ("#### 7 dollars", "7", None),
        ("no marker", None, 'answer has no "####"'),
        ("#### ", None, 'no number after "####"'),
        ("####5", None, 'no number after "####"'),
        ("#### $5", None, 'no number after "####"'),
        ("#### ,.", None, 'no number after "####"'),
        (None, None, "missing or blank answer"),
        ("  ", None, "missing or blank answer"),
        ("#### 1.2.3", None, '"1.2.3" after "####" is not a number'),
    ],
)
def test_check_row(answer, ground_truth, reason):
    assert gsm8k.check_row("Q?", answer) == (ground_truth, reason)


@pytest.mark.parametrize("question", ["", "  \n", None])
def test_check_row_empty_question(question):
    assert gsm8k.check_row(question, "#### 1") == (None, "missing or blank question")


# --------------------------------------------------------------------------- --strict and CLI


def test_strict_fails_listing_every_bad_row_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(VerlfitError) as caught:
        run_prepare(write_jsonl(tmp_path / "in"), out, strict=True)
    rows = [line.removeprefix("skipped ") for line in expected_bad_lines(tmp_path / "in")]
    assert (
        str(caught.value)
        == "4 bad row(s) and --strict:\n  "
        + "\n  ".join(rows)
        + "\n  fix: fix those rows in the source, or leave out --strict to skip them"
    )
    assert not out.exists()


def test_cli_strict_exit_status_and_message(tmp_path, capsys):
    source = write_jsonl(tmp_path / "in")
    status = cli.main(["prepare-gsm8k", "--input", str(source), "--output", str(tmp_path / "out"), "--strict"])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.startswith(
        f"verlfit: error: 4 bad row(s) and --strict:\n  train row 3 ({source / 'train.jsonl'} line 4): answer has no"
        ' "####"\n'
    )


def test_cli_summary_and_paths(tmp_path, capsys):
    source = write_jsonl(tmp_path / "in")
    out = tmp_path / "out"
    assert cli.main(["prepare-gsm8k", "--input", str(source), "--output", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"read {source}: train 8 rows ({source / 'train.jsonl'}), test 3 rows ({source / 'test.jsonl'})",
        *expected_bad_lines(source),
        f"train: 5 rows written (3 bad) -> {out / 'train.parquet'}",
        f"test: 2 rows written (1 bad) -> {out / 'test.parquet'}",
    ]
    assert gsm8k.is_prepared(out)


def test_max_prompt_length_without_tokenizer_is_a_usage_error(tmp_path, capsys):
    source = write_jsonl(tmp_path / "in")
    assert cli.main(["prepare-gsm8k", "--input", str(source), "--max-prompt-length", "256"]) == 2
    assert "--max-prompt-length needs --tokenizer" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["prepare-gsm8k", "prepare-data"])
def test_a_prompt_limit_below_one_says_what_to_give(tmp_path, capsys, command):
    """New-user trial: --max-prompt-length 0 was refused with no fix line."""
    source = write_jsonl(tmp_path / "in")
    inputs = ["--input", str(source)]
    if command == "prepare-data":
        inputs = ["--train", str(source / "train.jsonl"), "--test", str(source / "test.jsonl"), "--data-source", "t"]
    out = tmp_path / "out"
    argv = [command, *inputs, "--output", str(out), "--tokenizer", "Qwen/Qwen2.5-0.5B-Instruct"]
    assert cli.main([*argv, "--max-prompt-length", "0"]) == 2
    assert capsys.readouterr().err == (
        "verlfit: error: --max-prompt-length must be at least 1, not 0\n  fix: give the prompt limit verlfit train "
        "will run with, in tokens (its default: 512), or leave it out to keep every row\n"
    )
    assert not out.exists()


def test_help_documents_discovery_and_index(capsys):
    with pytest.raises(SystemExit):
        cli.main(["prepare-gsm8k", "--help"])
    text = capsys.readouterr().out
    assert "train.parquet | train.jsonl | train.json | train-*.parquet" in text
    assert "extra_info.index is the row's\nindex in its source split" in text


# --------------------------------------------------------------------------- prompt lengths


def test_length_stats():
    stats = gsm8k.length_stats(list(range(20, 0, -1)), limit=18)
    assert stats == gsm8k.LengthStats(count=20, min=1, median=10.5, p95=19, max=20, limit=18, over_limit=2)
    assert stats.describe() == "min 1, median 10.5, p95 19, max 20 (20 prompts); 2 over 18"
    assert gsm8k.length_stats([7]) == gsm8k.LengthStats(1, 7, 7, 7, 7, None, None)


def test_tokenizer_drops_exactly_the_long_prompts(tmp_path, qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)

    def length(item):
        messages = [{"role": "user", "content": item["question"] + " " + INSTRUCTION}]
        return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True))

    good_train = [(i, length(TRAIN[i])) for i in (0, 1, 2, 6, 7)]
    good_test = [(i, length(TEST[i])) for i in (0, 2)]
    limit = max(length(TRAIN[i]) for i in (0, 1, 2, 6))  # the longest short prompt: kept (verl keeps <=)
    assert limit < length(TRAIN[7]) and limit < length(TEST[2]) and limit >= length(TEST[0])

    out = tmp_path / "out"
    result, lines = run_prepare(
        write_jsonl(tmp_path / "in"), out, tokenizer=qwen_style_tokenizer_dir, max_prompt_length=limit
    )
    assert read_rows(out / "train.parquet") == EXPECTED_TRAIN[:4]
    assert read_rows(out / "test.parquet") == EXPECTED_TEST[:1]
    assert result.dropped == {"train": 1, "test": 1}
    assert result.rows == {"train": 4, "test": 1}
    expected_train = gsm8k.length_stats([n for _, n in good_train], limit)
    expected_test = gsm8k.length_stats([n for _, n in good_test], limit)
    assert result.lengths == {"train": expected_train, "test": expected_test}
    assert expected_train.over_limit == 1 and expected_train.max == length(TRAIN[7])
    assert lines[-6:] == [
        (
            f"train prompt tokens ({qwen_style_tokenizer_dir}, chat template + generation prompt):"
            f" {expected_train.describe()}"
        ),
        f"dropped 1 train rows over {limit} tokens",
        (
            f"test prompt tokens ({qwen_style_tokenizer_dir}, chat template + generation prompt):"
            f" {expected_test.describe()}"
        ),
        f"dropped 1 test rows over {limit} tokens",
        f"train: 4 rows written (3 bad, 1 over {limit} tokens) -> {out / 'train.parquet'}",
        f"test: 1 rows written (1 bad, 1 over {limit} tokens) -> {out / 'test.parquet'}",
    ]


def test_length_filter_agrees_with_verls_rlhf_dataset(tmp_path, qwen_style_tokenizer_dir):
    """verl's own filter_overlong_prompts keeps the same rows, and truncation=error accepts every row we keep."""
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    tokenizer = AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)
    source = write_jsonl(tmp_path / "in")
    everything, _ = run_prepare(source, tmp_path / "all", tokenizer=tokenizer)
    assert everything.dropped == {}
    limit = everything.lengths["train"].max - 1  # drops the long train prompt, not the others
    ours, _ = run_prepare(source, tmp_path / "cut", tokenizer=tokenizer, max_prompt_length=limit)

    def verl_dataset(path, filter_overlong):
        config = OmegaConf.create(
            {
                "max_prompt_length": limit,
                "filter_overlong_prompts": filter_overlong,
                "filter_overlong_prompts_workers": 1,
                "truncation": "error",
                "cache_dir": str(tmp_path / "verl-cache"),
            }
        )
        return RLHFDataset(data_files=[str(path)], tokenizer=tokenizer, config=config)

    for split in ("train", "test"):
        filtered = verl_dataset(tmp_path / "all" / f"{split}.parquet", True)
        kept_by_verl = [item["index"] for item in filtered.dataframe["extra_info"]]
        kept_by_us = [item["extra_info"]["index"] for item in read_rows(tmp_path / "cut" / f"{split}.parquet")]
        assert kept_by_us == kept_by_verl
        strict = verl_dataset(tmp_path / "cut" / f"{split}.parquet", False)
        for position in range(len(strict)):
            assert int(strict[position]["attention_mask"].sum()) <= limit
    assert ours.dropped["train"] == 1


def test_tokenizer_without_chat_template_is_refused(tmp_path, qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)
    tokenizer.chat_template = None
    with pytest.raises(VerlfitError, match="has no chat template"):
        run_prepare(write_jsonl(tmp_path / "in"), tmp_path / "out", tokenizer=tokenizer)


def test_nothing_left_after_filtering_is_an_error(tmp_path, qwen_style_tokenizer_dir):
    out = tmp_path / "out"
    with pytest.raises(VerlfitError, match=r"^no train rows left to write \(8 read, 3 bad, 5 over the prompt limit\)"):
        run_prepare(write_jsonl(tmp_path / "in"), out, tokenizer=qwen_style_tokenizer_dir, max_prompt_length=1)
    assert not out.exists()


# --------------------------------------------------------------------------- writing


def test_rerun_is_byte_identical(tmp_path):
    source = write_jsonl(tmp_path / "in")
    run_prepare(source, tmp_path / "a")
    first = {name: (tmp_path / "a" / name).read_bytes() for name in ("train.parquet", "test.parquet")}
    run_prepare(source, tmp_path / "a")
    run_prepare(source, tmp_path / "b")
    for name, data in first.items():
        assert (tmp_path / "a" / name).read_bytes() == data
        assert (tmp_path / "b" / name).read_bytes() == data
    assert sorted(os.listdir(tmp_path / "a")) == [".verlfit-written.json", "test.parquet", "train.parquet"]


def test_disk_full_mid_write_leaves_previous_output_and_no_temp_file(tmp_path, monkeypatch):
    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "old", TRAIN[:3], TEST[:1]), out)
    before = {name: (out / name).read_bytes() for name in ("train.parquet", "test.parquet")}

    real_to_parquet = datasets.Dataset.to_parquet
    written: list[str] = []

    def full_on_second_file(self, path, *args, **kwargs):
        written.append(path)
        if len(written) == 1:
            return real_to_parquet(self, path, *args, **kwargs)
        with open(path, "wb") as handle:
            handle.write(b"PAR1 half a file")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(datasets.Dataset, "to_parquet", full_on_second_file)
    with pytest.raises(VerlfitError) as caught:
        run_prepare(write_jsonl(tmp_path / "new"), out, force=True)
    assert (
        str(caught.value)
        == f"cannot write to --output {out}: no space left on the disk of {out}; what was there before is unchanged\n"
        f"  fix: free space on the disk of {out}, or pass --output on another disk"
    )
    # both files went into one folder built beside the output (switched in whole, or not at all)
    assert len({Path(path).parent for path in written}) == 1 and Path(written[0]).parent.parent == tmp_path
    assert Path(written[0]).parent.name.startswith(".out.verlfit-building-")
    assert sorted(os.listdir(tmp_path)) == ["new", "old", "out"]  # the building folder removed
    assert sorted(os.listdir(out)) == [
        ".verlfit-written.json",
        "test.parquet",
        "train.parquet",
    ]  # the first run's marker, unchanged
    for name, data in before.items():
        assert (out / name).read_bytes() == data


def test_output_directory_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(
        VerlfitError,
        match=f"^--output {re.escape(str(blocker / 'gsm8k'))}: {re.escape(str(blocker))} is a file, not a folder",
    ):
        run_prepare(write_jsonl(tmp_path / "in"), blocker / "gsm8k")


def test_is_prepared(tmp_path):
    out = tmp_path / "out"
    assert not gsm8k.is_prepared(out)
    run_prepare(write_jsonl(tmp_path / "in"), out)
    assert gsm8k.is_prepared(out)
    pq.write_table(pa.table({"question": ["q"], "answer": ["#### 1"]}), out / "test.parquet")
    assert not gsm8k.is_prepared(out)
    (out / "test.parquet").write_bytes(b"garbage")
    assert not gsm8k.is_prepared(out)


# --------------------------------------------------------------------------- input formats and the hub


def _as_json_array(directory: Path) -> Path:
    directory.mkdir()
    for name, rows in (("train", TRAIN), ("test", TEST)):
        (directory / f"{name}.json").write_text(json.dumps(rows, indent=1))
    return directory


def _as_hub_layout(directory: Path) -> Path:
    (directory / "main").mkdir(parents=True)
    for name, rows in (("train", TRAIN), ("test", TEST)):
        pq.write_table(pa.Table.from_pylist(rows), directory / "main" / f"{name}-00000-of-00001.parquet")
    return directory


def _as_parquet_shards(directory: Path) -> Path:
    directory.mkdir()
    for name, rows in (("train", TRAIN), ("test", TEST)):
        half = len(rows) // 2
        pq.write_table(pa.Table.from_pylist(rows[:half]), directory / f"{name}-00000-of-00002.parquet")
        pq.write_table(pa.Table.from_pylist(rows[half:]), directory / f"{name}-00001-of-00002.parquet")
    return directory


def _as_parquet_with_extra_column(directory: Path) -> Path:
    directory.mkdir()
    for name, rows in (("train", TRAIN), ("test", TEST)):
        table = pa.Table.from_pylist([{"id": i, **item} for i, item in enumerate(rows)])
        pq.write_table(table, directory / f"{name}.parquet")
    return directory


@pytest.mark.parametrize(
    "make_input", [_as_json_array, _as_hub_layout, _as_parquet_shards, _as_parquet_with_extra_column]
)
def test_every_input_format_gives_the_same_files(tmp_path, make_input):
    run_prepare(write_jsonl(tmp_path / "jsonl"), tmp_path / "reference")
    run_prepare(make_input(tmp_path / "input"), tmp_path / "out")
    for name in ("train.parquet", "test.parquet"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()


HUB_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
"""


def test_hub_code_path_on_a_local_copy_of_the_hub_repository(tmp_path, monkeypatch):
    """The real datasets.load_dataset(HUB_DATASET, "main") call, pointed at a local repository laid out like the
    hub's."""
    hub = _as_hub_layout(tmp_path / "openai-gsm8k")
    (hub / "README.md").write_text(HUB_README)
    monkeypatch.setattr(gsm8k, "HUB_DATASET", str(hub))
    run_prepare(write_jsonl(tmp_path / "jsonl"), tmp_path / "reference")
    result, lines = run_prepare(None, tmp_path / "out")
    assert lines[0].startswith(f"loading {hub} (config main) through datasets: endpoint ")
    assert lines[1] == f"loaded {hub}: train 8 rows, test 3 rows"
    assert result.rows == {"train": 5, "test": 2}
    for name in ("train.parquet", "test.parquet"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()


def test_hub_offline_without_cache_is_a_clear_error(tmp_path):
    """A fresh process, so HF_HOME / HF_ENDPOINT / offline are read the way a user's shell sets them."""
    env = dict(os.environ)
    env.update(
        HF_HOME=str(tmp_path / "hf-home"),
        HF_ENDPOINT="http://127.0.0.1:9",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
    )
    env.pop("HF_DATASETS_CACHE", None)
    out = tmp_path / "out"
    completed = subprocess.run(
        [sys.executable, "-m", "verlfit", "prepare-gsm8k", "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1
    cache = tmp_path / "hf-home" / "datasets"
    assert completed.stdout.startswith(
        f"loading openai/gsm8k (config main) through datasets: endpoint http://127.0.0.1:9, cache {cache}, offline"
    )
    assert "verlfit: error: cannot load openai/gsm8k (config main): " in completed.stderr
    assert (
        "fix: offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) needs openai/gsm8k already in the cache under"
        f" {cache}" in completed.stderr
    )
    assert "Traceback" not in completed.stderr
    assert not out.exists()


def _mixed_formats(directory: Path) -> None:
    write_jsonl(directory)
    pq.write_table(pa.Table.from_pylist(TRAIN), directory / "train.parquet")


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d.mkdir(), r"^no GSM8K files in {d}: expected train and test files"),
        (
            lambda d: (d.mkdir(), (d / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')),
            r"^{d} has no test file \(found train.jsonl\)",
        ),
        (_mixed_formats, r"^{d} has train files in more than one format \(train.jsonl, train.parquet\)"),
        (  # issue 32 item 17: the whole file and its shard were both read, every row twice
            lambda d: (write_jsonl(d), (d / "train-00001.jsonl").write_text((d / "train.jsonl").read_text())),
            r"^{d} has both train.jsonl and train shards \(train-00001.jsonl\): verlfit would read them all, so the"
            r" rows would most likely count twice\n"
            r"  fix: keep either train.jsonl or its shards train-\*.jsonl in {d}$",
        ),
        (
            lambda d: (
                d.mkdir(),
                [(d / f"{s}.jsonl").write_text('{"q": "x", "answer": "#### 1"}\n') for s in ("train", "test")],
            ),
            r"^{d}/train.jsonl has no question column \(columns: q, answer\)",
        ),
        (
            lambda d: (d.mkdir(), [(d / f"{s}.jsonl").write_text("{not json\n") for s in ("train", "test")]),
            r"^cannot read {d}/train.jsonl line 1: not JSON \(Expecting property name enclosed in double quotes at"
            r" character 2\)\n  fix: repair or remove that line",
        ),
    ],
)
def test_input_errors(tmp_path, setup, message):
    directory = tmp_path / "in"
    setup(directory)
    with pytest.raises(VerlfitError, match=message.format(d=re.escape(str(directory)))):
        run_prepare(directory, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_bad_line_in_the_middle_of_a_jsonl_is_named_by_its_line_and_datasets_logs_nothing(tmp_path, capfd):
    """new-user trial: one cut line (the 5th) was reported as pyarrow's "Column(/answer) changed from string to object
    in row 4", after a stray datasets log line, and prepare-gsm8k exited 1."""
    directory = tmp_path / "in"
    write_jsonl(directory)
    lines = (directory / "train.jsonl").read_text().splitlines(keepends=True)
    cut = '{"question": "cut", "answer": '
    (directory / "train.jsonl").write_text("".join(lines[:4]) + cut + "\n" + "".join(lines[4:]))
    (directory / "test.jsonl").write_text((directory / "test.jsonl").read_text() + "[1, 2]\n")
    with pytest.raises(VerlfitError) as caught:
        run_prepare(directory, tmp_path / "out")
    assert caught.value.exit_code == 2
    assert str(caught.value).splitlines()[0] == (
        # the value is missing after the cut line's last character
        f"cannot read {directory}/train.jsonl line 5: not JSON (Expecting value at character {len(cut) + 1})"
    )
    assert capfd.readouterr().err == ""  # datasets' own "Failed to load JSON from file" line is not printed
    import datasets

    assert datasets.logging.get_verbosity() == datasets.logging.WARNING  # its logger is put back
    (directory / "train.jsonl").write_text("".join(lines))
    with pytest.raises(
        VerlfitError,
        match=rf"^cannot read {re.escape(str(directory))}/test.jsonl line \d+: a JSON list," " not an object",
    ):
        run_prepare(directory, tmp_path / "out")


def test_input_that_is_not_a_directory(tmp_path):
    with pytest.raises(VerlfitError, match="is not a directory"):
        run_prepare(tmp_path / "missing", tmp_path / "out")


def test_output_that_is_a_file_and_a_missing_tokenizer_directory(tmp_path):
    from verlfit.gsm8k import load_tokenizer

    (tmp_path / "afile").write_text("x")
    with pytest.raises(
        VerlfitError,
        match="afile is a file, not a folder: verlfit prepare-gsm8k writes a folder and never replaces a file",
    ):
        run_prepare(write_jsonl(tmp_path / "in"), tmp_path / "afile")
    assert (tmp_path / "afile").read_text() == "x"
    with pytest.raises(VerlfitError, match="--tokenizer /nonexistent/tok: no such directory"):
        load_tokenizer("/nonexistent/tok")


def test_tokenizer_directory_without_tokenizer_files_and_output_below_a_file(tmp_path):
    from verlfit.gsm8k import load_tokenizer

    (tmp_path / "model").mkdir()
    with pytest.raises(VerlfitError, match="the directory holds no tokenizer files"):
        load_tokenizer(str(tmp_path / "model"))
    (tmp_path / "afile").write_text("x")
    with pytest.raises(VerlfitError, match=r"afile/sub: .*afile is a file, not a folder"):
        run_prepare(write_jsonl(tmp_path / "in"), tmp_path / "afile" / "sub")


def test_an_empty_split_file_is_named_and_nothing_is_written(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "train.jsonl").write_text("\n\n")
    (tmp_path / "in" / "test.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n')
    with pytest.raises(VerlfitError) as caught:
        gsm8k.prepare(source=tmp_path / "in", output_dir=tmp_path / "out")
    assert caught.value.message == f"{tmp_path / 'in' / 'train.jsonl'}: the file is empty"
    assert not (tmp_path / "out").exists()


def test_a_bare_tokenizer_name_that_is_no_directory_is_not_looked_up_on_the_hub():
    with pytest.raises(VerlfitError) as caught:
        gsm8k.load_tokenizer("nodir")
    assert caught.value.message == "--tokenizer nodir: no such directory (and not a hub name, which is owner/name)"


def test_a_plain_kill_while_writing_leaves_no_temporary_file_and_the_old_output_unchanged(tmp_path):
    import os
    import signal

    from verlfit.output_files import check_output

    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # what a `verlfit prepare-gsm8k` process starts with
    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "raw"), out)
    before = {path.name: path.read_bytes() for path in out.iterdir()}

    class KilledWhileWriting:
        def to_parquet(self, path):
            with open(path, "wb") as handle:
                handle.write(b"half a parquet")
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(SystemExit) as stopped:
        gsm8k.write_tables(check_output(out, "verlfit prepare-gsm8k", force=True), {"train": KilledWhileWriting()})
    assert stopped.value.code == 143  # 128 + SIGTERM, as a shell reports it
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out", "raw"]  # no building folder left
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored once the write is over


def test_a_folder_already_in_verls_format_is_recognised_as_such(tmp_path):
    prepared = tmp_path / "prepared"
    run_prepare(write_jsonl(tmp_path / "raw"), prepared)
    with pytest.raises(VerlfitError) as caught:
        gsm8k.prepare(source=prepared, output_dir=tmp_path / "again")
    assert caught.value.message.startswith(
        f"{prepared / 'train.parquet'} is already in verl's format (columns: data_source, prompt, ability,"
        " reward_model, extra_info)"
    )
    assert (
        caught.value.fix
        == "train on it directly (verlfit train --data DIR), or point --input at the raw question/answer files"
    )
    assert not (tmp_path / "again").exists()


def test_output_into_the_input_folder_is_refused(tmp_path):
    raw = write_jsonl(tmp_path / "raw")
    with pytest.raises(VerlfitError) as caught:
        gsm8k.prepare(source=raw, output_dir=raw)
    assert caught.value.message.startswith(
        f"--output {raw} is where --input's files are read from ({raw}, or its main/ folder): "
    )
    assert sorted(path.name for path in raw.iterdir()) == ["test.jsonl", "train.jsonl"]
    hub_layout = write_jsonl(tmp_path / "hub" / "main")  # the hub's layout: --input hub reads hub/main
    with pytest.raises(VerlfitError, match="is where --input's files are read from"):
        gsm8k.prepare(source=tmp_path / "hub", output_dir=hub_layout)


def test_output_inside_the_input_folder_is_refused_but_for_the_verl_folder_train_reads(tmp_path):
    # new-user trial: --input data/raw --output data/raw/prepared was written inside the raw files' folder
    raw = write_jsonl(tmp_path / "raw")
    with pytest.raises(VerlfitError) as caught:
        gsm8k.prepare(source=raw, output_dir=raw / "prepared")
    assert (caught.value.message, caught.value.fix, caught.value.exit_code) == (
        (
            f"--output {raw / 'prepared'} lies inside --input {raw}: verl's files would sit among the raw files they"
            f" are made from (moving, copying or cleaning {raw} takes them along), and verlfit train --data {raw} reads"
            f" {raw / 'verl'}, not this folder"
        ),
        (
            f"pass --output a folder outside {raw} (e.g. data/gsm8k), or {raw / 'verl'}, where verlfit train --data"
            f" {raw} reads (and would prepare) them"
        ),
        2,
    )
    assert sorted(path.name for path in raw.iterdir()) == ["test.jsonl", "train.jsonl"]
    with pytest.raises(VerlfitError, match=r"lies inside --input"):
        gsm8k.prepare(source=raw, output_dir=raw / "deeper" / "prepared")
    # --input/verl: what the data check's fix says (verlfit prepare-gsm8k --input DIR --output DIR/verl), and where
    # train prepares the same files itself
    result, _ = run_prepare(raw, raw / "verl")
    assert result.rows == {"train": 5, "test": 2}


def test_a_file_verlfit_did_not_write_in_the_output_is_kept_even_with_force(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run_prepare(write_jsonl(tmp_path / "raw"), out)
    assert sorted(path.name for path in out.iterdir()) == [".verlfit-written.json", "test.parquet", "train.parquet"]
    (out / ".train.parquet.notours.tmp").write_bytes(b"someone else's")
    # a file verlfit did not write: refused, with --force too, and kept
    for force in (False, True):
        with pytest.raises(
            VerlfitError,
            match=r"holds files verlfit did not write \(verlfit did not write \.train\.parquet\.notours\.tmp\)",
        ):
            run_prepare(write_jsonl(tmp_path / "raw"), out, force=force)
    assert (out / ".train.parquet.notours.tmp").read_bytes() == b"someone else's"


def test_a_hangup_while_writing_unwinds_the_same_way(tmp_path):
    import os
    import signal

    class HungUpWhileWriting:
        def to_parquet(self, path):
            Path(path).write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGHUP)

    # under nohup (SIGHUP ignored) verlfit leaves the disposition alone and the hangup does nothing: the test needs
    # Python's default, as a shell gives it
    from verlfit.output_files import check_output

    inherited = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    try:
        with pytest.raises(SystemExit) as stopped:
            gsm8k.write_tables(check_output(tmp_path / "out", "verlfit prepare-gsm8k"), {"train": HungUpWhileWriting()})
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGHUP, inherited)
    assert stopped.value.code == 128 + signal.SIGHUP
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "offline, message, fix",
    [
        (
            "1",
            (
                "verlfit: error: --tokenizer Qwen/Qwen2.5-0.5B-Instruct is not in the local hub cache, and"
                " HF_HUB_OFFLINE=1 is set, so it is not downloaded"
            ),
            (
                "fix: pass --tokenizer the model's local directory (holding tokenizer.json, as save_pretrained or"
                " `huggingface-cli download MODEL --local-dir DIR` on a connected machine leave it), or fill the cache"
                " where the hub is reachable (huggingface-cli download Qwen/Qwen2.5-0.5B-Instruct) with the same"
                " HF_HOME"
            ),
        ),
        (
            "",
            (
                "verlfit: error: --tokenizer Qwen/Qwen2.5-0.5B-Instruct is not in the local hub cache and"
                " http://127.0.0.1:9 is unreachable ("
            ),
            (
                "fix: pass --tokenizer the model's local directory (holding tokenizer.json, as save_pretrained or"
                " `huggingface-cli download MODEL --local-dir DIR` on a connected machine leave it), or set HF_ENDPOINT"
                " to a reachable mirror"
            ),
        ),
    ],
)
def test_a_hub_tokenizer_without_the_hub_fails_fast_with_a_fix_for_the_case(tmp_path, offline, message, fix):
    """A fresh process (the user's shell): no cache, the hub unreachable. The tokenizer is asked for before any
    data is read, so nothing is written; the fix never says to set HF_HUB_OFFLINE (set or not, an uncached model
    stays unavailable)."""
    env = dict(os.environ)
    env.update(
        HF_HOME=str(tmp_path / "hf-home"),
        HF_ENDPOINT="http://127.0.0.1:9",
        HF_HUB_OFFLINE=offline,
        TRANSFORMERS_OFFLINE=offline,
        HF_DATASETS_OFFLINE=offline,
    )
    env.pop("HF_HUB_CACHE", None)
    out = tmp_path / "out"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "verlfit",
            "prepare-gsm8k",
            "--input",
            str(write_jsonl(tmp_path / "raw")),
            "--output",
            str(out),
            "--tokenizer",
            "Qwen/Qwen2.5-0.5B-Instruct",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert completed.returncode == 1
    assert message in completed.stderr
    assert fix in completed.stderr
    assert "HF_HUB_OFFLINE=1 so" not in completed.stderr and "Traceback" not in completed.stderr
    assert completed.stdout == ""  # the tokenizer first: no data was read
    assert not out.exists()


def test_a_hub_tokenizer_is_probed_once_with_the_doctors_timeout(monkeypatch):
    import time

    asked = []

    def head(url, timeout, headers):
        asked.append((url, timeout))
        raise OSError("timed out")

    started = time.monotonic()
    with pytest.raises(VerlfitError) as caught:
        gsm8k.load_tokenizer(
            "Qwen/Qwen2.5-0.5B-Instruct",
            environ={"HF_ENDPOINT": "https://mirror.example/"},
            head=head,
            cache_lookup=lambda repo, name: None,
        )
    assert time.monotonic() - started < 3.0
    assert asked == [("https://mirror.example/Qwen/Qwen2.5-0.5B-Instruct/resolve/main/tokenizer_config.json", 3.0)]
    assert (
        caught.value.message
        == "--tokenizer Qwen/Qwen2.5-0.5B-Instruct is not in the local hub cache and https://mirror.example is"
        " unreachable (timed out)"
    )
    for status, fragment in (
        (404, "does not exist at https://mirror.example (HTTP 404)"),
        (401, "at https://mirror.example needs authorisation (HTTP 401): gated or private"),
    ):
        with pytest.raises(VerlfitError) as caught:
            gsm8k.load_tokenizer(
                "Qwen/Qwen2.5-0.5B-Instruct",
                environ={"HF_ENDPOINT": "https://mirror.example/"},
                head=lambda url, timeout, headers: status,
                cache_lookup=lambda repo, name: None,
            )
        assert caught.value.message == f"--tokenizer Qwen/Qwen2.5-0.5B-Instruct {fragment}"


def test_a_cached_hub_tokenizer_loads_without_asking_the_hub(tmp_path, qwen_style_tokenizer_dir, monkeypatch):
    """tokenizer_config.json in the cache: AutoTokenizer with local_files_only, no HEAD."""
    from transformers import AutoTokenizer

    seen = []
    real = AutoTokenizer.from_pretrained
    monkeypatch.setattr(
        AutoTokenizer,
        "from_pretrained",
        lambda name, **kwargs: seen.append((name, kwargs)) or real(qwen_style_tokenizer_dir),
    )
    cached = Path(qwen_style_tokenizer_dir) / "tokenizer_config.json"

    def head(url, timeout, headers):
        raise AssertionError("the hub was asked")

    tokenizer = gsm8k.load_tokenizer(
        "Qwen/Qwen2.5-0.5B-Instruct", environ={}, head=head, cache_lookup=lambda repo, name: str(cached)
    )
    assert seen == [("Qwen/Qwen2.5-0.5B-Instruct", {"local_files_only": True})]
    assert tokenizer.chat_template


@pytest.mark.parametrize("layout", ["flat", "hub"])
def test_train_prepares_raw_files_of_its_data_directory_not_the_hub(tmp_path, tiny_qwen2_dir, capsys, layout):
    """`verlfit train --data DIR` with raw GSM8K in DIR: verl's files come from those rows, into DIR/verl, exactly as
    `prepare-gsm8k --input DIR --output DIR/verl` writes them (the hub is offline here: conftest)."""
    from verlfit.train.inputs import data_ready
    from verlfit.commands.train import prepare_launch

    raw = tmp_path / "raw"
    if layout == "flat":
        write_jsonl(raw)
    else:
        (raw / "main").mkdir(parents=True)
        for split, rows in (("train", TRAIN), ("test", TEST)):
            pq.write_table(pa.Table.from_pylist(rows), raw / "main" / f"{split}-00000-of-00001.parquet")
    args = cli.build_parser().parse_args(
        [
            "train",
            "--profile",
            "p40",
            "--plan",
            "off",
            "--dry-run",
            "--data",
            str(raw),
            "--model",
            tiny_qwen2_dir,
            "--run-dir",
            str(tmp_path / "run"),
        ]
    )
    plan = prepare_launch(args, environ={}, gpu=None)
    assert plan.settings.data_dir == str((raw / "verl").resolve())
    assert f"data.train_files={raw.resolve() / 'verl' / 'train.parquet'}" in plan.overrides
    data_ready(plan.settings, plan.data_keys, prepare=True)
    assert capsys.readouterr().out.startswith(
        f"verlfit: {raw.resolve() / 'verl'} has no train.parquet/test.parquet: preparing GSM8K first, from the raw"
        f" files in {raw.resolve()}\nread {raw.resolve()}: train "
    )
    reference, _ = run_prepare(raw, tmp_path / "reference", tokenizer=tiny_qwen2_dir, max_prompt_length=512)
    for name in ("train.parquet", "test.parquet"):
        assert (raw / "verl" / name).read_bytes() == (tmp_path / "reference" / name).read_bytes()
    assert [row["extra_info"]["question"] for row in read_rows(raw / "verl" / "train.parquet")] == [
        row["extra_info"]["question"] for row in read_rows(tmp_path / "reference" / "train.parquet")
    ]
    # a second launch finds them prepared
    assert prepare_launch(args, environ={}, gpu=None).settings.data_dir == plan.settings.data_dir
    data_ready(plan.settings, plan.data_keys, prepare=True)
    assert capsys.readouterr().out == ""


def test_hub_unreachable_fails_fast_before_datasets_retries(tmp_path):
    """A fresh process with no offline switch and an endpoint that refuses connections: one probe, then the error
    (before: datasets' retries and tracebacks, then its own error)."""
    import time

    env = dict(
        os.environ,
        HF_HOME=str(tmp_path / "hf-home"),
        HF_ENDPOINT="http://127.0.0.1:9",
        HF_HUB_OFFLINE="",
        HF_DATASETS_OFFLINE="",
        TRANSFORMERS_OFFLINE="",
    )
    env.pop("HF_DATASETS_CACHE", None)
    out = tmp_path / "out"
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "verlfit", "prepare-gsm8k", "--output", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert time.monotonic() - started < 30
    assert completed.returncode == 1
    cache = tmp_path / "hf-home" / "datasets"
    assert completed.stderr.startswith(
        "verlfit: error: cannot load openai/gsm8k (config main): http://127.0.0.1:9 is unreachable ("
    )
    assert (
        f"and it is not in the datasets cache under {cache}\n  fix: set HF_ENDPOINT to a reachable mirror, or copy the"
        " hub's main/train-*.parquet and main/test-*.parquet here by hand and pass --input DIR" in completed.stderr
    )
    assert "Traceback" not in completed.stderr and "Retrying" not in completed.stderr
    assert not out.exists()


def test_a_failed_write_removes_the_directories_it_created_only(tmp_path, monkeypatch):
    def full(self, path, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    source = write_jsonl(tmp_path / "src")
    monkeypatch.setattr(datasets.Dataset, "to_parquet", full)
    with pytest.raises(VerlfitError, match="no space left on the disk of"):
        run_prepare(source, tmp_path / "new" / "out")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()
    with pytest.raises(VerlfitError, match="no space left on the disk of"):
        run_prepare(source, tmp_path / "kept")
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept", "src"]  # no building folder left


def test_permission_on_the_parent_is_named_as_such(tmp_path, monkeypatch):
    real_mkdir = Path.mkdir
    readonly = tmp_path / "ro"
    readonly.mkdir()

    def denied(self, *args, **kwargs):  # tests run as root, which no file mode stops: the kernel's answer, faked
        if self.parent == readonly:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(VerlfitError) as caught:
        run_prepare(write_jsonl(tmp_path / "src"), readonly / "sub")
    assert (
        str(caught.value)
        == f"cannot write to --output {readonly / 'sub'}: permission denied ({readonly} is not writable for this"
        " user)\n"
        "  fix: pass --output a folder you can write (it is created if missing)"
    )
