"""verlfit eval: verl's strict GSM8K score on fixtures with fixed responses, the HF generate path on a tiny
model, paired comparison, outputs and run directories."""

import errno
import json
import shutil
import math
import statistics
from pathlib import Path

import pytest

from verlfit import cli, evaluate
from verlfit.errors import VerlfitError
from verlfit.gsm8k import features, make_row

# (question, ground truth, fixed response, expected score, expected extracted answer)
CASES = [
    ("q0 apples", "72", "She has 48 + 24 = 72 apples.\n#### 72", 1.0, "72"),
    ("q1 commas", "1234", "The total is 1,234.\n#### 1,234", 1.0, "1234"),
    ("q2 negative", "-5", "The change is -5 degrees.\n#### -5", 1.0, "-5"),
    ("q3 no marker", "18", "The answer is 18.", 0.0, None),
    ("q4 wrong", "10", "#### 11", 0.0, "11"),
    ("q5 last wins", "7", "#### 3 first guess, then fixed: #### 7", 1.0, "7"),
    ("q6 dollar", "30", "It costs $30.\n#### $30", 0.0, None),  # strict pattern needs a digit right after '#### '
    ("q7 decimal", "2.5", "#### 2.50", 0.0, "2.50"),  # compared as text, as verl does
]


@pytest.fixture
def data_dir(tmp_path):
    from datasets import Dataset

    rows = [
        make_row("test", 100 + i, question, f"... #### {truth}", truth)
        for i, (question, truth, *_rest) in enumerate(CASES)
    ]
    # a folder of its own: the tests' outputs go beside it in tmp_path, as eval refuses an output inside its --data
    (tmp_path / "data").mkdir()
    Dataset.from_list(rows, features=features()).to_parquet(str(tmp_path / "data" / "test.parquet"))
    return tmp_path / "data"


def fixed(responses):
    """A generator returning, for each prompt, the response keyed by its question's first word (q0, q1, ...)."""
    calls = []

    def generate(prompts):
        calls.append(len(prompts))
        texts = [responses[p[0]["content"].split()[0]] for p in prompts]
        return [(text, len(text.split())) for text in texts]

    generate.calls = calls
    return generate


def test_scores_are_verls_strict_reward(data_dir):
    rows = evaluate.load_rows(data_dir)
    generator = fixed({q.split()[0]: r for q, _t, r, _s, _e in CASES})
    results = evaluate.evaluate_rows(rows, generator, batch_size=3)
    assert generator.calls == [3, 3, 2]
    assert [r.score for r in results] == [c[3] for c in CASES]
    assert [r.extracted for r in results] == [c[4] for c in CASES]
    assert [(r.row, r.index, r.ground_truth) for r in results] == [(i, 100 + i, c[1]) for i, c in enumerate(CASES)]
    summary = evaluate.summarize(results)
    words = [len(c[2].split()) for c in CASES]
    assert summary == {
        "rows": 8,
        "accuracy": 4 / 8,
        "correct": 4.0,
        "binary": True,
        "format_rate": 6 / 8,
        "mean_response_tokens": sum(words) / 8,
        "score": "verl default_compute_score, openai/gsm8k: gsm8k strict",
    }


def test_same_function_as_training_validation():
    from verl.utils.reward_score import default_compute_score, gsm8k

    for _q, truth, response, expected, _e in CASES:
        assert (
            default_compute_score("openai/gsm8k", response, truth) == gsm8k.compute_score(response, truth) == expected
        )


def test_limit_and_missing_data(data_dir, tmp_path):
    assert [r["extra_info"]["index"] for r in evaluate.load_rows(data_dir, limit=2)] == [100, 101]
    # issue 32 item 18: the fix was `verlfit prepare-gsm8k` whatever the data; it names the splits the folder has
    with pytest.raises(VerlfitError) as error:
        evaluate.load_rows(data_dir, split="dev")
    assert (
        str(error.value)
        == f"{data_dir / 'dev.parquet'} does not exist: --split dev names no file of {data_dir} (it has test.parquet)\n"
        "  fix: pass --split test"
    )
    with pytest.raises(VerlfitError) as error:
        evaluate.load_rows(tmp_path / "none")
    assert (
        str(error.value) == f"--data {tmp_path / 'none'} is not there, not a folder of prepared data\n"
        "  fix: pass --data the folder verlfit prepare-data (your own task) or verlfit prepare-gsm8k wrote"
    )


def test_paired_difference_reference_values():
    a = [1, 1, 0, 1, 0, 1, 1, 0, 1, 1]
    b = [0, 1, 0, 1, 1, 0, 0, 0, 1, 0]
    diffs = [x - y for x, y in zip(a, b)]  # 1,0,0,0,-1,1,1,0,0,1 -> mean 0.3
    result = evaluate.paired_difference(a, b)
    half = 1.959963984540054 * statistics.stdev(diffs) / math.sqrt(10)
    assert result["difference"] == pytest.approx(0.3)
    assert (result["low"], result["high"]) == (pytest.approx(0.3 - half), pytest.approx(0.3 + half))
    assert (result["only_model"], result["only_other"], result["rows"]) == (4, 1, 10)
    with pytest.raises(ValueError, match="same rows"):
        evaluate.paired_difference([1], [1, 0])


