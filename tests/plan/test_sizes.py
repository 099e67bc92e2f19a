"""verlfit plan --gpus N: per-GPU memory, and the table of the model sizes N cards open up (issue 18 item 3)."""

import json
import math

from command_lines import run_plan
from fakes import FakeNvml
from verlfit.model_shape import load_model_shape
from verlfit.plan.fit import auto_fit
from verlfit.plan.memory import ADAM_STATE_BYTES
from verlfit.plan.request import request_for_profile
from verlfit.plan.sizes import SIZE_MODELS, size_rows
from verlfit.profiles import load_profile

GIB = 1024**3
H200 = FakeNvml(gpus=[("NVIDIA H200", (9, 0), 141 * 2**30)])  # --emulate p40 plans for 22.5 GiB whatever the card


def _reference(model, algorithm, samples, gpus):
    """The same question asked without verlfit plan: the p40 profile at 22.5 GiB, train's default sizes."""
    request = request_for_profile(
        load_profile("p40"),
        load_model_shape(model),
        int(22.5 * GIB),
        algorithm=algorithm,
        rollout_n=samples,
        gpus=gpus,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        max_prompt_length=512,
        max_response_length=256,
        gradient_checkpointing=True,
    )
    return auto_fit(request)


def test_plan_with_two_gpus_prints_memory_per_gpu_sharded_over_both():
    status, text = run_plan(["--emulate", "p40", "--gpus", "2", "--plan", "off", "--json"], nvml=H200)
    data = json.loads(text)
    assert data["request"]["gpus"] == 2
    shape = load_model_shape("Qwen/Qwen2.5-0.5B-Instruct")
    values = next(p for p in data["phases"] if p["phase"] == "values")
    # both roles' AdamW states, each sharded over the 2 GPUs by FSDP
    assert (
        values["optimizer_bytes"]
        == (math.ceil(shape.actor_parameters / 2) + math.ceil(shape.critic_parameters / 2)) * ADAM_STATE_BYTES
    )
    _, table = run_plan(["--emulate", "p40", "--gpus", "2"], nvml=H200)
    assert "Qwen/Qwen2.5-0.5B-Instruct (built-in shape): PPO, float32, hf rollout, 2 GPUs, 22.5 GiB usable" in table
    assert "GiB per GPU; predicted allocated peak of each phase" in table


def test_two_gpus_show_which_sizes_they_open_up_against_one():
    status, text = run_plan(["--emulate", "p40", "--gpus", "2", "--json"], nvml=H200)
    rows = json.loads(text)["sizes"]
    assert [(r["model"], r["algorithm"], r["samples"]) for r in rows] == [
        (m, a, n) for m in SIZE_MODELS for a, n in (("ppo", 1), ("grpo", 4))
    ]
    for row in rows:
        for gpus in (1, 2):
            expected = _reference(row["model"], row["algorithm"], row["samples"], gpus)
            assert (row[str(gpus)]["fits"], row[str(gpus)]["required_bytes"]) == (
                expected.fits,
                expected.plan.required_bytes,
            )
    # what the memory model says today: the 0.5B shape fits one P40 and two; 1.5B and 3B full-parameter fit neither
    assert [(r["1"]["fits"], r["2"]["fits"]) for r in rows] == [(True, True)] * 2 + [(False, False)] * 4
    assert all(r["2"]["required_bytes"] < r["1"]["required_bytes"] for r in rows if r["algorithm"] == "ppo")
    assert rows[2]["2"]["offload"] == ["actor optimizer", "critic param", "critic optimizer"]
    _, table = run_plan(["--emulate", "p40", "--gpus", "2"], nvml=H200)
    assert (
        "model sizes at 2 GPUs against 1: full-parameter, this batch and lengths, auto-fitted; predicted peak per GPU +"
        " allocator headroom, of 22.5 GiB usable\n" in table
    )
    small, large = _reference(SIZE_MODELS[0], "ppo", 1, 1), _reference(SIZE_MODELS[0], "ppo", 1, 2)
    assert (
        f"│ Qwen2.5-0.5B │ PPO       │ fits {small.plan.required_bytes / GIB:.1f} GiB │ fits"
        f" {large.plan.required_bytes / GIB:.1f} GiB │" in table
    )
    three = _reference(SIZE_MODELS[2], "grpo", 4, 2)
    assert (
        f"│ Qwen2.5-3B   │ GRPO n=4  │ no: {_reference(SIZE_MODELS[2], 'grpo', 4, 1).plan.required_bytes / GIB:.1f} GiB"
        f"  │ no: {three.plan.required_bytes / GIB:.1f} GiB  │" in table
    )


def test_grpo_rows_take_the_requests_samples_and_one_gpu_prints_no_sizes():
    rows = json.loads(
        run_plan(["--emulate", "p40", "--gpus", "4", "--algo", "grpo", "--samples", "8", "--json"], nvml=H200)[1]
    )["sizes"]
    assert [r["samples"] for r in rows] == [1, 8] * 3 and set(rows[1]) == {"model", "algorithm", "samples", "1", "4"}
    assert "sizes" not in json.loads(run_plan(["--emulate", "p40", "--json"], nvml=H200)[1])
    assert "model sizes at" not in run_plan(["--emulate", "p40"], nvml=H200)[1]
    direct = size_rows(_reference(SIZE_MODELS[0], "grpo", 8, 4).request)
    assert [r["4"]["fits"] for r in direct] == [r["4"]["fits"] for r in rows]


def test_the_sizes_of_a_lora_request_are_full_parameter_as_the_table_says():
    # the table's rows are full fine-tunes whatever the request trains: a LoRA request (rank 32, an NF4 base) gives
    # the same rows as the full-parameter request of the same card and sizes
    full = _reference(SIZE_MODELS[0], "ppo", 1, 2).request
    lora = full.__class__(**{**full.__dict__, "lora_rank": 32, "frozen_base_dtype": "nf4"})
    assert size_rows(lora) == size_rows(full)
    big = [row for row in size_rows(full) if row["model"] == SIZE_MODELS[-1] and row["algorithm"] == "ppo"][0]
    # the largest model's full PPO does not fit one P40 (LoRA's would: the rows must not say it does)
    assert big["1"]["fits"] is False
