"""A LoRA base stored in 16 bits (patch 0026) in the memory model: 2 bytes a frozen parameter in actor and critic,
the P40's transient fp32 copies (FSDP's upcast of the root unit and the layers in flight; the rollout's LM head), no
copy where the base is stored in the compute dtype (t4 fp16, a10 bf16), and the issue's three targets through
``verlfit plan``. The expected bytes are computed here from the models' config.json numbers, not read back from the
planner."""

import dataclasses
import json
from pathlib import Path

import calibrate_time  # benchmarks/ is on sys.path (tests/conftest.py)
import pytest

from verlfit import cli
from verlfit.errors import VerlfitError
from verlfit.model_shape import load_model_shape
from verlfit.overrides import build_overrides
from verlfit.run_settings import TrainSettings
from verlfit.plan.request import frozen_base_storage
from verlfit.patch_switches import forced_switches
from verlfit.plan.memory import GIB, predict, root_unit_parameters
from verlfit.plan.request import request_for_profile
from verlfit.profiles import load_profile

QWEN_3B = load_model_shape("Qwen/Qwen2.5-3B-Instruct")
QWEN3_4B = load_model_shape("Qwen/Qwen3-4B")
# Qwen2.5-3B (36 layers, hidden 2048, 16 heads of 128, 2 KV heads, intermediate 11008, 151936 rows, tied)
EMBED_3B = 151936 * 2048
LAYER_3B = (2048 * 2048 + 2048) + 2 * (2048 * 256 + 256) + 2048 * 2048 + 3 * 2048 * 11008 + 2 * 2048
BASE_3B = EMBED_3B + 2048 + 36 * LAYER_3B  # the actor: embedding (tied LM head), final norm, layers
CRITIC_BASE_3B = BASE_3B + 2049  # the tied LM head is the embedding; + the frozen original value head (hidden + 1)
ADAPTER_3B = 36 * 32 * ((2048 + 2048) + 2 * (2048 + 256) + (2048 + 2048) + 3 * (2048 + 11008))  # rank 32, all-linear
CRITIC_ADAPTER_3B = ADAPTER_3B + 2049  # + the trained value head (patch 0011)
ROOT_3B = EMBED_3B + 2048  # actor's root unit: embedding (= LM head) and final norm
CRITIC_ROOT_3B = EMBED_3B + 2048 + 2049  # critic's: embedding, final norm, the value head's frozen original


def test_reference_counts_match_the_shapes():
    assert (BASE_3B, LAYER_3B, ADAPTER_3B) == (3_085_938_688, 77_076_992, 59_867_136)
    assert (QWEN_3B.actor_parameters, QWEN_3B.layer_parameters, QWEN_3B.critic_parameters) == (
        BASE_3B,
        LAYER_3B,
        CRITIC_BASE_3B,
    )


def _ppo_3b(**fields):
    base = dict(
        algorithm="ppo",
        rollout_n=1,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        gradient_checkpointing=True,
        lora_rank=32,
        actor_micro_batch_size=4,
        log_prob_micro_batch_size=4,
        critic_micro_batch_size=4,
    )
    return request_for_profile(load_profile("p40"), QWEN_3B, int(22.5 * GIB), **{**base, **fields})


def test_p40_16_bit_base_weights_and_the_fp32_upcast_copies():
    plan = predict(_ppo_3b(frozen_base_dtype="bfloat16"))
    actor = 2 * BASE_3B + 4 * ADAPTER_3B
    critic = 2 * CRITIC_BASE_3B + 4 * CRITIC_ADAPTER_3B
    # rollout: both roles resident, plus one module's fp32 copy at a time while generating: the LM head's
    assert plan.phase("rollout").weights == actor + critic + 4 * 151936 * 2048
    # FSDP upcasts the root unit and the layers in flight (2: the running one and the prefetched one) to fp32; the
    # old log-prob peaks at the LM head's forward, the root's copy beside the logits (4 x 768 x 151936 in fp32: 8 KiB
    # more than the log-prob temporaries, 4 x 151936 x (768 x 4 + 256 x 8) bytes, which come once it is freed)
    assert plan.phase("old_log_prob").weights == actor + critic + 4 * (ROOT_3B + 2 * LAYER_3B)
    assert plan.phase("old_log_prob").logits == 4 * 768 * 151936 * 4
    assert plan.phase("values").weights == critic + actor + 4 * (CRITIC_ROOT_3B + 2 * LAYER_3B)
    # the actor update peaks at the backward through the log-probs (4 x 768 x 151936 x 8 bytes of gradients), before
    # the root is cast again for the LM head's backward: the layers' copies only
    assert plan.phase("actor_update").weights == actor + critic + 4 * 2 * LAYER_3B
    assert plan.phase("actor_update").logits == 4 * 768 * 151936 * 8
    # against the fp32 base (stock): 2 bytes less per frozen parameter, no upcast copy
    stock = predict(_ppo_3b())
    assert stock.phase("old_log_prob").weights == 4 * (BASE_3B + ADAPTER_3B) + 4 * (CRITIC_BASE_3B + CRITIC_ADAPTER_3B)
    assert stock.verdict == "does not fit" and plan.verdict == "fits"