def test_run_eval_writes_rows_summary_and_comparison(data_dir, tmp_path):
    good = {q.split()[0]: r for q, _t, r, _s, _e in CASES}
    bad = dict(good, q0="#### 71", q1="no idea")

    def make_generator(path, **settings):
        assert settings == {"dtype": "float32", "attention": "sdpa", "max_new_tokens": 64}
        return fixed(good if path == "after" else bad)

    out = tmp_path / "out"
    summary = evaluate.run_eval(
        "after",
        str(data_dir),
        output=str(out),
        compare="before",
        profile="p40",
        max_new_tokens=64,
        batch_size=4,
        make_generator=make_generator,
        preflight=False,
    )
    lines = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert lines[1] == {
        "row": 1,
        "index": 101,
        "response": "The total is 1,234.\n#### 1,234",
        "extracted": "1234",
        "ground_truth": "1234",
        "score": 1.0,
        "response_tokens": 6,
        "scored_by": "verl default_compute_score, openai/gsm8k: gsm8k strict",
    }
    written = json.loads((out / "summary.json").read_text())
    assert (written["accuracy"], written["format_rate"], written["settings_from"]) == (0.5, 0.75, "--profile p40")
    other = json.loads((out / "compare" / "summary.json").read_text())
    assert (other["accuracy"], other["format_rate"]) == (2 / 8, 5 / 8)
    comparison = json.loads((out / "comparison.json").read_text())
    assert (comparison["difference"], comparison["only_model"], comparison["only_other"]) == (0.25, 2, 0)
    assert summary["comparison"]["difference"] == 0.25
    assert sorted(p.name for p in out.iterdir()) == [
        ".verlfit-written.json",
        "compare",
        "comparison.json",
        "rows.jsonl",
        "summary.json",
    ]  # no temporary files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]  # nothing left beside it
    text = evaluate.describe(summary)
    assert (
        "after: accuracy 0.5000 (4/8), format 0.7500" in text
        and "difference (model - other, same 8 rows): +0.2500" in text
    )


def test_hf_generate_batched_equals_one_by_one(tiny_family_dir):
    generator = evaluate.HFGenerator(tiny_family_dir, max_new_tokens=6, device="cpu")
    prompts = [
        [{"role": "user", "content": "What is 2 + 3?"}],
        [{"role": "user", "content": "A much longer question about apples and pears that pads the others"}],
        [{"role": "user", "content": "Hi"}],
    ]
    batched = generator(prompts)
    single = [generator([p])[0] for p in prompts]
    assert batched == single
    assert all(1 <= tokens <= 6 for _text, tokens in batched)
    assert generator.tokenizer.padding_side == "left"
    assert generator.extra == {"use_model_defaults": False}


def test_cli_on_a_run_directory_exports_on_the_fly(tmp_path, data_dir):
    from verl_checkpoint_maker import write_checkpoint_run

    run = write_checkpoint_run(tmp_path / "run", "--step", "2")
    assert (
        cli.main(
            ["eval", str(run), "--data", str(data_dir), "--limit", "3", "--max-new-tokens", "4", "--batch-size", "2"]
        )
        == 0
    )
    out = (
        run / "eval" / f"global_step_2-{data_dir.name}-test"
    )  # the data folder in the name: another data set never shares it
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["rows"], summary["step"], summary["run_dir"], summary["settings_from"], summary["dtype"]) == (
        3,
        2,
        str(run),
        "the run's profile p40",
        "float32",
    )
    assert len((out / "rows.jsonl").read_text().splitlines()) == 3
    assert not (run / "export").exists()  # exported into a temporary directory, removed


def test_not_a_model(tmp_path, data_dir):
    with pytest.raises(VerlfitError, match="neither a model directory"):
        evaluate.run_eval(str(tmp_path), str(data_dir))


def _never(path, **settings):
    raise AssertionError(f"{path} was loaded for scoring")


