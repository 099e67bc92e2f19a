"""benchmarks/own_task.py and own_task_reward.py: the own task's problems, prepared by prepare-data and scored by
its reward function through verlfit's reward check (what the own_task and learn_own GPU stages run)."""

import json
from pathlib import Path

import own_task
import pytest

from verlfit import reward_function as rewards
from verlfit.prepare_data import prepare_data

REWARD = Path(own_task.__file__).with_name("own_task_reward.py")


def test_problems_are_deterministic_distinct_and_exact(tmp_path):
    paths = own_task.write_splits(tmp_path / "a", train_size=200, test_size=20, seed=0)
    again = own_task.write_splits(tmp_path / "b", train_size=200, test_size=20, seed=0)
    assert [p.read_bytes() for p in paths.values()] == [p.read_bytes() for p in again.values()]
    rows = {split: [json.loads(line) for line in path.read_text().splitlines()] for split, path in paths.items()}
    assert (len(rows["train"]), len(rows["test"])) == (200, 20)
    assert not {r["problem"] for r in rows["train"]} & {r["problem"] for r in rows["test"]}
    for row in rows["train"] + rows["test"]:
        words = row["problem"].split()
        start, arrive, sold = int(words[3]), int(words[5]), int(words[10])
        assert row["solution"] == str(start + arrive - sold) and int(row["solution"]) >= 0


@pytest.mark.parametrize(
    "response, score",
    [
        ("23 + 17 = 40, 40 - 9 = 31.\nAnswer: 31", 1.0),
        ("Answer: 30\nAnswer: 31.0", 1.0),  # the last answer counts, compared as a number
        ("40 - 9 = 31\n#### 31", 1.0),
        ("Answer: 1,031", 0.0),
        ("The answer is 31.", 0.0),
        ("", 0.0),
    ],
)
def test_reward(response, score):
    with rewards.load_reward_function(rewards.RewardFunction(REWARD)) as function:
        assert (
            function(data_source=own_task.DATA_SOURCE, solution_str=response, ground_truth="31", extra_info=None)
            == score
        )


def test_prepared_by_prepare_data_and_checked_with_its_reward(tmp_path):
    raw = own_task.write_splits(tmp_path / "raw", train_size=30, test_size=5)
    result = prepare_data(
        train=raw["train"],
        test=raw["test"],
        question_column="problem",
        answer_column="solution",
        data_source=own_task.DATA_SOURCE,
        prompt_template=own_task.PROMPT_TEMPLATE,
        output_dir=tmp_path / "data",
        log=lambda line: None,
    )
    assert (result.rows, result.bad) == ({"train": 30, "test": 5}, [])
    with pytest.raises(Exception, match="verl 0.4.1 has no scorer for data_source 'verlfit/shelf-stock'"):
        rewards.check_verl_scores(tmp_path / "data")
    scored = rewards.check_reward_function(rewards.RewardFunction(REWARD), tmp_path / "data").scores
    # every training and test row; the bare ground truth has no "Answer:" line: 0, and so has the empty response
    assert [s.score for s in scored] == [0.0] * 70


def test_warmup_problems_are_worked_out_and_never_the_rl_splits_problems(tmp_path):
    rl = own_task.write_splits(tmp_path / "rl", train_size=300, test_size=40, seed=0)
    warm = own_task.write_warmup_splits(
        tmp_path / "warm", train_size=300, test_size=40, seed=0, warmup_size=100, dev_size=20
    )
    rl_problems = {json.loads(line)["problem"] for path in rl.values() for line in path.read_text().splitlines()}
    rows = {split: [json.loads(line) for line in path.read_text().splitlines()] for split, path in warm.items()}
    assert {split: len(part) for split, part in rows.items()} == {"train": 100, "test": 20, "dev": 20}
    questions = [row["question"] for part in rows.values() for row in part]
    assert len(set(questions)) == 140 and not set(questions) & rl_problems
    for row in rows["train"]:
        words = row["question"].split()
        start, arrive, sold = int(words[3]), int(words[5]), int(words[10])
        total, left = start + arrive, start + arrive - sold
        assert row["answer"] == f"{start} + {arrive} = {total}. {total} - {sold} = {left}.\n#### {left}"


def test_worked_answer_scores_full_reward_and_the_instruction_is_the_templates_tail():
    row = {
        "problem": "A shelf holds 23 jars. 17 more jars arrive, then 9 are sold. How many jars are on the shelf now?",
        "solution": "31",
    }
    assert own_task.worked_answer(row) == "23 + 17 = 40. 40 - 9 = 31.\n#### 31"
    with rewards.load_reward_function(rewards.RewardFunction(REWARD)) as function:
        assert (
            function(
                data_source=own_task.DATA_SOURCE,
                solution_str=own_task.worked_answer(row),
                ground_truth="31",
                extra_info=None,
            )
            == 1.0
        )
    assert own_task.instruction() == 'Think step by step, then give the final number on its own line as "Answer: N".'
    assert own_task.PROMPT_TEMPLATE.format(question="Q?") == "Q? " + own_task.instruction()