def test_fp16_base_on_the_t4_profile_needs_no_copy_and_an_fp32_one_does():
    def t4(**fields):
        base = dict(
            algorithm="grpo",
            rollout_n=4,
            train_batch_size=8,
            ppo_mini_batch_size=8,
            gradient_checkpointing=True,
            lora_rank=32,
            actor_micro_batch_size=2,
            log_prob_micro_batch_size=2,
            rollout_micro_batch_size=2,
        )
        return predict(request_for_profile(load_profile("t4"), QWEN3_4B, 14 * GIB, **{**base, **fields}))

    adapter = 36 * 32 * ((2560 + 4096) + 2 * (2560 + 1024) + (4096 + 2560) + 3 * (2560 + 9728))
    assert adapter == 66_060_288
    base = QWEN3_4B.actor_parameters
    sixteen, stock = t4(frozen_base_dtype="float16"), t4()
    assert sixteen.phase("old_log_prob").weights == 2 * base + 4 * adapter  # computed in fp16 as stored
    assert sixteen.phase("rollout").weights == 2 * base + 4 * adapter  # fp16 autocast: no upcast while generating
    root = root_unit_parameters(QWEN3_4B)
    assert stock.phase("old_log_prob").weights == 4 * (base + adapter) + 2 * (
        root + 2 * QWEN3_4B.layer_parameters
    )  # fp16 copies of fp32 masters


def test_profiles_store_the_base_in_their_16_bit_type_and_verl_gets_the_keys():
    settings = TrainSettings(model="m", lora_rank=32)
    assert [frozen_base_storage(settings, load_profile(name)) for name in ("p40", "t4", "v100", "a10")] == [
        "bfloat16",
        "float16",
        "float16",
        "bfloat16",
    ]
    assert frozen_base_storage(TrainSettings(model="m"), load_profile("p40")) is None  # no LoRA: nothing frozen
    assert (
        frozen_base_storage(TrainSettings(model="m", lora_rank=32, frozen_base_dtype="float32"), load_profile("p40"))
        is None
    )
    with pytest.raises(VerlfitError) as error:
        frozen_base_storage(TrainSettings(model="m", lora_rank=32, frozen_base_dtype="float16"), load_profile("p40"))
    assert error.value.message == (
        "--frozen-base-dtype float16 with the p40 profile: it stores a LoRA base in bfloat16 (as the checkpoints hold "
        "it, computed in float32)"
    )
    assert (
        error.value.fix == "use --frozen-base-dtype bfloat16, nf4, or float32 (stock verl)"
        and error.value.exit_code == 2
    )
    # the t4 profile computes in its storage type
    with pytest.raises(VerlfitError) as error:
        frozen_base_storage(TrainSettings(model="m", lora_rank=32, frozen_base_dtype="bfloat16"), load_profile("t4"))
    assert error.value.message == (
        "--frozen-base-dtype bfloat16 with the t4 profile: it stores a LoRA base in float16 (the dtype it computes in)"
    )

    def keys(profile, **fields):
        settings = TrainSettings(model="m", data_dir="/d", **fields)
        out = build_overrides(
            settings,
            load_profile(profile),
            load_profile(profile).environment,
            forced=forced_switches(settings, load_profile(profile)),
            frozen_base=frozen_base_storage(settings, load_profile(profile)),
        )
        return [o for o in out if "frozen_base_dtype" in o]

    assert keys("p40", lora_rank=32) == [
        "+actor_rollout_ref.model.frozen_base_dtype=bf16",
        "+critic.model.frozen_base_dtype=bf16",
    ]
    assert keys("t4", lora_rank=32, algorithm="grpo", rollout_n=4) == [
        "+actor_rollout_ref.model.frozen_base_dtype=fp16"
    ]
    assert keys("p40", lora_rank=32, critic_lora_rank=0) == ["+actor_rollout_ref.model.frozen_base_dtype=bf16"]
    assert keys("p40", lora_rank=0, critic_lora_rank=16) == ["+critic.model.frozen_base_dtype=bf16"]
    assert keys("p40", lora_rank=32, frozen_base_dtype="float32") == [] and keys("p40") == []