def test_a_path_that_does_not_exist_is_named_without_a_traceback(data_dir, capsys):
    assert cli.main(["eval", "/nonexistent", "--data", str(data_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "verlfit: error: MODEL /nonexistent: no such directory (and not a hub id, which is owner/name)\n  fix: pass a"
        " model directory"
    )
    assert "Traceback" not in err and "HFValidationError" not in err


@pytest.mark.parametrize(
    "offline, reason",
    [("1", "(HF_HUB_OFFLINE=1 is set, and it is not in the local hub cache)"), ("", "(http://127.0.0.1:9: ")],
)
def test_a_hub_looking_path_that_is_no_directory_fails_in_seconds(data_dir, monkeypatch, offline, reason):
    """runs/typo is a valid hub id as well as a relative path: with no such directory and no hub (offline, or an
    endpoint that refuses the connection) it fails at once, saying both."""
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    started = time.monotonic()
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval("runs/typo", str(data_dir), make_generator=_never)
    assert time.monotonic() - started < 10
    assert error.value.message.startswith(
        f"MODEL runs/typo is not a local directory and the hub is unreachable {reason}"
    )
    assert "check the path (ls runs)" in error.value.fix


def test_compare_is_checked_before_the_model_is_scored(data_dir, tiny_qwen2_dir, tmp_path):
    with pytest.raises(VerlfitError, match=r"^--compare \./nope: no such directory"):
        evaluate.run_eval(
            tiny_qwen2_dir, str(data_dir), compare="./nope", output=str(tmp_path / "a"), make_generator=_never
        )
    only_config = tmp_path / "only-config"
    only_config.mkdir()
    shutil.copy(Path(tiny_qwen2_dir) / "config.json", only_config / "config.json")
    with pytest.raises(
        VerlfitError, match=rf"^--compare {only_config}: {only_config} has no weights: "
    ):  # doctor's check (issue 32 item 10)
        evaluate.run_eval(
            tiny_qwen2_dir, str(data_dir), compare=str(only_config), output=str(tmp_path / "b"), make_generator=_never
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "only-config"]  # the outputs it created were removed


def test_an_unwritable_output_fails_before_any_row_is_scored(data_dir, tiny_qwen2_dir, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(tiny_qwen2_dir, str(data_dir), output=str(blocker / "ev"), make_generator=_never)
    assert error.value.message == f"--output {blocker / 'ev'}: {blocker} is a file, not a folder"
    real_mkdir = Path.mkdir

    def denied(self, *args, **kwargs):  # tests run as root, which no file mode stops: the kernel's answer, faked
        if self.parent == tmp_path / "ro":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(tiny_qwen2_dir, str(data_dir), output=str(tmp_path / "ro" / "ev"), make_generator=_never)
    assert (
        error.value.message
        == f"cannot write to --output {tmp_path / 'ro' / 'ev'}: permission denied ({tmp_path / 'ro'} is not writable"
        " for this user)"
    )

    def read_only(
        self, *args, **kwargs
    ):  # a read-only mount: EROFS, which no permission change fixes (issue 32 item 18)
        if self.parent == tmp_path / "ro":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(tiny_qwen2_dir, str(data_dir), output=str(tmp_path / "ro" / "ev"), make_generator=_never)
    assert (
        error.value.message
        == f"cannot write to --output {tmp_path / 'ro' / 'ev'}: {tmp_path / 'ro'} is on a read-only file system"
    )


def test_a_failed_result_write_names_the_output_and_leaves_it_as_it_was(data_dir, tmp_path, monkeypatch):
    out = tmp_path / "out"
    evaluate.run_eval(
        "after", str(data_dir), output=str(out), limit=4, make_generator=_fixed_generator, preflight=False
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(
            "after", str(data_dir), output=str(out), limit=8, make_generator=_fixed_generator, preflight=False
        )
    assert (
        str(error.value)
        == f"cannot write to --output {out}: no space left on the disk of {out}; what was there before is unchanged\n"
        f"  fix: free space on the disk of {out}, or pass --output on another disk"
    )
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]


def _fixed_generator(path, **settings):
    good = {q.split()[0]: r for q, _t, r, _s, _e in CASES}
    return fixed(good if path == "after" else dict(good, q0="#### 71", q1="no idea"))


def test_eval_without_compare_leaves_no_stale_comparison_and_never_a_users_file(data_dir, tmp_path):
    out = tmp_path / "out"
    evaluate.run_eval(
        "after",
        str(data_dir),
        output=str(out),
        compare="before",
        limit=8,
        make_generator=_fixed_generator,
        preflight=False,
    )
    evaluate.run_eval(
        "after", str(data_dir), output=str(out), limit=4, make_generator=_fixed_generator, preflight=False, force=True
    )
    assert sorted(p.name for p in out.iterdir()) == [
        ".verlfit-written.json",
        "rows.jsonl",
        "summary.json",
    ]  # the folder is replaced whole
    assert json.loads((out / "summary.json").read_text())["rows"] == 4
    (out / "notes.txt").write_text("mine")  # not eval's: must stay, and the eval is refused
    with pytest.raises(VerlfitError, match=r"holds files verlfit did not write \(verlfit did not write notes\.txt\)"):
        evaluate.run_eval(
            "after", str(data_dir), output=str(out), limit=4, make_generator=_never, preflight=False, force=True
        )
    assert (out / "notes.txt").read_text() == "mine"


def test_compare_with_itself_is_refused(data_dir, tiny_qwen2_dir, tmp_path, capsys):
    link = tmp_path / "same"
    link.symlink_to(tiny_qwen2_dir)
    assert (
        cli.main(
            ["eval", tiny_qwen2_dir, "--compare", str(link), "--data", str(data_dir), "--output", str(tmp_path / "o")]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert f"--compare {link} is the same model as MODEL {tiny_qwen2_dir}" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(VerlfitError, match="--compare Qwen/X is the same model as MODEL Qwen/X") as info:
        evaluate.run_eval("Qwen/X", str(data_dir), compare="Qwen/X", make_generator=_never)
    assert info.value.exit_code == 2


def test_result_lines_are_labelled_model_and_other(data_dir, tmp_path):
    summary = evaluate.run_eval(
        "after",
        str(data_dir),
        output=str(tmp_path / "o"),
        compare="before",
        make_generator=_fixed_generator,
        preflight=False,
    )
    lines = evaluate.describe(summary).splitlines()
    assert lines[0].startswith("model after: accuracy 0.5000 (4/8)") and lines[1].startswith(
        "other before: accuracy 0.2500 (2/8)"
    )


def test_outputs_get_the_umask_mode(data_dir, tmp_path):
    import os

    old = os.umask(0o022)
    try:
        out = tmp_path / "o"
        evaluate.run_eval(
            "after", str(data_dir), output=str(out), compare="before", make_generator=_fixed_generator, preflight=False
        )
    finally:
        os.umask(old)
    modes = {str(p.relative_to(out)): p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()}
    assert modes == {
        "rows.jsonl": 0o644,
        "summary.json": 0o644,
        "comparison.json": 0o644,
        "compare/rows.jsonl": 0o644,
        "compare/summary.json": 0o644,
        ".verlfit-written.json": 0o644,
    }


# --------------------------------------------------------------------------- any task


def _task_dir(tmp_path, data_source, rows):
    """test.parquet of (question, ground truth) rows with ``data_source``, in prepare-data's schema."""
    from datasets import Dataset

    from verlfit.prepare_data import make_row as task_row

    folder = tmp_path / data_source.replace("/", "_")
    folder.mkdir()
    Dataset.from_list(
        [task_row("test", i, q, t, data_source, "custom", None, None) for i, (q, t) in enumerate(rows)],
        features=features(),
    ).to_parquet(str(folder / "test.parquet"))
    return folder


def test_math_rows_are_scored_by_verls_math_scorer_and_labelled_so(tmp_path):
    # issue 26 finding 5: MATH data was scored by verl's MATH scorer but labelled "(gsm8k strict)", with a format
    # rate from GSM8K's extraction
    data = _task_dir(tmp_path, "lighteval/MATH", [("q0 sum", "4"), ("q1 frac", "\\frac{1}{2}")])
    generator = fixed({"q0": "so \\boxed{4}", "q1": "#### 0.5"})
    summary = evaluate.run_eval(
        "m", str(data), output=str(tmp_path / "out"), make_generator=lambda path, **settings: generator, preflight=False
    )
    assert (summary["accuracy"], summary["format_rate"], summary["score"]) == (
        0.5,
        None,
        "verl default_compute_score, lighteval/MATH",
    )
    assert "format" not in evaluate.describe(summary).split("\n")[0]
    assert "scored by verl default_compute_score, lighteval/MATH" in evaluate.describe(summary)


def test_a_data_source_verl_cannot_score_is_refused_before_generating(tmp_path):
    data = _task_dir(tmp_path, "my/units", [("q0 km", "1000")])
    with pytest.raises(VerlfitError) as caught:
        evaluate.run_eval("m", str(data), output=str(tmp_path / "out"), make_generator=_never, preflight=False)
    assert (
        caught.value.message
        == "verl 0.4.1 has no scorer for data_source 'my/units': nothing to score the responses with"
    )
    assert caught.value.fix == "pass --reward-function FILE.py[:FUNCTION], the reward the model was trained with"
    assert not (tmp_path / "out").exists()


def test_a_reward_function_scores_and_labels_the_rows(tmp_path, capsys):
    data = _task_dir(tmp_path, "my/units", [("q0 km", "1000"), ("q1 m", "0.001"), ("q2 cm", "10")])
    reward = tmp_path / "units_reward.py"
    reward.write_text(
        "def score(data_source, solution_str, ground_truth, extra_info=None):\n    return {'score': 1.0 if"
        " solution_str.strip().endswith('ANSWER: ' + ground_truth) else 0.0, 'source': data_source}\n"
    )
    generator = fixed({"q0": "ANSWER: 1000", "q1": "ANSWER: 0.01", "q2": "10"})
    summary = evaluate.run_eval(
        "m",
        str(data),
        output=str(tmp_path / "out"),
        make_generator=lambda path, **settings: generator,
        preflight=False,
        reward_function=f"{reward}:score",
    )
    assert (summary["accuracy"], summary["correct"], summary["format_rate"]) == (1 / 3, 1.0, None)
    assert summary["score"] == f"reward function {reward}:score"
    rows = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()]
    assert [(r["score"], r["extracted"], r["scored_by"]) for r in rows] == [
        (1.0, None, f"reward function {reward}:score"),
        (0.0, None, f"reward function {reward}:score"),
        (0.0, None, f"reward function {reward}:score"),
    ]
    with pytest.raises(VerlfitError, match="has no function 'compute_score' \\(its functions: score\\)"):
        evaluate.run_eval(
            "m",
            str(data),
            output=str(tmp_path / "out2"),
            make_generator=_never,
            preflight=False,
            reward_function=str(reward),
        )
    assert cli.main(["eval", "m", "--data", str(data), "--reward-function", f"{reward}:nope"]) == 2
    assert "has no function 'nope' (its functions: score)" in capsys.readouterr().err


def test_hf_generate_on_a_model_without_an_eos_id(tiny_family_dirs):
    # no eos id in config.json nor generation_config.json: the tokenizer's eos (<|im_end|>) stops generation
    generator = evaluate.HFGenerator(tiny_family_dirs["llama-no-eos"], max_new_tokens=6, device="cpu")
    assert generator.eos_token_id == generator.tokenizer.eos_token_id is not None
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}], [{"role": "user", "content": "Hi"}]]
    assert generator(prompts) == [generator([p])[0] for p in prompts]


def test_a_truncated_safetensors_file_is_the_clean_error_doctor_gives(data_dir, tiny_qwen2_dir, tmp_path, capsys):
    """issue 32 item 10: eval of a model folder whose model.safetensors was cut short ended in a traceback."""
    from verlfit.checks.model_folder import check_model_folder

    model = tmp_path / "cut"
    shutil.copytree(tiny_qwen2_dir, model)
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    doctor = check_model_folder(str(model), {})
    assert doctor.status == "FAIL"
    assert cli.main(["eval", str(model), "--data", str(data_dir), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err == f"verlfit: error: MODEL {model}: {doctor.message}\n  fix: {doctor.fix}\n"
    assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_rewards_other_than_0_and_1_are_a_mean_reward_not_an_accuracy(tmp_path, capsys):
    """issue 32 item 18: rewards of 1.0 and 0.5 were printed as "accuracy 0.75 (6/8)"."""
    data = _task_dir(tmp_path, "my/units", [(f"q{i} x", str(i)) for i in range(8)])
    reward = tmp_path / "half.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0 if solution_str"
        " == 'yes' else 0.5\n"
    )
    generator = fixed({f"q{i}": "yes" if i < 4 else "no" for i in range(8)})
    summary = evaluate.run_eval(
        "m",
        str(data),
        output=str(tmp_path / "out"),
        make_generator=lambda path, **settings: generator,
        preflight=False,
        reward_function=str(reward),
    )
    assert (summary["accuracy"], summary["binary"]) == (0.75, False)
    assert evaluate.describe(summary).startswith("m: mean reward 0.7500 over 8 rows, mean response 1.0 tokens")
    assert evaluate.score_text({"accuracy": 0.75, "correct": 6.0, "rows": 8, "binary": True}) == "accuracy 0.7500 (6/8)"
    # summaries written before "binary"
    assert evaluate.score_text({"accuracy": 0.75, "correct": 6.0, "rows": 8}) == "accuracy 0.7500 (6/8)"


def test_eval_help_speaks_of_own_tasks_and_reward_functions(capsys):
    with pytest.raises(SystemExit):
        cli.main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "prepared split (verlfit prepare-gsm8k, or verlfit prepare-data for your own task)" in text
    assert (
        "The score is your reward function (--reward-function FILE[:NAME]; a run directory brings the one it trained"
        " with)" in text
    )
    assert "--data data/shelf --reward-function data/shelf_reward.py # your own task" in text


# --------------------------------------------------------------------------- issue 32: eval loses nothing


def test_item3_eval_into_a_folder_holding_the_users_results_is_refused_and_they_are_kept(data_dir, tmp_path):
    mine = tmp_path / "results"
    mine.mkdir()
    (mine / "summary.json").write_text('{"mine": true}')
    (mine / "rows.jsonl").write_text('{"row": 0}\n')
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval("after", str(data_dir), output=str(mine), make_generator=_never, preflight=False)
    assert (
        error.value.message
        == f"--output {mine} holds files verlfit did not write (no verlfit marker: verlfit did not write rows.jsonl,"
        " summary.json): verlfit never replaces or deletes them, even with --force"
    )
    assert error.value.exit_code == 2
    assert (mine / "summary.json").read_text() == '{"mine": true}' and (
        mine / "rows.jsonl"
    ).read_text() == '{"row": 0}\n'


def test_item4_evals_of_two_runs_exports_or_two_data_folders_never_share_a_default_folder(
    data_dir, tmp_path, monkeypatch
):
    work = tmp_path / "work"
    models = []
    for run in ("runA", "runB"):
        model = work / run / "export" / "global_step_50"
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
        models.append(model)
    other_data = tmp_path / "other-data"
    shutil.copytree(data_dir, other_data, ignore=shutil.ignore_patterns("work", "other-data"))
    monkeypatch.chdir(work)
    outputs = []
    for model, data in ((models[0], data_dir), (models[1], data_dir), (models[0], other_data)):
        summary = evaluate.run_eval(
            str(model.relative_to(work)), str(data), limit=2, make_generator=_fixed_generator, preflight=False
        )
        outputs.append(summary["output"])
    assert outputs == [
        f"eval/runA-global_step_50-{data_dir.name}-test",
        f"eval/runB-global_step_50-{data_dir.name}-test",
        "eval/runA-global_step_50-other-data-test",
    ]
    for output, model in zip(
        outputs, ("runA/export/global_step_50", "runB/export/global_step_50", "runA/export/global_step_50")
    ):
        assert json.loads((work / output / "summary.json").read_text())["model"] == model  # each kept, none replaced


def test_item9_a_reward_function_raising_on_a_row_keeps_the_rows_scored_before_and_names_the_row(data_dir, tmp_path):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if 'first guess' in solution_str:\n"
        "        raise ValueError('cannot parse this answer')\n"
        "    return 1.0 if solution_str.strip().endswith(ground_truth) else 0.0\n"
    )
    out = tmp_path / "out"
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(
            "after",
            str(data_dir),
            output=str(out),
            batch_size=4,
            make_generator=_fixed_generator,
            preflight=False,
            reward_function=str(reward),
        )
    assert error.value.message == (
        f"eval stopped at row 5 of {data_dir / 'test.parquet'}: reward function {reward}:compute_score raised"
        " ValueError: cannot parse this answer; "
        f'the 5 rows scored before it are written to {out} (summary.json says "partial": true)'
    )
    assert error.value.exit_code == 1
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert [r["row"] for r in rows] == [0, 1, 2, 3, 4] and [r["score"] for r in rows] == [
        1.0,
        0.0,
        1.0,
        0.0,
        0.0,
    ]  # "1,234" is not "1234"
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["partial"], summary["stopped_at_row"], summary["rows"], summary["stopped_because"]) == (
        True,
        5,
        5,
        f"reward function {reward}:compute_score raised ValueError: cannot parse this answer",
    )


