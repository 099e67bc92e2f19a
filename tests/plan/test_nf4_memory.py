"""A LoRA base stored in NF4 (patch 0028, ``--frozen-base-dtype nf4``) in the planner: the bytes the base takes
(NF4 with double quantisation for the layers' adapted Linears, the layers' norms and biases in the compute dtype, the
root in 16 bits), the transient dequantised Linear, the P40's fp32 copy of the 16-bit root, the time model's
dequantisation traffic, auto-fit's last resort, and the refusals. The expected numbers are computed here from the
models' config.json numbers and bitsandbytes' block sizes, not read back from the planner."""

import json
import math

import pytest

from verlfit import cli
from verlfit.checks.engines import missing_engine_packages
from verlfit.errors import VerlfitError
from verlfit.model_shape import load_model_shape
from verlfit.overrides import build_overrides
from verlfit.patch_switches import forced_switches
from verlfit.plan.fit import fit_memory
from verlfit.plan.memory import GIB, frozen_base_bytes, nf4_weights, predict
from verlfit.plan.request import frozen_base_storage, request_for_profile
from verlfit.plan.time import frozen_base_cast_bytes
from verlfit.profiles import load_profile
from verlfit.run_settings import TrainSettings

# bitsandbytes quantize_4bit(blocksize=64, compress_statistics=True): 4 bits a weight, a uint8 absmax per 64 weights,
# an fp32 absmax per 256 of those
NF4_BYTES = 0.5 + 1 / 64 + 4 / (64 * 256)
QWEN_3B = load_model_shape("Qwen/Qwen2.5-3B-Instruct")
QWEN_7B = load_model_shape("Qwen/Qwen2.5-7B-Instruct")
# Qwen2.5-3B (36 layers, hidden 2048, 16 heads of 128, 2 KV heads, intermediate 11008, 151936 rows, tied)
LINEARS_3B = 36 * (2048 * 2048 + 2 * 2048 * 256 + 2048 * 2048 + 3 * 2048 * 11008)  # q, k, v, o, gate, up, down
LAYER_REST_3B = 36 * ((2048 + 2 * 256) + 2 * 2048)  # the q/k/v biases and two norms of each layer
ROOT_3B = 151936 * 2048 + 2048  # embedding (the tied LM head) and the final norm
ADAPTER_3B = 36 * 32 * ((2048 + 2048) + 2 * (2048 + 256) + (2048 + 2048) + 3 * (2048 + 11008))  # rank 32
LARGEST_3B = 2048 * 11008  # gate/up/down: the largest Linear dequantised at once


def _grpo(profile, shape=QWEN_3B, **fields):
    base = dict(
        algorithm="grpo",
        rollout="hf",
        rollout_n=4,
        train_batch_size=32,
        ppo_mini_batch_size=16,
        gradient_checkpointing=True,
        lora_rank=32,
        actor_micro_batch_size=4,
        log_prob_micro_batch_size=4,
        frozen_base_dtype="nf4",
    )
    return request_for_profile(load_profile(profile), shape, int(22.5 * GIB), **{**base, **fields})


def test_reference_counts_match_the_shape():
    assert LINEARS_3B + LAYER_REST_3B + ROOT_3B == QWEN_3B.actor_parameters
    assert nf4_weights(QWEN_3B, "actor") == LINEARS_3B == 2_774_532_096


def test_every_linear_of_the_layers_is_quantised_whatever_lora_adapts():
    # patch 0028 quantises the layers' Linears adapted or not; an adapted LM head stays in the 16-bit root. Before,
    # only the adapted ones were, and a P40 plan with q_proj,v_proj adapters kept the rest in fp32 (30.5 GiB)
    some = _grpo("p40", lora_target_modules=("q_proj", "v_proj", "lm_head"))
    assert frozen_base_bytes(some, "actor") == frozen_base_bytes(_grpo("p40"), "actor")


@pytest.mark.parametrize("profile, compute_bytes", [("p40", 4), ("t4", 2), ("a10", 2)])
def test_the_base_takes_nf4_for_the_layers_linears_the_compute_dtype_for_their_norms_16_bits_for_the_root(
    profile, compute_bytes
):
    request = _grpo(profile)
    expected = math.ceil(LINEARS_3B * NF4_BYTES) + LAYER_REST_3B * compute_bytes + ROOT_3B * 2
    assert frozen_base_bytes(request, "actor") == expected
    assert expected / GIB == pytest.approx({4: 1.9135, 2: 1.9130}[compute_bytes], abs=1e-4)
    # the 16-bit base of the same model, for scale: 2 bytes a parameter
    assert frozen_base_bytes(_grpo(profile, frozen_base_dtype="bfloat16"), "actor") == 2 * QWEN_3B.actor_parameters


