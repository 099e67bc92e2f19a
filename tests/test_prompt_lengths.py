"""verlfit.prompt_lengths: the training data's longest prompt as verl counts it, for the planner's prompt columns."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import prompt_lengths
from verlfit.gsm8k import prompt_length
from verlfit.prompt_lengths import PromptMeasurement, longest_prompt_length, measure_for_train

QUESTIONS = ["What is 2 + 2?", "A shelf holds 12 boxes of 7 jars each; 19 jars are sold. How many jars are left on the shelf now?", "Say hi."]


def write_prompts(folder, questions=QUESTIONS, key="prompt"):
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({key: [[{"role": "user", "content": q}] for q in questions]}), folder / "train.parquet")
    return folder / "train.parquet"


@pytest.fixture
def tokenizer(qwen_style_tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen_style_tokenizer_dir)


def test_the_longest_prompt_is_verls_count_of_the_longest_row(tmp_path, tokenizer):
    path = write_prompts(tmp_path / "data")
    lengths = [prompt_length(tokenizer, [{"role": "user", "content": q}]) for q in QUESTIONS]  # one prompt at a time
    assert lengths[1] == max(lengths) and len(set(lengths)) == 3
    assert longest_prompt_length(path, tokenizer) == (lengths[1], 3)
    # verl drops the prompts over the limit (filter_overlong_prompts): the longest it keeps
    assert longest_prompt_length(path, tokenizer, max_prompt_length=lengths[1] - 1) == (max(lengths[0], lengths[2]), 3)
    # batches of rows give the same count as one by one
    many = write_prompts(tmp_path / "many", QUESTIONS * 3000)
    assert longest_prompt_length(many, tokenizer) == (lengths[1], 9000)


def test_a_prompt_key_a_row_that_is_not_messages_and_nothing_under_the_limit_are_named(tmp_path, tokenizer):
    path = write_prompts(tmp_path / "data", key="question")
    with pytest.raises(KeyError, match=f"{path} has no column 'prompt'"):
        longest_prompt_length(path, tokenizer)
    assert longest_prompt_length(path, tokenizer, prompt_key="question")[1] == 3
    (tmp_path / "strings").mkdir()
    pq.write_table(pa.table({"prompt": ["What is 2 + 2?"]}), tmp_path / "strings" / "train.parquet")
    with pytest.raises(ValueError, match=r"train.parquet row 0: prompt is not a list of chat messages"):
        longest_prompt_length(tmp_path / "strings" / "train.parquet", tokenizer)
    with pytest.raises(ValueError, match="no prompt at or under 1 tokens to measure"):
        longest_prompt_length(path, tokenizer, prompt_key="question", max_prompt_length=1)


def test_measure_for_train_says_what_it_measured_or_why_not(tmp_path, tiny_qwen2_dir, tokenizer, monkeypatch):
    data = tmp_path / "data"
    limit = "the planner counts the prompt limit, 256 tokens"
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(None, f"prompt lengths not measured: no {data / 'train.parquet'} yet; {limit}")
    write_prompts(data)
    longest = longest_prompt_length(data / "train.parquet", tokenizer)[0]
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(
        longest, f"longest prompt {longest} tokens of 256 (3 rows of train.parquet, {tiny_qwen2_dir}'s chat template): with the trims (patches 0020-0021) the planner counts {longest} prompt columns")
    missing = tmp_path / "no-model"
    result = measure_for_train(data, str(missing), 256)
    assert result.longest is None and result.note.startswith(f"prompt lengths not measured: no local tokenizer for {missing} (") and result.note.endswith(limit)
    assert measure_for_train(data, tiny_qwen2_dir, 256, prompt_key="question") == PromptMeasurement(None, f"prompt lengths not measured: {data / 'train.parquet'} has no column 'question'; {limit}")
    monkeypatch.setattr(prompt_lengths, "MEASURED_ROWS_LIMIT", 2)
    assert measure_for_train(data, tiny_qwen2_dir, 256) == PromptMeasurement(None, f"prompt lengths not measured: 3 rows in {data / 'train.parquet'} (verlfit measures up to 2); {limit}")
    (data / "train.parquet").write_text("not parquet")
    result = measure_for_train(data, tiny_qwen2_dir, 256)
    assert result.longest is None and result.note.startswith(f"prompt lengths not measured: {data / 'train.parquet'} does not read as parquet (")


def test_train_measures_the_data_where_the_profile_trims_and_plans_with_it(tmp_path, tiny_qwen2_dir, tokenizer, capsys):
    import argparse

    from verlfit import cli
    from verlfit.train.command import prepare_launch, register
    from verlfit.train.launch_plan import plan_request

    def parse_train_options(argv):
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        return parser.parse_args(["train", *argv])

    def build_launch_plan(args):
        return prepare_launch(args, environ={}, detect_gpu=False)

    data = tmp_path / "data"
    write_prompts(data)
    pq.write_table(pa.table({"prompt": [[{"role": "user", "content": "2 + 3?"}]]}), data / "test.parquet")
    longest = longest_prompt_length(data / "train.parquet", tokenizer)[0]
    words = ["--profile", "p40", "--model", tiny_qwen2_dir, "--data", str(data), "--batch-size", "2", "--max-prompt-length", "256", "--run-dir", str(tmp_path / "run")]
    assert cli.main(["train", "--dry-run", *words]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the notes wrap at the terminal's width
    assert f"note: longest prompt {longest} tokens of 256 (3 rows of train.parquet, {tiny_qwen2_dir}'s chat template): with the trims (patches 0020-0021) the planner counts {longest} prompt columns" in out
    plan = build_launch_plan(parse_train_options(words))
    assert plan.settings.longest_prompt_length == longest
    assert plan_request(plan).prompt_window == longest
    # the trims off after --: nothing is measured, the prompt limit is counted
    untrimmed = build_launch_plan(parse_train_options([*words, "--", *(f"+{key}=False" for key in ("actor_rollout_ref.actor.trim_padding", "actor_rollout_ref.ref.trim_padding", "critic.trim_padding", "actor_rollout_ref.rollout.trim_padding"))]))
    assert untrimmed.settings.longest_prompt_length is None and not any(note.startswith(("longest prompt", "prompt lengths")) for note in untrimmed.notes)
    assert plan_request(untrimmed).prompt_window == 256