def _interrupted_on_the_second_batch(path, **settings):
    """_fixed_generator until its second batch, which Ctrl-C interrupts."""
    generate = _fixed_generator(path, **settings)

    def call(prompts):
        if generate.calls:
            raise KeyboardInterrupt
        return generate(prompts)

    call.calls = generate.calls
    return call


def test_item9_ctrl_c_while_generating_keeps_the_finished_batches_and_exits_130(data_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(
            "after",
            str(data_dir),
            output=str(out),
            batch_size=3,
            make_generator=_interrupted_on_the_second_batch,
            preflight=False,
        )
    assert error.value.exit_code == 130
    assert error.value.message.startswith(
        f"eval stopped at row 3 of {data_dir / 'test.parquet'}: interrupted (Ctrl-C); the 3 rows scored before it are"
        f" written to {out}"
    )
    assert json.loads((out / "summary.json").read_text())["partial"] is True
    assert len((out / "rows.jsonl").read_text().splitlines()) == 3


def test_a_stopped_eval_never_replaces_an_earlier_output(data_dir, tmp_path):
    """A finished eval, then the same eval interrupted: the finished one stays as it was, nothing of the partial
    one is written, and the message says so (it used to replace the finished result with the partial rows)."""
    out = tmp_path / "out"
    evaluate.run_eval(
        "after", str(data_dir), output=str(out), batch_size=3, make_generator=_fixed_generator, preflight=False
    )
    finished = {path.name: path.read_bytes() for path in out.iterdir()}

    with pytest.raises(VerlfitError) as error:
        evaluate.run_eval(
            "after",
            str(data_dir),
            output=str(out),
            batch_size=3,
            make_generator=_interrupted_on_the_second_batch,
            preflight=False,
        )
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        (
            f"eval stopped at row 3 of {data_dir / 'test.parquet'}: interrupted (Ctrl-C); nothing written: the 3 rows"
            f" scored before it do not replace what an earlier eval wrote to {out}, which is kept"
        ),
        "run the eval again to score every row",
        130,
    )
    assert {path.name: path.read_bytes() for path in out.iterdir()} == finished