def test_in_a_pass_the_p40_holds_the_fp32_root_and_one_dequantised_linear_the_t4_only_the_linear():
    base = {p: math.ceil(LINEARS_3B * NF4_BYTES) + LAYER_REST_3B * b + ROOT_3B * 2 for p, b in (("p40", 4), ("t4", 2))}
    p40 = predict(_grpo("p40")).phase("old_log_prob")
    assert p40.weights == base["p40"] + 4 * ADAPTER_3B + 4 * (ROOT_3B + LARGEST_3B)
    t4 = predict(_grpo("t4")).phase("old_log_prob")
    assert t4.weights == base["t4"] + 4 * ADAPTER_3B + 2 * LARGEST_3B


def test_the_rollout_counts_the_dequantised_linear_and_on_the_p40_the_fp32_lm_head():
    p40 = predict(_grpo("p40")).phase("rollout")
    t4 = predict(_grpo("t4")).phase("rollout")
    p40_base = math.ceil(LINEARS_3B * NF4_BYTES) + LAYER_REST_3B * 4 + ROOT_3B * 2
    t4_base = math.ceil(LINEARS_3B * NF4_BYTES) + LAYER_REST_3B * 2 + ROOT_3B * 2
    assert p40.weights == p40_base + 4 * ADAPTER_3B + 4 * LARGEST_3B + 4 * 151936 * 2048
    assert t4.weights == t4_base + 4 * ADAPTER_3B + 2 * LARGEST_3B
    assert (
        "frozen base in NF4: each Linear dequantised to fp32 for its matmul, one at a time, the largest 0.1 GiB"
        in p40.detail
    )
    assert any(
        line.startswith("frozen base stored in bfloat16 (the NF4 base's embeddings and head)") for line in p40.detail
    )


def test_the_time_model_counts_the_dequantisation_traffic():
    # each pass: the packed read and the compute-dtype write of every quantised weight; the P40 also casts its bf16
    # root to fp32 (2 + 4 bytes an element); in generation the LM head instead of the whole root
    assert frozen_base_cast_bytes(_grpo("t4"), "actor") == pytest.approx(LINEARS_3B * (NF4_BYTES + 2))
    assert frozen_base_cast_bytes(_grpo("p40"), "actor") == pytest.approx(LINEARS_3B * (NF4_BYTES + 4) + ROOT_3B * 6)
    assert frozen_base_cast_bytes(_grpo("p40"), "actor", generation=True) == pytest.approx(
        LINEARS_3B * (NF4_BYTES + 4) + 151936 * 2048 * 6
    )
    # a 16-bit base computed as stored moves nothing; on the P40 every weight is upcast
    assert frozen_base_cast_bytes(_grpo("t4", frozen_base_dtype="float16"), "actor") == 0
    assert frozen_base_cast_bytes(_grpo("p40", frozen_base_dtype="bfloat16"), "actor") == QWEN_3B.actor_parameters * 6


