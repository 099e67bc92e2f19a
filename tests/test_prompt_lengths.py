"""verlfit.prompt_lengths: the training data's longest prompt as verl counts it, for the planner's prompt columns."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import prompt_lengths as module
from verlfit.errors import VerlfitError
from verlfit.gsm8k import prompt_length
from verlfit.prompt_lengths import PromptLengths, PromptMeasurement, measure_for_train, prompt_lengths

QUESTIONS = [
    "What is 2 + 2?",
    "A shelf holds 12 boxes of 7 jars each; 19 jars are sold. How many jars are left on the shelf now?",
    "Say hi.",
]


def write_prompts(folder, questions=QUESTIONS, key="prompt", name="train.parquet"):
    """``folder/name`` in verl's format (GSM8K's data_source, so verl's scorer takes it), its ``key`` column the
    questions."""
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        pa.table(
            {
                "data_source": ["openai/gsm8k"] * len(questions),
                key: [[{"role": "user", "content": q}] for q in questions],
                "reward_model": [{"style": "rule", "ground_truth": "4"}] * len(questions),
            }
        ),
        folder / name,
    )
    return folder / name


@pytest.fixture
def tokenizer(qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)


def lengths_of(tokenizer, questions):
    return [prompt_length(tokenizer, [{"role": "user", "content": q}]) for q in questions]  # one prompt at a time


def test_the_longest_prompt_is_verls_count_of_the_longest_row(tmp_path, tokenizer):
    path = write_prompts(tmp_path / "data")
    lengths = lengths_of(tokenizer, QUESTIONS)
    assert lengths[1] == max(lengths) and lengths[2] == min(lengths) and len(set(lengths)) == 3
    assert prompt_lengths(path, tokenizer) == PromptLengths(rows=3, kept=3, longest=lengths[1], shortest=lengths[2])
    # verl drops the prompts over the limit (filter_overlong_prompts): the longest it keeps
    assert prompt_lengths(path, tokenizer, max_prompt_length=lengths[1] - 1) == PromptLengths(
        3, 2, lengths[0], lengths[2]
    )
    assert prompt_lengths(path, tokenizer, max_prompt_length=lengths[2] - 1) == PromptLengths(3, 0, None, lengths[2])
    # batches of rows give the same count as one by one
    many = write_prompts(tmp_path / "many", QUESTIONS * 3000)
    assert prompt_lengths(many, tokenizer) == PromptLengths(9000, 9000, lengths[1], lengths[2])


def test_a_prompt_key_and_a_row_that_is_not_messages_are_named(tmp_path, tokenizer):
    path = write_prompts(tmp_path / "data", key="question")
    with pytest.raises(KeyError, match=f"{path} has no column 'prompt'"):
        prompt_lengths(path, tokenizer)
    assert prompt_lengths(path, tokenizer, prompt_key="question").rows == 3
    (tmp_path / "strings").mkdir()
    pq.write_table(pa.table({"prompt": ["What is 2 + 2?"]}), tmp_path / "strings" / "train.parquet")
    with pytest.raises(ValueError, match=r"train.parquet row 0: prompt is not a list of chat messages"):
        prompt_lengths(tmp_path / "strings" / "train.parquet", tokenizer)


def test_measure_for_train_says_what_it_measured_or_why_not(tmp_path, tiny_qwen2_dir, tokenizer, monkeypatch):
    data = tmp_path / "data"
    limit = "the planner counts the prompt limit, 256 tokens"
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(
        None, ""
    )  # no data yet: the data check speaks
    write_prompts(data)
    lengths = lengths_of(tokenizer, QUESTIONS)
    longest = max(lengths)
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(
        longest,
        f"longest prompt {longest} tokens of 256 (train.parquet 3 rows; {tiny_qwen2_dir}'s chat template): with the"
        f" trims (patches 0020-0021) the planner counts {longest} prompt columns",
        PromptLengths(3, 3, longest, min(lengths)),
    )
    # validation generates from the test prompts with the same rollout micro-batches: they count too
    write_prompts(
        data,
        [
            "Say hi to every one of the forty-two people standing in the long queue outside the shop, one by one, by"
            " name."
        ],
        name="test.parquet",
    )
    test_length = lengths_of(
        tokenizer,
        [
            "Say hi to every one of the forty-two people standing in the long queue outside the shop, one by one, by"
            " name."
        ],
    )[0]
    assert test_length > longest
    assert (
        measure_for_train(data, tiny_qwen2_dir, 256).note
        == f"longest prompt {test_length} tokens of 256 (train.parquet 3 rows, test.parquet 1 rows; {tiny_qwen2_dir}'s"
        f" chat template): with the trims (patches 0020-0021) the planner counts {test_length} prompt columns"
    )
    # a limit under some prompts: the longest verl keeps, and how many it drops
    assert (
        measure_for_train(data, tiny_qwen2_dir, longest).note
        == f"longest prompt {longest} tokens of {longest} (train.parquet 3 rows, test.parquet 1 rows (1 over the limit:"
        f" verl drops them); {tiny_qwen2_dir}'s chat template): with the trims (patches 0020-0021) the planner"
        f" counts {longest} prompt columns"
    )
    with pytest.raises(VerlfitError) as refused:
        measure_for_train(data, tiny_qwen2_dir, min(lengths) - 1)
    assert (refused.value.message, refused.value.fix, refused.value.exit_code) == (
        (
            f"every prompt of {data / 'train.parquet'} is longer than --max-prompt-length {min(lengths) - 1} tokens"
            f" (the shortest has {min(lengths)}, with the model's chat template): verl's filter_overlong_prompts would"
            " drop them all and leave the run no data"
        ),
        f"use --max-prompt-length {min(lengths)} or more, or shorter prompts",
        2,
    )
    (data / "test.parquet").unlink()
    missing = tmp_path / "no-model"
    result = measure_for_train(data, str(missing), 256)
    assert (
        result.longest is None
        and result.note.startswith(f"prompt lengths not measured: no local tokenizer for {missing} (")
        and result.note.endswith(limit)
    )
    assert measure_for_train(data, tiny_qwen2_dir, 256, prompt_key="question") == PromptMeasurement(
        None, f"prompt lengths not measured: {data / 'train.parquet'} has no column 'question'; {limit}"
    )
    monkeypatch.setattr(module, "MEASURED_ROWS_LIMIT", 2)
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(
        None, f"prompt lengths not measured: 3 rows in train.parquet (verlfit measures up to 2); {limit}"
    )
    (data / "train.parquet").write_text("not parquet")
    result = measure_for_train(data, tiny_qwen2_dir, 256)
    assert (
        result.longest is None
        and result.note.startswith(f"prompt lengths not measured: {data / 'train.parquet'} does not read as parquet (")
        and result.note.endswith(limit)
    )
    pq.write_table(
        pa.table({"prompt": pa.array([], type=pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())])))}),
        data / "train.parquet",
    )
    write_prompts(data, ["2 + 3?"], name="test.parquet")
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(
        None,
        f"prompt lengths not measured: {data / 'train.parquet'} has no rows; {limit}",
        PromptLengths(0, 0, None, None),
    )


def test_train_measures_the_data_where_the_profile_trims_and_plans_with_it(tmp_path, tiny_qwen2_dir, tokenizer, capsys):
    import argparse

    from verlfit import cli
    from verlfit.commands.train import prepare_launch, register
    from verlfit.train.launch_plan import plan_request

    def parse_train_options(argv):
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        return parser.parse_args(["train", *argv])

    def build_launch_plan(args):
        return prepare_launch(args, environ={}, detect_gpu=False)

    data = tmp_path / "data"
    write_prompts(data)
    write_prompts(data, ["2 + 3?"], name="test.parquet")
    longest = prompt_lengths(data / "train.parquet", tokenizer).longest
    assert longest == max(lengths_of(tokenizer, QUESTIONS + ["2 + 3?"]))  # the test prompt is shorter
    words = [
        "--profile",
        "p40",
        "--model",
        tiny_qwen2_dir,
        "--data",
        str(data),
        "--batch-size",
        "2",
        "--max-prompt-length",
        "256",
        "--run-dir",
        str(tmp_path / "run"),
    ]
    assert cli.main(["train", "--dry-run", *words]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the notes wrap at the terminal's width
    assert (
        f"note: longest prompt {longest} tokens of 256 (train.parquet 3 rows, test.parquet 1 rows; {tiny_qwen2_dir}'s"
        f" chat template): with the trims (patches 0020-0021) the planner counts {longest} prompt columns" in out
    )
    plan = build_launch_plan(parse_train_options(words))
    assert plan.settings.longest_prompt_length == longest
    assert plan_request(plan).prompt_window == longest
    # the trims off after --: nothing is measured, the prompt limit is counted
    untrimmed = build_launch_plan(
        parse_train_options(
            [
                *words,
                "--",
                *(
                    f"+{key}=False"
                    for key in (
                        "actor_rollout_ref.actor.trim_padding",
                        "actor_rollout_ref.ref.trim_padding",
                        "critic.trim_padding",
                        "actor_rollout_ref.rollout.trim_padding",
                    )
                ),
            ]
        )
    )
    assert untrimmed.settings.longest_prompt_length is None
    assert (
        f"longest prompt {longest} tokens of 256 (train.parquet 3 rows, test.parquet 1 rows; {tiny_qwen2_dir}'s chat"
        " template): without the trims (patches 0020-0021) every micro-batch is padded to the limit, which the planner"
        " counts" in untrimmed.notes
    )
    assert plan_request(untrimmed).prompt_window == 256


def test_train_refuses_a_run_whose_prompts_verl_would_drop(tmp_path, tiny_qwen2_dir, tokenizer, capsys):
    """new-user trial: with every prompt over --max-prompt-length the dry run passed (verl would have dropped every
    row)."""
    from verlfit import cli

    data = tmp_path / "data"
    write_prompts(data)
    write_prompts(data, ["2 + 3?"], name="test.parquet")
    lengths = lengths_of(tokenizer, QUESTIONS)
    words = [
        "--profile",
        "p40",
        "--model",
        tiny_qwen2_dir,
        "--data",
        str(data),
        "--run-dir",
        str(tmp_path / "run"),
        "--dry-run",
    ]
    assert cli.main(["train", *words, "--batch-size", "2", "--max-prompt-length", str(min(lengths) - 1)]) == 2
    assert (
        f"verlfit: error: every prompt of {data / 'train.parquet'} is longer than --max-prompt-length"
        f" {min(lengths) - 1} tokens" in capsys.readouterr().err
    )
    # one prompt kept, a batch of two: fewer than one batch once verl has dropped the others
    assert cli.main(["train", *words, "--batch-size", "2", "--max-prompt-length", str(min(lengths))]) == 2
    err = capsys.readouterr().err
    assert (
        err == f"verlfit: error: {data / 'train.parquet'} has 1 of its 3 prompts within --max-prompt-length"
        f" {min(lengths)} tokens (verl's filter_overlong_prompts drops the others), fewer than one batch of 2"
        " prompts\n  fix: use --batch-size 1 or less, or a longer --max-prompt-length\n"
    )
    assert not (tmp_path / "run").exists()
    # the same refusal without the trims (second new-user trial: it was skipped with them off)
    untrimmed = [
        "--",
        *(
            f"+{key}=False"
            for key in (
                "actor_rollout_ref.actor.trim_padding",
                "actor_rollout_ref.ref.trim_padding",
                "critic.trim_padding",
                "actor_rollout_ref.rollout.trim_padding",
            )
        ),
    ]
    assert (
        cli.main(["train", *words, "--batch-size", "2", "--max-prompt-length", str(min(lengths) - 1), *untrimmed]) == 2
    )
    assert (
        f"verlfit: error: every prompt of {data / 'train.parquet'} is longer than --max-prompt-length"
        f" {min(lengths) - 1} tokens" in capsys.readouterr().err
    )
    # steps are counted from the prompts verl keeps: 2 of 3 rows, batch 1, 2 epochs = 4 steps (not 6)
    keep_two = sorted(lengths)[1]
    assert (
        cli.main(
            [
                "train",
                *words,
                "--batch-size",
                "1",
                "--mini-batch-size",
                "1",
                "--epochs",
                "2",
                "--max-prompt-length",
                str(keep_two),
            ]
        )
        == 0
    )
    assert "steps: 4 (2 epoch(s) of 2 of 3 rows within the prompt limit // 1 prompts a batch)" in " ".join(
        capsys.readouterr().out.split()
    )


def test_the_launcher_alone_without_transformers_says_what_is_not_measured(
    tmp_path, tiny_qwen2_dir, capsys, monkeypatch
):
    """issue 32 item 12: `pip install -e .` gives no transformers; the dry run died with ModuleNotFoundError."""
    import sys

    from verlfit import cli

    data = tmp_path / "data"
    write_prompts(data)
    write_prompts(data, ["2 + 3?"], name="test.parquet")
    # data in verl's format and the user's reward, for the whole dry run below
    from verlfit.prepare_data import prepare_data

    source = tmp_path / "rows.jsonl"
    source.write_text(
        "".join(f'{{"question": "{q}", "answer": "{n}"}}\n' for n, q in enumerate(QUESTIONS + ["2 + 3?"]))
    )
    prepare_data(source, "my/task", tmp_path / "task", test_fraction=0.25, log=lambda line: None)
    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float(solution_str =="
        " ground_truth)\n"
    )
    assert measure_for_train(data, tiny_qwen2_dir, 256).longest is not None  # measured where transformers imports
    monkeypatch.setitem(sys.modules, "transformers", None)  # what a Python without the package answers to the import
    measured = measure_for_train(data, tiny_qwen2_dir, 256)
    assert measured.longest is None
    assert (
        measured.note
        == "prompt lengths not measured: this Python has no transformers (import of transformers halted; None in"
        f" sys.modules), which counts tokens with {tiny_qwen2_dir}'s tokenizer (install it, or run inside the"
        " verlfit image); the planner counts the prompt limit, 256 tokens"
    )
    # the whole dry run: the same note, exit 0, no traceback
    words = [
        "--profile",
        "p40",
        "--model",
        tiny_qwen2_dir,
        "--data",
        str(tmp_path / "task"),
        "--batch-size",
        "2",
        "--max-prompt-length",
        "256",
        "--run-dir",
        str(tmp_path / "run"),
        "--reward-function",
        str(reward),
        "--dry-run",
    ]
    assert cli.main(["train", *words]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: prompt lengths not measured: this Python has no transformers" in out