def test_an_eval_of_a_run_is_refused_before_its_checkpoint_is_exported(tmp_path, data_dir, monkeypatch, capsys):
    from verl_checkpoint_maker import write_checkpoint_run

    from verlfit import export

    run = write_checkpoint_run(tmp_path / "run", "--step", "2")
    monkeypatch.setattr(export, "export", lambda *args, **kwargs: pytest.fail("exported before the output was checked"))
    assert cli.main(["eval", str(run), "--data", str(data_dir), "--output", str(run / "checkpoints")]) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: --output {run / 'checkpoints'} lies inside the run directory {run}, outside this command's"
        " own place there\n" in err
    )
    assert (
        "  fix: pass --output a new folder outside the run, or leave it out for this command's own place in the run,"
        f" {run / 'eval' / 'NAME'}\n" in err
    )


def test_issue44_a_reward_exiting_at_import_or_on_a_response_is_named_and_exits_non_zero(tmp_path, capsys, monkeypatch):
    """issue 44 item 2: a reward calling sys.exit(0) made eval exit 0, print nothing and write nothing."""
    data = _task_dir(tmp_path, "my/units", [("q0 km", "1000"), ("q1 m", "2"), ("q2 cm", "10")])
    capsys.readouterr()  # the datasets library's progress bar while the data was written
    at_import = tmp_path / "exits.py"
    at_import.write_text("import sys\nsys.exit(0)\n")
    assert (
        cli.main(
            ["eval", "m", "--data", str(data), "--reward-function", str(at_import), "--output", str(tmp_path / "out")]
        )
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"verlfit: error: the reward function exited the process while {at_import} was imported (SystemExit(0):"
        " sys.exit() or exit()): verl would lose the worker that imports it\n  fix: remove the exit call from the file"
        " (raise an exception for an error)\n"
    )
    assert not (tmp_path / "out").exists()
    # passes the check on every row (the ground truth, an empty response), then ends its process on a model's answer
    on_answer = tmp_path / "exits_later.py"
    on_answer.write_text(
        "import os\n\n\ndef compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    if solution_str == 'ANSWER?':\n        os._exit(0)\n    return float(solution_str == ground_truth)\n"
    )
    generator = fixed({"q0": "1000", "q1": "ANSWER?", "q2": "10"})
    out = tmp_path / "out2"
    with pytest.raises(VerlfitError) as caught:
        evaluate.run_eval(
            "m",
            str(data),
            output=str(out),
            make_generator=lambda path, **settings: generator,
            preflight=False,
            reward_function=str(on_answer),
        )
    assert (caught.value.message, caught.value.exit_code) == (
        f"eval stopped at row 1 of {data / 'test.parquet'}: the reward function exited the process: reward function"
        f" {on_answer}:compute_score (exit status 0 without SystemExit: os._exit()); verl would lose the worker scoring"
        f' the batch; the 1 rows scored before it are written to {out} (summary.json says "partial": true)',
        1,
    )
    assert [json.loads(line)["score"] for line in (out / "rows.jsonl").read_text().splitlines()] == [1.0]


