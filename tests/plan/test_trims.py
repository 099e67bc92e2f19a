"""The planner with the trims (patches 0020-0021): a micro-batch runs on its own longest prompt, so with the data's
longest prompt known the plan is the plan of that prompt limit, phase by phase."""

from dataclasses import replace

import pytest
from plan_inputs import qwen_request

from verlfit.errors import VerlfitError
from verlfit.plan.memory import predict, window_note

ALL_ROLES = ("actor", "ref", "critic")


def totals(request):
    return {phase.phase: phase.total for phase in predict(request).phases}


@pytest.mark.parametrize(
    "algorithm, lora_rank, cuda_graph",
    [("ppo", 0, True), ("ppo", 0, False), ("grpo", 0, True), ("ppo", 32, False), ("grpo", 16, False)],
)
def test_trimmed_to_the_datas_longest_prompt_is_the_plan_of_that_prompt_limit(algorithm, lora_rank, cuda_graph):
    base = qwen_request(
        algorithm=algorithm,
        rollout_n=4 if algorithm == "grpo" else 1,
        max_prompt_length=512,
        lora_rank=lora_rank,
        cuda_graph=cuda_graph,
    )
    trimmed = replace(base, trim_padding=ALL_ROLES, rollout_trim_padding=True, longest_prompt_length=203)
    assert totals(trimmed) == totals(replace(base, max_prompt_length=203))
    assert predict(trimmed).peak.total < predict(base).peak.total


def test_without_the_longest_prompt_or_the_trims_nothing_changes_and_the_limit_caps_it():
    base = qwen_request(max_prompt_length=512)
    assert totals(replace(base, trim_padding=ALL_ROLES, rollout_trim_padding=True)) == totals(
        base
    )  # not measured: the limit
    assert totals(replace(base, longest_prompt_length=203)) == totals(base)  # measured, nothing trimmed
    assert totals(
        replace(base, trim_padding=ALL_ROLES, rollout_trim_padding=True, longest_prompt_length=900)
    ) == totals(base)  # verl drops longer prompts


def test_each_trim_narrows_its_own_phases_only():
    base = qwen_request(algorithm="grpo", rollout_n=4, max_prompt_length=512, use_reference=True)
    narrow = totals(replace(base, max_prompt_length=203))
    full = totals(base)
    rollout_only = totals(replace(base, rollout_trim_padding=True, longest_prompt_length=203))
    assert rollout_only == {**full, "rollout": narrow["rollout"]}
    actor_only = totals(replace(base, trim_padding=("actor",), longest_prompt_length=203))
    assert actor_only == {**full, "old_log_prob": narrow["old_log_prob"], "actor_update": narrow["actor_update"]}
    # with LoRA the reference is the actor's forward with its adapter disabled: it goes as the actor's trim
    lora = replace(base, lora_rank=16)
    lora_narrow = totals(replace(lora, max_prompt_length=203))
    assert totals(replace(lora, trim_padding=("actor",), longest_prompt_length=203)) == {
        **totals(lora),
        **{k: lora_narrow[k] for k in ("old_log_prob", "ref_log_prob", "actor_update")},
    }


def test_the_plan_says_which_prompt_columns_it_counted_and_refuses_a_longest_prompt_of_zero():
    request = qwen_request(
        algorithm="grpo",
        rollout_n=4,
        max_prompt_length=256,
        max_response_length=128,
        lora_rank=16,
        trim_padding=ALL_ROLES,
        rollout_trim_padding=True,
        longest_prompt_length=103,
    )
    assert (
        window_note(request)
        == "prompt columns: 103, the data's longest prompt, not the 256 of the prompt limit: the trims (patch 0020 for"
        " actor; patch 0021 for the rollout) run each micro-batch on its own longest prompt; responses are counted"
        " at their limit, 128"
    )
    assert (
        window_note(replace(request, trim_padding=()))
        == "prompt columns: 103, the data's longest prompt, not the 256 of the prompt limit: the trims (patch 0021 for"
        " the rollout) run each micro-batch on its own longest prompt; responses are counted at their limit, 128"
    )
    assert window_note(request) in predict(request).notes
    assert window_note(replace(request, longest_prompt_length=None)) is None
    with pytest.raises(VerlfitError, match="longest prompt length must be positive, got 0"):
        predict(replace(request, longest_prompt_length=0))


def test_the_time_estimate_caps_gsm8ks_prompt_widths_at_the_datas_longest_prompt():
    """new-user trial: the estimate took GSM8K's widths (the calibrated training window, 230 rollout) even for data
    whose longest prompt
    was 20 tokens."""
    from verlfit.plan.time import (
        GSM8K_ROLLOUT_PROMPT_TOKENS,
        GSM8K_WINDOW_PROMPT_TOKENS,
        TimeInputs,
        rollout_prompt_columns,
        training_columns,
    )

    inputs = TimeInputs(trim_padding=True, rollout_trim_padding=True)
    request = qwen_request(max_prompt_length=512, trim_padding=ALL_ROLES, rollout_trim_padding=True)
    assert training_columns(request, inputs, "actor") == (GSM8K_WINDOW_PROMPT_TOKENS + 256, 256)
    assert rollout_prompt_columns(request, inputs) == GSM8K_ROLLOUT_PROMPT_TOKENS
    short = replace(request, longest_prompt_length=20)
    assert training_columns(short, inputs, "actor") == (20 + 256, 256)
    assert rollout_prompt_columns(short, inputs) == 20
    assert (
        rollout_prompt_columns(replace(request, longest_prompt_length=400), inputs) == GSM8K_ROLLOUT_PROMPT_TOKENS
    )  # longer data: GSM8K's
    assert rollout_prompt_columns(short, replace(inputs, rollout_prompt_length=100)) == 100  # given: as given


