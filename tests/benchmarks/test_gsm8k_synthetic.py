"""benchmarks/gsm8k_synthetic.py and verlfit.synthetic_gsm8k (the code it wraps): deterministic GSM8K-format "a + b - c"
word problems."""

import json
import re

import gsm8k_synthetic as g

FIRST_TRAIN_SEED0 = [
    {
        "question": (
            "A factory made 3,000 stamps last month. This month it made 300 more stamps than that, and Priya "
            "shipped 860 of this month's stamps to a store. How many of this month's stamps are still at "
            "the factory?"
        ),
        "answer": (
            "This month the factory made 3,000 + 300 = <<3000+300=3300>>3,300 stamps.\nAfter the shipment, "
            "3,300 - 860 = <<3300-860=2440>>2,440 stamps are still there.\n#### 2,440"
        ),
    },
    {
        "question": (
            "There are 45 stamps in a box. Nina puts in 20 more stamps. Then Yuki takes out 33 stamps. How "
            "many stamps are in the box now?"
        ),
        "answer": (
            "After Nina puts some in, there are 45 + 20 = <<45+20=65>>65 stamps.\nAfter Yuki takes some out, "
            "there are 65 - 33 = <<65-33=32>>32 stamps.\n#### 32"
        ),
    },
]
FIRST_TEST_SEED0 = {
    "question": (
        "In the morning the temperature was 23 degrees. By noon it rose by 25 degrees, and by midnight it fell "
        "by 65 degrees. What was the temperature at midnight, in degrees?"
    ),
    "answer": (
        "At noon the temperature was 23 + 25 = <<23+25=48>>48 degrees.\nAt midnight it was 48 - 65 = "
        "<<48-65=-17>>-17 degrees.\n#### -17"
    ),
}


def test_first_rows_seed0():
    s = g.generate_splits(n_train=50, n_test=10, seed=0)
    assert s["train"][:2] == FIRST_TRAIN_SEED0
    assert s["test"][0] == FIRST_TEST_SEED0


def test_deterministic_and_seed_dependent():
    assert g.generate_splits(200, 20, seed=5) == g.generate_splits(200, 20, seed=5)
    assert g.generate_splits(200, 20, seed=5)["train"] != g.generate_splits(200, 20, seed=6)["train"]
    # a longer run starts with the same rows (sizes do not reshuffle)
    assert g.generate_split(300, seed=0)[:100] == g.generate_split(100, seed=0)


def _check_arithmetic(row):
    q, a = row["question"], row["answer"]
    nums = [int(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\d|\d", q)]
    assert len(nums) == 3, q
    x, y, z = nums
    truth = x + y - z
    assert g.answer_value(a) == str(truth)
    # one '####', last line, GSM8K style commas in the final number
    assert a.count("####") == 1 and a.splitlines()[-1] == f"#### {truth:,}"
    # every calculator annotation is right, and the last one is the answer
    anns = re.findall(r"<<(-?\d+)([+-])(\d+)=(-?\d+)>>", a)
    assert len(anns) == 2, a
    for left, op, right, res in anns:
        assert (int(left) + int(right) if op == "+" else int(left) - int(right)) == int(res)
    assert int(anns[-1][3]) == truth
    # verl's strict scorer, if installed, gives the reference answer full marks
    try:
        from verl.utils.reward_score.gsm8k import compute_score
    except Exception:  # verl is optional here
        return
    assert compute_score(a, g.answer_value(a)) == 1.0


def test_every_answer_matches_the_arithmetic():
    s = g.generate_splits(n_train=2000, n_test=300, seed=0)
    for row in s["train"] + s["test"]:
        _check_arithmetic(row)


def test_commas_negatives_and_disjoint_splits():
    s = g.generate_splits(n_train=2000, n_test=300, seed=0)
    finals = [r["answer"].rsplit("#### ", 1)[1] for r in s["train"]]
    assert sum("," in f for f in finals) >= 20
    assert sum(f.startswith("-") for f in finals) >= 20
    assert not {r["question"] for r in s["test"]} & {r["question"] for r in s["train"]}
    assert len({r["question"] for r in s["train"]}) == 2000


def test_cli_writes_jsonl(tmp_path):
    assert g.main(["--output", str(tmp_path), "--train-size", "30", "--test-size", "7", "--seed", "0"]) == 0
    rows = {}
    for split, n in (("train", 30), ("test", 7)):
        lines = (tmp_path / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
        assert len(lines) == n
        rows[split] = [json.loads(line) for line in lines]
        assert all(set(r) == {"question", "answer"} for r in rows[split])
    assert rows["train"][:2] == FIRST_TRAIN_SEED0
    assert rows["test"][0] == FIRST_TEST_SEED0


def test_the_script_is_a_thin_command_line_over_the_package():
    from verlfit import synthetic_gsm8k

    assert g.synthetic_gsm8k is synthetic_gsm8k
    assert [getattr(g, name) is getattr(synthetic_gsm8k, name) for name in synthetic_gsm8k.__all__] == [True] * len(
        synthetic_gsm8k.__all__
    )