def test_a_response_budget_past_the_models_context_is_refused_before_any_row(
    data_dir, tiny_qwen2_dir, tmp_path, capsys
):
    """New-user trial: `eval --max-new-tokens 100000` on a model with a 32768-token context was accepted, then
    printed nothing for 300 s. The longest prompt plus the budget must fit in max_position_embeddings."""
    from transformers import AutoConfig, AutoTokenizer

    context = AutoConfig.from_pretrained(tiny_qwen2_dir).max_position_embeddings
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    rows = evaluate.load_rows(data_dir)
    longest = max(
        len(tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=True))
        for row in rows
    )
    out = tmp_path / "ev"
    assert (
        cli.main(
            ["eval", tiny_qwen2_dir, "--data", str(data_dir), "--output", str(out), "--max-new-tokens", str(context)]
        )
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"verlfit: error: --max-new-tokens {context:,} and the longest prompt's {longest:,} tokens do not fit in"
        f" MODEL {tiny_qwen2_dir}'s context of {context:,} tokens (max_position_embeddings in its config.json): past"
        " it the model's positions are untrained, and each batch would generate for as long as the budget allows\n "
        f" fix: pass --max-new-tokens {context - longest} or less (the run's validation used its"
        " --max-response-length)\n"
    )
    assert not out.exists()
    seen = []

    def records(path, **settings):
        seen.append(settings["max_new_tokens"])
        return fixed({case[0].split()[0]: case[2] for case in CASES})

    evaluate.run_eval(
        tiny_qwen2_dir, str(data_dir), output=str(out), max_new_tokens=context - longest, make_generator=records
    )
    assert seen == [context - longest]