def test_plan_takes_a_longest_prompt_above_the_prompt_limit_as_verl_drops_it(capsys):
    """New-user trial: plan suggested --max-prompt-length 352 for a 14B on a T4 planned with --longest-prompt-length
    451, and then refused the suggestion (the longest prompt above the limit). verl drops the longer prompts
    (filter_overlong_prompts), as it drops --data's: the plan is the plan at the limit, with a note."""
    import json

    from verlfit import cli

    argv = ["plan", "--emulate", "p40", "--max-prompt-length", "256", "--json"]
    assert cli.main([*argv, "--longest-prompt-length", "300"]) == 0
    above = json.loads(capsys.readouterr().out)
    dropped = (
        "--longest-prompt-length 300 is above --max-prompt-length 256: verl drops the longer prompts "
        "(filter_overlong_prompts), so the longest prompt a micro-batch holds is 256 tokens"
    )
    assert cli.main([*argv, "--longest-prompt-length", "256"]) == 0
    at_limit = json.loads(capsys.readouterr().out)
    assert above["time"]["notes"] == [dropped, *at_limit["time"]["notes"]]
    assert above["request"] == at_limit["request"]
    assert above["required_bytes"] == at_limit["required_bytes"]
    # the new user's case: the suggested length, with the longest prompt kept as typed, fits
    t4 = ["plan", "--emulate", "t4", "--model", "Qwen/Qwen2.5-14B-Instruct", "--algo", "grpo", "--lora-rank", "32"]
    t4 += ["--frozen-base-dtype", "nf4", "--longest-prompt-length", "451", "--json"]
    assert cli.main(t4) == 1
    suggestion = json.loads(capsys.readouterr().out)["auto_fit"]["suggestion"]
    assert "--max-prompt-length 352 (from 512)" in suggestion
    assert cli.main([*t4, "--max-prompt-length", "352"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "fits"


def test_plan_with_data_measures_its_longest_prompt_and_rows_as_train_does(tmp_path, tiny_qwen2_dir, capsys):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from verlfit import cli
    from verlfit.gsm8k import prompt_length

    data = tmp_path / "data"
    data.mkdir()
    questions = [f"What is {i} + {i * 7}?" for i in range(40)] + [
        "A shelf holds 12 boxes of 7 jars each; 19 jars are sold. How many jars are left?"
    ]
    messages = [[{"role": "user", "content": q}] for q in questions]

    def verl_rows(prompts):
        return pa.table(
            {
                "data_source": ["mine"] * len(prompts),
                "prompt": prompts,
                "reward_model": [{"style": "rule", "ground_truth": "1"}] * len(prompts),
            }
        )

    pq.write_table(verl_rows(messages), data / "train.parquet")
    pq.write_table(verl_rows(messages[:2]), data / "test.parquet")
    tokenizer = AutoTokenizer.from_pretrained(tiny_qwen2_dir)
    longest = max(prompt_length(tokenizer, m) for m in messages)
    words = [
        "plan",
        "--emulate",
        "p40",
        "--model",
        tiny_qwen2_dir,
        "--max-prompt-length",
        "256",
        "--batch-size",
        "8",
        "--json",
    ]
    assert cli.main([*words, "--data", str(data)]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert (
        measured["time"]["notes"][0]
        == f"longest prompt {longest} tokens of 256 (train.parquet 41 rows, test.parquet 2 rows; {tiny_qwen2_dir}'s"
        f" chat template): with the trims (patches 0020-0021) the planner counts {longest} prompt columns"
    )
    assert measured["time"]["steps"] == 41 // 8  # the data's rows as --dataset-size
    assert cli.main([*words, "--longest-prompt-length", str(longest), "--dataset-size", "41"]) == 0
    given = json.loads(capsys.readouterr().out)
    assert [p["total_bytes"] for p in measured["phases"]] == [p["total_bytes"] for p in given["phases"]]
    for flag in ("--longest-prompt-length", "--dataset-size"):
        assert cli.main([*words, "--data", str(data), flag, "9"]) == 2
        assert (
            capsys.readouterr().err
            == f"verlfit: error: --data {data} and {flag} 9: --data measures it\n  fix: drop one of them\n"
        )
    assert cli.main([*words, "--data", str(tmp_path / "none")]) == 2
    assert f"verlfit: error: --data {tmp_path / 'none'} is not a folder" in capsys.readouterr().err
    # data a run could not use is refused as verlfit train refuses it (second new-user trial: plan said "fits")
    (tmp_path / "empty").mkdir()
    assert cli.main([*words, "--data", str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().err.startswith(
        f"verlfit: error: --data {tmp_path / 'empty'} has no train.parquet\n  fix: prepare it: verlfit prepare-data"
        f" --train FILE --output {tmp_path / 'empty'} (your own task)"
    )
    strings = tmp_path / "strings"
    strings.mkdir()
    for name in ("train.parquet", "test.parquet"):
        pq.write_table(
            pa.table(
                {
                    "data_source": ["mine"],
                    "prompt": ["2 + 2?"],
                    "reward_model": [{"style": "rule", "ground_truth": "4"}],
                }
            ),
            strings / name,
        )
    assert cli.main([*words, "--data", str(strings)]) == 2
    assert (
        "train.parquet lacks prompt as chat messages (a list of {role, content}; it holds plain strings)"
        in capsys.readouterr().err
    )
    (strings / "train.parquet").write_bytes(b"PAR1 cut short")
    (strings / "test.parquet").write_bytes(b"PAR1 cut short")
    assert cli.main([*words, "--data", str(strings)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "train.parquet does not read as parquet" in err
        and "fix: write them again (verlfit prepare-data --output NEW_FOLDER makes them from your own files)" in err
    )