def run_plan(argv, capsys):
    status = cli.main(["plan", *argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "argv, verdict, peak_gib",
    [
        (["--model", "Qwen/Qwen3-4B", "--algo", "grpo", "--emulate", "t4"], "fits", 11.4),
        (["--model", "Qwen/Qwen2.5-3B-Instruct", "--algo", "ppo", "--emulate", "p40"], "fits", 19.37),
        (
            ["--model", "Qwen/Qwen2.5-7B-Instruct", "--algo", "grpo", "--emulate", "a10", "--rollout", "hf"],
            "fits",
            19.57,
        ),
    ],
)
def test_the_issue_targets_fit(argv, verdict, peak_gib, capsys):
    status, plan = run_plan([*argv, "--lora-rank", "32", "--auto-fit"], capsys)
    assert status == 0 and plan["verdict"] == verdict
    assert plan["request"]["frozen_base_dtype"] in ("bfloat16", "float16")
    assert round(plan["required_bytes"] / GIB, 2) == peak_gib


def test_the_7b_on_a_p40_does_not_fit_by_the_fp32_copies_of_its_untied_embedding_and_head(capsys):
    status, plan = run_plan(
        [
            "--model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--algo",
            "grpo",
            "--emulate",
            "p40",
            "--lora-rank",
            "32",
            "--frozen-base-dtype",
            "bfloat16",
            "--auto-fit",
        ],
        capsys,
    )
    # with the bf16 base kept (without --frozen-base-dtype the planner takes the NF4 base: test_nf4_memory.py): 22.4
    # GiB at micro-batch 1 with every saving on, over the 90% budget (20.2 GiB) though under the card's 22.5: refused
    assert status == 1 and plan["verdict"] == "tight"
    # 7B: 152064 x 3584 embedding and as much again in the untied LM head, both in the root unit FSDP upcasts
    root = 2 * 152064 * 3584 + 3584
    layer = (3584 * 3584 + 3584) + 2 * (3584 * 512 + 512) + 3584 * 3584 + 3 * 3584 * 18944 + 2 * 3584
    base = root + 28 * layer
    adapter = 28 * 32 * ((3584 + 3584) + 2 * (3584 + 512) + (3584 + 3584) + 3 * (3584 + 18944))
    update = next(p for p in plan["phases"] if p["phase"] == "actor_update")
    assert update["weights_bytes"] == 2 * base + 4 * adapter + 4 * (root + 2 * layer)


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@pytest.mark.parametrize(
    "record, predicted_gib, measured_gib",
    [
        # the 3B PPO LoRA P40 target, graphs on and off (2026-12-04): step 2, its batch's longest prompt 187 tokens
        ("2026-12-04-h200-lora-graphs-7b-a10-3b-p40-side-by-side/lora16-qwen2.5-3b-ppo-p40-graphs-on", 16.72, 16.46),
        ("2026-12-04-h200-lora-graphs-7b-a10-3b-p40-side-by-side/lora16-qwen2.5-3b-ppo-p40-graphs-off", 16.72, 16.43),
        # the 0.5B PPO LoRA with a bf16 base on the P40 (2026-12-02): step 2, longest prompt 232 tokens
        ("2026-12-02-h200-lora16-speed-own-task-eval/lora16-speed-memory-first", 12.12, 12.02),
    ],
)
def test_ppo_with_a_16_bit_lora_base_is_predicted_within_its_band_from_step_2(record, predicted_gib, measured_gib):
    # The +10.5% once seen on the 3B PPO was step 1 at the data's longest prompt: in step 1 neither AdamW state
    # exists yet when the critic update peaks (torch creates them in the first optimizer.step(); verl updates the
    # critic before the actor), while the plan counts both as resident (0.9 GiB here); and the trims (patch 0020)
    # train on the batch's longest prompt, not the data's. From step 2, at the batch's columns, the plan is within
    # the planner's -5%..+10% band. Nothing is fitted on these runs.
    folder = RESULTS / record
    loaded = calibrate_time.load_record(folder, 2, 2, name=record)
    step = [row for row in map(json.loads, (folder / "metrics.jsonl").read_text().splitlines()) if row.get("step") == 2]
    request = dataclasses.replace(loaded.request, longest_prompt_length=int(step[0]["prompt_length/max"]))
    predicted = predict(request).peak.total / GIB
    measured = step[0]["perf/max_memory_allocated_gb"]
    assert (round(predicted, 2), round(measured, 2)) == (predicted_gib, measured_gib)
    assert -0.05 <= predicted / measured - 1 <= 0.10