def test_a_flash_attention_profile_on_a_cpu_falls_back_to_sdpa_and_says_so(
    data_dir, tiny_qwen2_dir, tmp_path, monkeypatch
):
    """New-user trial: `eval --profile a10` on a CPU tracebacked on flash_attn (transformers' ImportError)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    seen = []

    def records(path, **settings):
        seen.append((settings["dtype"], settings["attention"]))
        return fixed({case[0].split()[0]: case[2] for case in CASES})

    summary = evaluate.run_eval(
        tiny_qwen2_dir, str(data_dir), output=str(tmp_path / "ev"), profile="a10", make_generator=records
    )
    assert seen == [("bfloat16", "sdpa")]
    assert (summary["attention"], summary["settings_from"]) == (
        "sdpa",
        "--profile a10, with SDPA for its flash_attention_2 (no CUDA GPU here; the same attention, another kernel)",
    )


@pytest.mark.parametrize("split", ["../../elsewhere/test", "..", ".", "sub/test", ""])
def test_a_split_that_is_a_path_is_refused_before_anything_is_read(split, capsys):
    """new-user trial: --split ../../DIR/test read a file outside --data and wrote the eval folder outside eval/."""
    from verlfit import cli

    with pytest.raises(SystemExit) as refused:
        cli.main(["eval", "model", "--split", split])
    assert refused.value.code == 2
    assert (
        f"argument --split: {split!r} is not a split name: pass the name of a SPLIT.parquet in --data (e.g. test,"
        " train)" in capsys.readouterr().err
    )


def test_a_split_given_with_its_file_suffix_is_its_name():
    from verlfit.commands.eval import split_name

    assert (split_name("test.parquet"), split_name("dev")) == ("test", "dev")


def test_an_output_inside_the_data_or_the_model_folder_is_refused_before_anything_is_scored(
    data_dir, tiny_qwen2_dir, tmp_path, capsys
):
    """New-user trial (finding 12): `eval models/tiny --data data/small --output data/small/ev` (or models/tiny/ev)
    exited 0, writing into the command's own input; a later prepare-data into data/small was then refused for ev/."""
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model)
    argv = ["eval", str(model), "--data", str(data_dir), "--limit", "1", "--max-new-tokens", "2", "--output"]
    for named, folder in (("--data", data_dir), ("MODEL", model)):
        assert cli.main([*argv, str(folder / "ev")]) == 2
        assert capsys.readouterr().err == (
            f"verlfit: error: --output {folder / 'ev'} lies inside {named} {folder}, which this command reads: verlfit"
            f" never writes into its own input (the output would be taken for part of {folder}, and go with it when"
            f" it is moved, copied or cleaned)\n  fix: pass --output a folder outside {folder}\n"
        )
        assert not (folder / "ev").exists()