def _run_plan(argv, capsys):
    status = cli.main(["plan", *argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


def test_auto_fit_takes_the_nf4_base_for_a_7b_on_a_p40_only_when_nothing_else_fits(capsys):
    argv = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--algo", "grpo", "--emulate", "p40", "--lora-rank", "32"]
    status, plan = _run_plan([*argv, "--auto-fit"], capsys)
    assert status == 0 and plan["verdict"] == "fits"
    reasons = plan["auto_fit"]["reasons"]
    assert reasons[0] == (
        "frozen base in NF4 (patch 0028), chosen because the bfloat16 base does not fit: even with every saving on, "
        "actor update at actor micro-batch 1 would need 22.4 GiB of 20.2 GiB (90% of 22.5 GiB); the adapter then "
        "learns against a 4-bit quantisation of the model"
    )
    assert reasons[-1].endswith("; LoRA base in nf4, 1076.0 s/step")
    assert plan["request"]["frozen_base_dtype"] == "nf4"
    # the 3B fits with its bf16 base: no NF4
    status, plan = _run_plan(
        [
            "--model",
            "Qwen/Qwen2.5-3B-Instruct",
            "--algo",
            "grpo",
            "--emulate",
            "p40",
            "--lora-rank",
            "32",
            "--auto-fit",
        ],
        capsys,
    )
    assert status == 0 and plan["request"]["frozen_base_dtype"] == "bfloat16"


def test_the_speed_pick_of_an_nf4_configuration_says_why_the_base_is_quantised(capsys):
    """New-user trial: a 7B PPO LoRA on a T4 was planned with the NF4 base and no line saying why, because the speed
    pick took another configuration than the memory-first one, which alone carried the line. The fp16 base needs
    more than the T4's budget there (its own plan says so)."""
    argv = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--algo", "ppo", "--emulate", "t4", "--lora-rank", "16"]
    status, plan = _run_plan(argv, capsys)
    assert status == 0 and plan["request"]["frozen_base_dtype"] == "nf4"
    reasons = plan["auto_fit"]["reasons"]
    assert any(line.startswith("speed: the memory-first choice (") for line in reasons)  # the speed pick moved
    status, sixteen_bit = _run_plan([*argv, "--frozen-base-dtype", "float16"], capsys)
    assert status != 0 and sixteen_bit["verdict"] == "does not fit"
    failure = sixteen_bit["auto_fit"]["reasons"][-1].removeprefix("nothing fits: ")
    assert [line for line in reasons if "NF4" in line] == [
        f"frozen base in NF4 (patch 0028), chosen because the float16 base does not fit: {failure}; the adapter then "
        "learns against a 4-bit quantisation of the model"
    ]


def test_where_nf4_does_not_fit_either_the_refusal_gives_both_needs(capsys):
    """New-user trial: a 14B GRPO LoRA on a T4 was told it "would need 30.9 GiB of 12.6 GiB" (the fp16 base) and then
    offered --lora-rank 29, which fits with the NF4 base the planner falls back to: beside 30.9 GiB it read as
    absurd. The last line, which train's refusal quotes, gives the NF4 base's need too, each as its own plan says."""
    argv = ["--model", "Qwen/Qwen2.5-14B-Instruct", "--algo", "grpo", "--emulate", "t4", "--lora-rank", "32"]

    def failure(plan):
        return plan["auto_fit"]["reasons"][-1].partition(" saving on, ")[2]

    needs = {}
    for base in ("float16", "nf4"):
        status, plan = _run_plan([*argv, "--frozen-base-dtype", base], capsys)
        assert status != 0 and plan["verdict"] != "fits"
        needs[base] = failure(plan)
    status, plan = _run_plan(argv, capsys)
    assert status != 0
    assert plan["auto_fit"]["reasons"][-1] == (
        f"nothing fits: even with every saving on, {needs['float16']} with the float16 base; with the base in NF4 "
        f"(the last resort), {needs['nf4']}"
    )
    assert needs["nf4"] == "actor update at actor micro-batch 1 would need 12.7 GiB of 12.6 GiB (90% of 14.0 GiB)"
    assert plan["auto_fit"]["suggestion"].startswith(
        "smallest changes that would fit, each on its own, with the base then in nf4"
    )


def test_an_nf4_base_asked_for_where_16_bits_fit_says_so_with_the_16_bit_peak_and_time(capsys):
    """New-user trial: --frozen-base-dtype nf4 on a model whose 16-bit base fits said nothing of it. The line gives the
    16-bit plan's peak and step time (as that plan itself reports them) and that NF4 trains a quantisation."""
    argv = ["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--algo", "grpo", "--emulate", "t4", "--lora-rank", "32"]
    status, sixteen_bit = _run_plan([*argv, "--frozen-base-dtype", "float16"], capsys)
    assert status == 0 and sixteen_bit["verdict"] == "fits"
    status, plan = _run_plan([*argv, "--frozen-base-dtype", "NF4"], capsys)
    assert status == 0 and plan["request"]["frozen_base_dtype"] == "nf4"
    peak = sixteen_bit["required_bytes"] / GIB
    seconds = sixteen_bit["auto_fit"]["speed"][0]["step_s"]
    assert plan["auto_fit"]["reasons"][-1] == (
        f"float16 base: fits too (peak {peak:.1f} GiB, {seconds:.1f} s/step on T4) and trains the model's own weights, "
        "nf4 a 4-bit quantisation of them: leave --frozen-base-dtype nf4 out to use it"
    )
    assert (f"{peak:.1f}", f"{seconds:.1f}") == ("12.2", "75.4")
    # the 7B on the P40 needs it: no such line
    status, plan = _run_plan(
        ["--model", "Qwen/Qwen2.5-7B-Instruct", "--algo", "grpo", "--emulate", "p40", "--lora-rank", "32"]
        + ["--frozen-base-dtype", "nf4"],
        capsys,
    )
    assert status == 0 and not any("fits too" in reason for reason in plan["auto_fit"]["reasons"])


def test_where_no_single_change_fits_the_16_bit_base_the_changes_that_fit_with_nf4_are_offered(capsys):
    """New-user trials: a Qwen2.5-14B GRPO LoRA on the T4 got "no single change found that fits (not even LoRA rank
    1)", yet --lora-rank 29 alone fits, the planner then taking NF4 itself: offered as single changes, saying so.
    With the base's storage given (fp16), NF4 is a second change: offered as pairs."""
    argv = ["--model", "Qwen/Qwen2.5-14B-Instruct", "--algo", "grpo", "--emulate", "t4", "--lora-rank", "32"]
    changes = "--lora-rank 29 (from 32); --max-prompt-length 352 (from 512); --max-response-length 96 (from 256)"
    status, plan = _run_plan(argv, capsys)
    assert status == 1 and plan["auto_fit"]["fits"] is False
    assert plan["auto_fit"]["suggestion"] == (
        "smallest changes that would fit, each on its own, with the base then in nf4 (the planner's last resort; the "
        f"adapter learns against a 4-bit quantisation of the model): {changes}"
    )
    status, kept = _run_plan([*argv, "--frozen-base-dtype", "fp16"], capsys)
    assert kept["auto_fit"]["suggestion"] == (
        "no single change fits; --frozen-base-dtype nf4 (QLoRA: the layers' Linears in 4 bits; the adapter learns "
        f"against the quantised base) fits together with one of: {changes}"
    )
    # each offered change fits as offered
    for change in (["--lora-rank", "29"], ["--max-prompt-length", "352"], ["--max-response-length", "96"]):
        status, changed = _run_plan([*argv, *change], capsys)
        assert (status, changed["request"]["frozen_base_dtype"]) == (0, "nf4"), change
        status, changed = _run_plan([*argv, *change, "--frozen-base-dtype", "nf4"], capsys)
        assert status == 0, change


@pytest.mark.parametrize(
    "argv, offered, then",
    [
        (
            ["--model", "Qwen/Qwen2.5-7B-Instruct", "--emulate", "p40", "--algo", "grpo"],
            "--lora-rank 32 (LoRA: the base weights freeze, only adapters train, with no gradients or AdamW states for "
            "the base and no separate reference model; the planner then stores the base in nf4 itself: the adapter "
            "learns against a 4-bit quantisation)",
            ["--lora-rank", "32"],
        ),
        (
            ["--model", "Qwen/Qwen2.5-7B-Instruct", "--emulate", "a10", "--algo", "grpo"],
            "--lora-rank 32 --rollout hf (LoRA: the base weights freeze, only adapters train, with no gradients or "
            "AdamW states for the base and no separate reference model)",
            ["--lora-rank", "32", "--rollout", "hf"],
        ),
        (
            ["--model", "Qwen/Qwen2.5-1.5B-Instruct", "--emulate", "t4", "--algo", "ppo"],
            "--lora-rank 32 (LoRA: the base weights freeze, only adapters train, with no gradients or AdamW states for "
            "the base)",
            ["--lora-rank", "32"],
        ),
    ],
)
def test_full_fine_tuning_that_does_not_fit_is_offered_lora_with_the_base_train_would_store(
    argv, offered, then, capsys
):
    """New-user trial: a full fine-tuning that does not fit was told to use a smaller model where LoRA fits: the
    LoRA trial kept an fp32 base, where train stores the profile's 16 bits (or NF4, its last resort), and never
    tried the HF rollout beside vLLM's second copy. The offered change fits as offered."""
    status, plan = _run_plan(argv, capsys)
    assert (
        status == 1 and plan["auto_fit"]["suggestion"] == f"smallest changes that would fit, each on its own: {offered}"
    )
    status, changed = _run_plan([*argv, *then], capsys)
    assert status == 0 and changed["auto_fit"]["fits"] is True


def test_no_nf4_fallback_with_the_base_kept_on_several_gpus_or_with_vllm():
    request = _grpo("p40", QWEN_7B, frozen_base_dtype="bfloat16", train_batch_size=64)
    assert fit_memory(request).request.frozen_base_dtype == "nf4"
    assert not fit_memory(request, keep={"frozen_base"}).fits
    assert fit_memory(_grpo("p40", QWEN_7B, frozen_base_dtype="bfloat16", gpus=2)).request.frozen_base_dtype != "nf4"
    a10 = _grpo("a10", QWEN_7B, frozen_base_dtype="bfloat16", rollout="vllm")
    assert fit_memory(a10).request.frozen_base_dtype == "bfloat16"


@pytest.mark.parametrize(
    "fields, message, fix",
    [
        (
            dict(gpus=2),
            "--frozen-base-dtype nf4 on 2 GPUs: patch 0028 stores the quantisation constants beside FSDP's parameters, "
            "so it runs on one GPU only",
            "run on one GPU (--gpus 1, and --nodes 1 if you set --nodes), or the profile's 16-bit base on several GPUs",
        ),
        (
            dict(rollout="vllm"),
            "--frozen-base-dtype nf4 with the vllm rollout: verl hands vLLM the FSDP model's weights, and vLLM cannot "
            "load bitsandbytes' packed 4-bit ones",
            "add --rollout hf",
        ),
    ],
)
def test_nf4_is_refused_on_several_gpus_and_with_vllm(fields, message, fix):
    settings = TrainSettings(model="m", lora_rank=32, frozen_base_dtype="nf4", **fields)
    with pytest.raises(VerlfitError) as error:
        frozen_base_storage(settings, load_profile("a10"))
    assert (error.value.message, error.value.fix, error.value.exit_code) == (message, fix, 2)


def test_nf4_is_the_storage_on_every_profile_and_verl_gets_the_keys():
    for name in ("p40", "t4", "v100", "a10"):
        settings = TrainSettings(model="m", lora_rank=32, frozen_base_dtype="nf4", rollout="hf")
        assert frozen_base_storage(settings, load_profile(name)) == "nf4"
    settings = TrainSettings(model="m", data_dir="/d", algorithm="ppo", lora_rank=32, frozen_base_dtype="nf4")
    profile = load_profile("p40")
    out = build_overrides(
        settings, profile, profile.environment, forced=forced_switches(settings, profile), frozen_base="nf4"
    )
    assert [o for o in out if "frozen_base_dtype" in o] == [
        "+actor_rollout_ref.model.frozen_base_dtype=nf4",
        "+critic.model.frozen_base_dtype=nf4",
    ]


def test_an_nf4_run_needs_bitsandbytes():
    def find_spec(name):
        return None if name == "bitsandbytes" else object()

    assert missing_engine_packages("hf", "sdpa", find_spec=find_spec, frozen_base="nf4") == [
        (
            "bitsandbytes",
            "the NF4 frozen base (patch 0028)",
            "--frozen-base-dtype with the profile's 16-bit dtype (or pip install bitsandbytes)",
        )
    ]
    assert missing_engine_packages("hf", "sdpa", find_spec=find_spec, frozen_base="bfloat16") == []


def test_what_does_not_fit_is_told_the_nf4_base_where_it_would():
    kept = fit_memory(_grpo("p40", QWEN_7B, frozen_base_dtype="bfloat16"), keep={"frozen_base"})
    assert not kept.fits
    assert kept.suggestion.startswith(
        "smallest changes that would fit, each on its own: --frozen-base-dtype nf4 (QLoRA: the layers' Linears in 4 "
        "bits; the adapter learns against the quantised base)"
    )
    qwen_14b = load_model_shape("Qwen/Qwen2.5-14B-Instruct")
    vllm = fit_memory(_grpo("a10", qwen_14b, frozen_base_dtype="bfloat16", rollout="vllm"))
    assert not vllm.fits and "--frozen-base-dtype nf4 --rollout hf (QLoRA" in vllm.suggestion


def test_on_several_gpus_the_nf4_base_is_offered_with_one_gpu():
    # the Llama-3.1-8B GRPO LoRA on two T4s: the 16-bit base does not fit (FSDP shards the base, but the rollout's
    # unsharded copy and the logits do not shrink); patch 0028's NF4 base fits one T4 (12.6 of 14 GiB), never two
    sizes = dict(algorithm="grpo", rollout_n=4, train_batch_size=32, ppo_mini_batch_size=16, lora_rank=32)
    t4, llama_8b = load_profile("t4"), load_model_shape("meta-llama/Llama-3.1-8B-Instruct")
    two = fit_memory(request_for_profile(t4, llama_8b, int(14 * GIB), gpus=2, **sizes))
    assert not two.fits
    assert two.suggestion == (
        "smallest changes that would fit, each on its own: --frozen-base-dtype nf4 --gpus 1 (QLoRA, which runs on one "
        "GPU: the layers' Linears in 4 bits; the adapter learns against the quantised base)"
    )
    assert fit_memory(request_for_profile(t4, llama_8b, int(14 * GIB), **sizes)).request.frozen_base_dtype == "nf4"
