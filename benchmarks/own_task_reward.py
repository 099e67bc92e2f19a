"""Reward function of the own task (``benchmarks/own_task.py``), in verl 0.4.1's custom reward form.

verl calls ``compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=...)`` for each response
(``verl/workers/reward_manager/naive.py``); select it with ``custom_reward_function.path=THIS_FILE`` (the name
defaults to ``compute_score``). The response's final answer is the number on its last ``Answer: N`` line, or after
its last ``#### `` (the format a model warmed up on GSM8K-style answers writes); commas are ignored and the number is
compared with the ground truth as a number (``31`` = ``31.0``). Reward: 1.0 right, 0.0 wrong or no answer.
"""

import re

_ANSWER = re.compile(r"(?:Answer:|####)\s*(-?[0-9][0-9,]*(?:\.[0-9]+)?)")


def final_answer(text):
    """The number of the last ``Answer: N`` / ``#### N`` in ``text`` (commas removed), or None."""
    found = _ANSWER.findall(text or "")
    return found[-1].replace(",", "") if found else None


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1.0 when the response's final answer equals ``ground_truth`` as a number, else 0.0."""
    answer = final_answer(solution_str)
    if answer is None:
        return 0.0
    return 1.0 if float(answer) == float(ground_truth) else 0.0