@pytest.mark.parametrize(
    "edit, words",
    [
        ({"num_hidden_layers": "two"}, "num_hidden_layers='two' must be a positive whole number"),
        ({"num_hidden_layers": -1}, "num_hidden_layers=-1 must be a positive whole number"),
        ({"hidden_size": None}, "not a decoder-only transformer config: missing hidden_size"),
        ({"model_type": "zorblax"}, "cannot build this config.json (The checkpoint you are trying to load has model"),
    ],
    ids=["two", "neg", "nohidden", "unk"],
)
def test_new_user_trial_a_config_plan_refuses_is_refused_by_eval_with_plans_words(
    edit, words, data_dir, tiny_qwen2_dir, tmp_path, capsys
):
    """New-user trial findings 1-4: eval of a model whose config.json says num_hidden_layers "two" (a TypeError
    traceback), -1 (accepted: a model of no layers scored), no hidden_size (a state_dict traceback) or an unknown
    model_type (exit 1) is refused before any row, exit 2, with the words plan and train give."""
    model = tmp_path / "model"
    shutil.copytree(tiny_qwen2_dir, model)
    config = json.loads((model / "config.json").read_text())
    config.update(edit)
    config = {key: value for key, value in config.items() if value is not None}
    (model / "config.json").write_text(json.dumps(config))
    assert cli.main(["plan", "--model", str(model), "--profile", "p40"]) == 2
    plan = capsys.readouterr().err
    assert words in plan
    out = tmp_path / "out"
    assert cli.main(["eval", str(model), "--data", str(data_dir), "--output", str(out), "--max-new-tokens", "2"]) == 2
    err = capsys.readouterr().err
    assert err == plan.replace("verlfit: error: ", f"verlfit: error: MODEL {model}: ", 1).replace(
        f"{model}: {model}: ", f"{model}: "
    ).replace("pass --model ", "pass MODEL ")
    assert "Traceback" not in err and not out.exists()


def test_what_a_reward_function_prints_is_kept_in_the_output_and_summarised_not_flooded(tmp_path, capfd):
    """New-user trial finding 18: a reward function printing a megabyte a call put 16 MB on the terminal during eval.
    As train's reward check does, eval captures it and says how many lines with the first ones; the whole text goes
    to the output folder (reward_printed.txt), named on the summary's line."""
    data = _task_dir(tmp_path, "my/units", [("q0 km", "1000"), ("q1 m", "0.001")])
    reward = tmp_path / "loud.py"
    reward.write_text(
        "print('imported ' + 'X' * 200_000)\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    print('scoring', ground_truth)\n    return 1.0\n"
    )
    generator = fixed({"q0": "1000", "q1": "1"})
    out = tmp_path / "out"
    summary = evaluate.run_eval(
        "m",
        str(data),
        output=str(out),
        make_generator=lambda path, **settings: generator,
        preflight=False,
        reward_function=str(reward),
    )
    # the check calls it twice a row (ground truth, empty response), then it scores each row once
    assert summary["reward_printed"] == {
        "lines": 7,
        "first": ["imported " + "X" * 111, "scoring 1000", "scoring 1000"],
        "file": str(out / evaluate.PRINTED_FILE),
    }
    text = (out / evaluate.PRINTED_FILE).read_text()
    assert text.splitlines() == ["imported " + "X" * 200_000] + [
        f"scoring {truth}" for truth in ("1000", "0.001") for _ in range(2)
    ] + ["scoring 1000", "scoring 0.001"]
    assert json.loads((out / evaluate.SUMMARY_FILE).read_text())["reward_printed"] == summary["reward_printed"]
    lines = evaluate.describe(summary).splitlines()
    assert lines[-2] == (
        f"the reward function printed 7 lines while checked and scoring (first {'imported ' + 'X' * 111!r},"
        f" 'scoring 1000', 'scoring 1000'); all of it in {out / evaluate.PRINTED_FILE}"
    )
    captured = capfd.readouterr()
    assert len(captured.out) + len(captured.err) < 10_000
