"""Planner: exact parameter counts, hand-computed bytes for a small config, the the earlier device measurements (docs/plan.md section 5) measurements,
auto-fit's choices on constructed cards, refusal with the smallest change, and the CLI."""

import json
from dataclasses import replace

import pytest

from verlfit import cli, plan
from verlfit.errors import VerlfitError
from verlfit.model_shape import load_model_shape, shape_from_config
from verlfit.plan import GIB, PlanRequest, auto_fit, predict

# 2 layers, hidden 64, 4 heads of 16, 2 KV heads, SwiGLU 128, vocab 1000, tied embeddings (Qwen2: q/k/v biases)
SMALL_CONFIG = {"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000, "tie_word_embeddings": True}
SMALL = shape_from_config(SMALL_CONFIG, "small")
QWEN = load_model_shape("Qwen/Qwen2.5-0.5B-Instruct")


def test_small_parameter_count_by_hand():
    q = 64 * 64 + 64  # q_proj weight + bias
    kv = 2 * (64 * 32 + 32)  # k_proj, v_proj (2 KV heads x 16) with biases
    o = 64 * 64  # o_proj, no bias
    mlp = 3 * 64 * 128
    norms = 2 * 64
    layer = q + kv + o + mlp + norms
    assert layer == 37120 == SMALL.layer_parameters
    assert SMALL.actor_parameters == 1000 * 64 + 2 * layer + 64 == 138304
    assert SMALL.critic_parameters == 138304 + 64 + 1  # score = Linear(hidden, 1) with bias, no lm_head
    untied = shape_from_config({**SMALL_CONFIG, "tie_word_embeddings": False})
    assert untied.actor_parameters == 138304 + 1000 * 64


def test_small_count_matches_transformers():
    import torch  # both in tests/requirements-ci.txt: this comparison always runs
    import transformers

    config = transformers.Qwen2Config(**{k: v for k, v in SMALL_CONFIG.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.Qwen2ForCausalLM(config)
    assert model.num_parameters() == SMALL.actor_parameters


def test_qwen25_05b_parameter_count():
    assert QWEN.actor_parameters == 494_032_768
    assert (QWEN.num_layers, QWEN.hidden_size, QWEN.vocab_size, QWEN.tie_word_embeddings) == (24, 896, 151936, True)


def test_config_file_and_dir_and_missing(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL_CONFIG))
    assert load_model_shape(str(tmp_path)).actor_parameters == 138304
    assert load_model_shape(str(tmp_path / "config.json")).actor_parameters == 138304
    with pytest.raises(VerlfitError, match="no config.json for model 'nobody/nothing'"):
        load_model_shape("nobody/nothing", hub_cache_lookup=lambda repo, name: None)
    with pytest.raises(VerlfitError, match="model '/no/such/dir': no such file or directory") as error:
        load_model_shape("/no/such/dir", hub_cache_lookup=lambda repo, name: None)
    assert error.value.fix.startswith("check the path, or pass a hub id such as Qwen/Qwen2.5-0.5B-Instruct")
    (tmp_path / "string.json").write_text(json.dumps({**SMALL_CONFIG, "hidden_size": "64"}))
    with pytest.raises(VerlfitError, match=r"hidden_size='64' must be a positive whole number"):
        load_model_shape(str(tmp_path / "string.json"))
    (tmp_path / "heads.json").write_text(json.dumps({**SMALL_CONFIG, "num_attention_heads": 3}))
    with pytest.raises(VerlfitError, match="hidden_size=64 is not a multiple of num_attention_heads=3, and no head_dim is given"):
        load_model_shape(str(tmp_path / "heads.json"))
    (tmp_path / "kv.json").write_text(json.dumps({**SMALL_CONFIG, "num_key_value_heads": 3}))
    with pytest.raises(VerlfitError, match="num_attention_heads=4 is not a multiple of num_key_value_heads=3"):
        load_model_shape(str(tmp_path / "kv.json"))
    (tmp_path / "bad.json").write_text(json.dumps({"hidden_size": 64}))
    with pytest.raises(VerlfitError, match="missing num_hidden_layers, num_attention_heads, intermediate_size, vocab_size"):
        load_model_shape(str(tmp_path / "bad.json"))


def small_request(**fields):
    base = dict(shape=SMALL, gpu_memory_bytes=24 * GIB, train_batch_size=8, ppo_mini_batch_size=4, actor_micro_batch_size=2, log_prob_micro_batch_size=2, critic_micro_batch_size=2, max_prompt_length=32, max_response_length=32)
    base.update(fields)
    return PlanRequest(**base)


def test_weights_gradients_optimizer_bytes_fp32():
    actor, critic = 138304, 138369
    p = predict(small_request())
    rollout = p.phase("rollout")
    assert rollout.weights == 4 * actor + 4 * critic == 1_106_692
    assert rollout.optimizer == 8 * actor + 8 * critic == 2_213_384
    assert rollout.gradients == 0  # zero_grad() ends every update
    moments = plan.update_moments(small_request(), "actor")
    assert moments["end of backward"].weights == 4 * actor + 4 * critic  # fp32 on one GPU: no second copy for compute
    # end of backward: the whole-model FSDP unit's gradients buffered + concatenated (8 B/param)
    # on top of the earlier micro-batch's (4 B/param; 2 micro-batches per optimizer step)
    assert moments["end of backward"].gradients == 4 * actor + 8 * actor
    step = moments["optimizer step"]
    assert (step.gradients, step.optimizer) == (4 * actor, 8 * actor + 8 * critic + 4 * actor)  # + foreach AdamW's sqrt temporary
    assert p.phase("actor_update").total == max(m.total for m in moments.values())


def test_weights_gradients_optimizer_bytes_bf16():
    actor, critic = 138304, 138369
    p = predict(small_request(dtype="bfloat16"))
    assert p.phase("rollout").weights == 4 * actor + 4 * critic  # fp32 masters (fsdp_workers.py:216, 905)
    assert p.phase("old_log_prob").weights == 4 * actor + 4 * critic + 2 * actor  # + FSDP's bf16 copy of the whole (unwrapped) actor
    end = plan.update_moments(small_request(dtype="bfloat16"), "actor")["end of backward"]
    assert end.gradients == 4 * actor + 6 * actor  # bf16 concatenated 2 + its fp32 cast 4, per param
    assert end.optimizer == 8 * actor + 8 * critic
    assert end.weights == 4 * actor + 4 * critic + 2 * actor


def test_two_gpus_shard_states():
    one, two = predict(small_request()), predict(small_request(gpus=2))
    assert two.phase("values").optimizer == plan._shard(138304, 2) * 8 + plan._shard(138369, 2) * 8
    assert two.phase("values").optimizer < one.phase("values").optimizer


def test_activation_and_logits_by_hand():
    # per token per layer, fp32, SDPA: 44*h + 8*kv + 16*I + 2*q_dim*4 (repeat_kv'd K and V)
    per_token = 44 * 64 + 8 * 32 + 16 * 128 + 2 * 64 * 4
    assert per_token == 5632
    tokens = 2 * 64  # micro-batch 2 x (32 prompt + 32 response)
    layer = tokens * per_token
    assert plan.layer_activation_bytes(SMALL, tokens, 64, "float32", "sdpa") == layer == 720_896
    final_norm = tokens * 64 * 12
    mask = 2 * 64 * 64 * 4
    saved = 2 * layer + final_norm + mask
    assert plan.training_activation_bytes(SMALL, 2, 64, "float32", "sdpa", checkpointing=False) == (saved, saved + layer)
    checkpointed = 2 * tokens * 64 * 4 + final_norm + mask
    assert plan.training_activation_bytes(SMALL, 2, 64, "float32", "sdpa", checkpointing=True) == (checkpointed, checkpointed + 2 * layer)
    # old log-prob logits: (2, 64, 1000) fp32 + 2 fp32 tensors over (2, 32, 1000) for the eager entropy
    # (the softmax, and logsumexp's one temporary or the product pd * logits)
    assert predict(small_request()).phase("old_log_prob").logits == 2 * 1000 * (64 * 4 + 32 * 8) == 1_024_000


def test_bf16_logits_by_hand_without_fused_kernels():
    bf16 = small_request(dtype="bfloat16")
    # old log-prob: (2, 64, 1000) bf16 logits + 10 B per (response token, vocab entry) for the eager entropy
    # (8 B derived, 10 calibrated); larger than the ref path's row loop (2 rows of (32, 1000) fp32)
    assert predict(bf16).phase("old_log_prob").logits == 2 * 1000 * (64 * 2 + 32 * 10) == 896_000
    # actor update: bf16 logits + the rows' saved fp32 log_softmax outputs, or after them the slice's and
    # the division's bf16 gradients over the whole sequence: equal here, 512,000 either way
    logits = plan.update_moments(bf16, "actor")["backward through the logits"].logits
    assert logits == max(2 * 1000 * (64 * 2 + 32 * 4), 2 * 1000 * 64 * 4) == 512_000


def test_fused_kernels_follow_the_attention_that_runs():
    from verlfit.profiles import load_profile

    a10 = load_profile("a10")
    assert plan.request_for_profile(a10, SMALL, 24 * GIB).fused_kernels is True  # flash_attention_2: padding-free path
    # sdpa on the a10 profile runs verl's padded path: eager entropy, whatever the image holds (dp_actor.py:266-268)
    assert plan.request_for_profile(a10, SMALL, 24 * GIB, attention="sdpa").fused_kernels is False
    assert plan.request_for_profile(load_profile("p40"), SMALL, 24 * GIB).fused_kernels is False


def test_phases_by_algorithm():
    assert [p.phase for p in predict(small_request()).phases] == ["rollout", "old_log_prob", "values", "critic_update", "actor_update"]
    grpo = predict(small_request(algorithm="grpo", rollout_n=4))
    assert [p.phase for p in grpo.phases] == ["rollout", "old_log_prob", "ref_log_prob", "actor_update"]
    assert grpo.phase("rollout").kv_cache == 2 * 2 * (8 * 4) * 64 * 32 * 4  # K,V x layers x sequences x tokens x kv_dim x fp32


def _facts(**fields):
    base = dict(shape=QWEN, gpu_memory_bytes=24 * GIB, max_prompt_length=256, max_response_length=256)
    base.update(fields)
    return PlanRequest(**base)


@pytest.mark.parametrize(
    "fields, measured_gib",
    [
        (dict(train_batch_size=1, ppo_mini_batch_size=1, actor_micro_batch_size=1, critic_micro_batch_size=1, log_prob_micro_batch_size=1), 14.8),
        (dict(train_batch_size=8, ppo_mini_batch_size=8, actor_micro_batch_size=2, critic_micro_batch_size=2, log_prob_micro_batch_size=2, gradient_checkpointing=True), 16.6),
        (dict(train_batch_size=16, ppo_mini_batch_size=16, actor_micro_batch_size=4, critic_micro_batch_size=4, log_prob_micro_batch_size=4, gradient_checkpointing=True, actor_optimizer_offload=True, critic_optimizer_offload=True), 13.0),
    ],
)
def test_facts_section5_fp32_ppo_measurements(fields, measured_gib):
    """the earlier device measurements (docs/plan.md section 5) (H200 under a P40 cap, Qwen2.5-0.5B shape, fp32, PPO): max allocated within 3%."""
    predicted = predict(_facts(**fields)).peak.total / GIB
    assert abs(predicted - measured_gib) / measured_gib < 0.03, predicted


def test_reference_model_stays_on_one_gpu():
    """FSDP1 NO_SHARD + CPUOffload (one GPU, fsdp_workers.py:319): the views of each unit's GPU copy keep the whole
    ref model on the GPU after its forward, in the compute dtype, for every later phase (docs/plan.md section 2.0)."""
    actor = 138304
    grpo = small_request(algorithm="grpo", rollout_n=4)
    p = predict(grpo)
    ref = 4 * actor  # the whole fp32 ref, not just root unit + layers in flight
    assert p.phase("rollout").weights == 4 * actor + ref == 1_106_432
    assert p.phase("old_log_prob").weights == 4 * actor + ref
    assert p.phase("ref_log_prob").weights == ref + 4 * actor
    assert all(m.weights == 4 * actor + ref for m in plan.update_moments(grpo, "actor").values())
    assert predict(replace(grpo, dtype="bfloat16")).phase("rollout").weights == 4 * actor + 2 * actor  # bf16 ref (verl's default model_dtype)
    assert predict(small_request()).phase("rollout").weights == 4 * actor + 4 * 138369  # PPO: no ref
    # several GPUs: FULL_SHARD frees the units after forward and verl reshards the root (fsdp_workers.py:756-758)
    two = replace(grpo, gpus=2)
    assert predict(two).phase("rollout").weights == predict(replace(two, use_reference=False)).phase("rollout").weights


@pytest.mark.parametrize(
    "fields, measured_gib",
    [
        # the earlier device trial (docs/plan.md section 5): GRPO 8 x 4, micro 4, checkpointing, optimizer offload, fp32 ref
        (dict(max_prompt_length=256, train_batch_size=8, ppo_mini_batch_size=8, actor_micro_batch_size=4, log_prob_micro_batch_size=4, gradient_checkpointing=True, actor_optimizer_offload=True), 13.0),
        # benchmarks/results/2026-11-29-h200/call-2/main-grpo: 8 x 4, mini 4, micro 8/8, prompt 512 (docs/benchmarks.md section 3)
        (dict(max_prompt_length=512, train_batch_size=8, ppo_mini_batch_size=4, actor_micro_batch_size=8, log_prob_micro_batch_size=8, gradient_checkpointing=True), 16.796),
    ],
)
def test_facts_fp32_grpo_measurements(fields, measured_gib):
    """fp32 GRPO with a KL loss and a separate fp32 ref on one GPU: max allocated within 3% (the resident ref is 1.84 GiB of it)."""
    predicted = predict(_facts(algorithm="grpo", rollout_n=4, **fields)).peak.total / GIB
    assert abs(predicted - measured_gib) / measured_gib < 0.03, predicted


def test_verdicts():
    request = _facts(train_batch_size=1, ppo_mini_batch_size=1, actor_micro_batch_size=1, critic_micro_batch_size=1, log_prob_micro_batch_size=1)
    peak = predict(request).peak.total
    need = peak + plan.ALLOCATOR_HEADROOM_BYTES
    assert predict(replace(request, gpu_memory_bytes=int(need / 0.9) + 1)).verdict == "fits"
    assert predict(replace(request, gpu_memory_bytes=need)).verdict == "tight"
    assert predict(replace(request, gpu_memory_bytes=need - 1)).verdict == "does not fit"
    unsupported = predict(replace(request, actor_param_offload=True))
    assert unsupported.verdict == "unsupported"
    assert "fsdp_workers.py:648-680" in unsupported.notes[-1]


def test_invalid_micro_batch_is_refused():
    with pytest.raises(VerlfitError, match="actor micro-batch 3 does not divide the per-GPU mini-batch of 4 responses"):
        predict(small_request(actor_micro_batch_size=3))


def _need(request, phase):
    return predict(request).phase(phase).total + plan.ALLOCATOR_HEADROOM_BYTES


def test_auto_fit_picks_the_largest_actor_micro_batch_that_fits():
    base = _facts(train_batch_size=32, ppo_mini_batch_size=16, gradient_checkpointing=True, actor_optimizer_offload=True, critic_optimizer_offload=True)
    need4 = _need(replace(base, actor_micro_batch_size=4), "actor_update")
    need8 = _need(replace(base, actor_micro_batch_size=8), "actor_update")
    assert need4 < need8
    card = int((need4 + need8) / 2 / 0.9)
    decision = auto_fit(replace(base, gpu_memory_bytes=card), keep=("gradient_checkpointing", "offload"))
    assert decision.fits and decision.request.actor_micro_batch_size == 4
    budget = int(0.9 * card)
    assert f"actor micro-batch 4: 8 would need {need8 / GIB:.1f} GiB of {budget / GIB:.1f} GiB (90% of {card / GIB:.1f} GiB) in actor update" in decision.reasons
    # every phase of the chosen plan is within the budget
    assert decision.plan.required_bytes <= budget


def test_auto_fit_turns_on_checkpointing_only_when_needed():
    base = _facts(max_prompt_length=512, max_response_length=1024)
    ones = dict(actor_micro_batch_size=1, critic_micro_batch_size=1, log_prob_micro_batch_size=1, rollout_micro_batch_size=1)
    without = predict(replace(base, **ones)).required_bytes
    with_gc = predict(replace(base, gradient_checkpointing=True, **ones)).required_bytes
    assert with_gc < without
    card = int((with_gc + without) / 2 / 0.9)
    decision = auto_fit(replace(base, gpu_memory_bytes=card))
    r = decision.request
    assert decision.fits and r.gradient_checkpointing
    assert not (r.actor_optimizer_offload or r.critic_optimizer_offload or r.actor_param_offload or r.critic_param_offload)
    assert decision.reasons[0].startswith("gradient checkpointing on: without it, ")
    roomy = auto_fit(replace(base, gpu_memory_bytes=4 * card))
    assert roomy.fits and not roomy.request.gradient_checkpointing


def test_auto_fit_never_offloads_actor_params_with_hf_rollout():
    decision = auto_fit(_facts(max_prompt_length=1024, max_response_length=8192, gpu_memory_bytes=int(22.5 * GIB)))
    assert not decision.request.actor_param_offload


def test_auto_fit_refuses_with_the_smallest_change():
    request = _facts(max_prompt_length=1024, max_response_length=8192, gpu_memory_bytes=int(22.5 * GIB))
    decision = auto_fit(request)
    assert not decision.fits
    assert decision.reasons[-1].startswith("nothing fits: even with every saving on, ")
    assert decision.suggestion.startswith("smallest changes that would fit, each on its own: --max-response-length ")
    length = int(decision.suggestion.split("--max-response-length ")[1].split()[0])
    assert length % 32 == 0 and length < 8192
    assert auto_fit(replace(request, max_response_length=length)).fits
    assert not auto_fit(replace(request, max_response_length=length + 32)).fits


def test_auto_fit_keeps_what_it_is_told_to():
    request = _facts(actor_micro_batch_size=2, critic_micro_batch_size=2, log_prob_micro_batch_size=2, rollout_micro_batch_size=4, gradient_checkpointing=True, gpu_memory_bytes=int(22.5 * GIB))
    decision = auto_fit(request, keep=("micro_batches", "offload", "gradient_checkpointing"))
    assert decision.fits and decision.request == request


class Settings:
    """The attributes of verlfit.overrides.TrainSettings that fit_for_train reads and writes."""

    model = "Qwen/Qwen2.5-0.5B-Instruct"
    algorithm = "ppo"
    rollout_n = 4
    gpus = 1
    nodes = 1
    train_batch_size = 32
    ppo_mini_batch_size = 16
    actor_micro_batch_size = 4
    log_prob_micro_batch_size = 8
    critic_micro_batch_size = 4
    rollout_micro_batch_size = None
    max_prompt_length = 512
    max_response_length = 256
    gradient_checkpointing = True
    actor_param_offload = actor_optimizer_offload = critic_param_offload = critic_optimizer_offload = False


def test_fit_for_train_writes_settings_and_refuses():
    from verlfit.profiles import load_profile

    settings = Settings()
    lines = plan.fit_for_train(settings, load_profile("p40"), int(22.5 * GIB))
    assert lines[-1].startswith("plan: peak: ") and lines[-1].endswith("-> fits")
    assert settings.gradient_checkpointing  # never turned off
    assert settings.rollout_micro_batch_size in (1, 2, 4, 8, 16, 32)
    hopeless = Settings()
    hopeless.max_response_length = 8192
    with pytest.raises(VerlfitError) as caught:
        plan.fit_for_train(hopeless, load_profile("p40"), int(22.5 * GIB))
    assert caught.value.fix.startswith("smallest changes that would fit")


def run_cli(argv, capsys):
    status = cli.main(argv)
    return status, capsys.readouterr()


def test_cli_json_for_emulated_p40(capsys):
    status, out = run_cli(["plan", "--emulate", "p40", "--json"], capsys)
    data = json.loads(out.out)
    assert status == 0
    assert data["usable_bytes"] == int(22.5 * GIB)
    assert data["model"]["actor_parameters"] == 494_032_768
    assert [p["phase"] for p in data["phases"]] == ["rollout", "old_log_prob", "values", "critic_update", "actor_update"]
    assert data["request"]["dtype"] == "float32" and data["request"]["rollout"] == "hf"
    assert data["verdict"] in ("fits", "tight")
    assert data["headroom_bytes"] == plan.ALLOCATOR_HEADROOM_BYTES


def test_cli_table_auto_fit_grpo(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMALL_CONFIG))
    status, out = run_cli(["plan", "--model", str(tmp_path), "--profile", "p40", "--gpu-memory", "4", "--algo", "grpo", "--auto-fit"], capsys)
    assert status == 0
    assert "auto-fit:" in out.out and "ref log-prob" in out.out and "verdict: fits" in out.out


def test_cli_refusal_exit_status(capsys):
    status, out = run_cli(["plan", "--emulate", "p40", "--max-response-length", "8192", "--max-prompt-length", "1024", "--auto-fit"], capsys)
    assert status == 1
    assert "auto-fit: nothing fits" in out.out and "--max-response-length" in out.out


def test_cli_without_gpu_plans_for_p40():
    class NoNvml:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    args = cli.build_parser().parse_args(["plan"])
    request, source = plan.request_from_args(args, nvml=NoNvml())
    assert request.gpu_memory_bytes == int(22.5 * GIB)
    assert source.startswith("no NVIDIA GPU visible: NVML could not start (NVML Shared Library Not Found)")
    assert source.endswith("planning for the p40 card (22.5 GiB usable); pass --gpu-memory or --emulate to choose")


@pytest.mark.parametrize("argv, fragment", [
    (["--profile", "p40", "--dtype", "bfloat16"], "--dtype bfloat16 with the p40 profile: bf16 needs compute capability 8.0"),
    (["--profile", "p40", "--rollout", "vllm"], "--rollout vllm with the p40 profile: vLLM needs compute capability 7.0"),
    (["--profile", "p40", "--attention", "flash_attention_2"], "FlashAttention-2 needs compute capability 8.0 and fp16/bf16"),
    (["--profile", "a10", "--dtype", "float32", "--attention", "flash_attention_2"], "FlashAttention-2 has no fp32 kernels"),
    (["--profile", "a10", "--rollout", "hf", "--vllm-gpu-memory-utilization", "0.5"], "--vllm-gpu-memory-utilization with the hf rollout"),
])
def test_cli_refuses_what_train_refuses(argv, fragment, capsys):
    status, out = run_cli(["plan", *argv], capsys)
    assert status == 2 and fragment in out.err


def test_plan_and_train_choose_the_same_micro_batches_for_a10_with_hf_rollout_and_sdpa(capsys):
    from verlfit.train import prepare_launch

    status, out = run_cli(["plan", "--profile", "a10", "--rollout", "hf", "--attention", "sdpa", "--auto-fit"], capsys)
    assert status == 0
    args = cli.build_parser().parse_args(["train", "--profile", "a10", "--rollout", "hf", "--attention", "sdpa", "--dry-run"])
    settings = prepare_launch(args, environ={}, gpu=None).settings
    assert f"chosen: actor micro-batch {settings.actor_micro_batch_size}, log-prob {settings.log_prob_micro_batch_size}, critic {settings.critic_micro_batch_size}, rollout 32 prompts" in out.out


def test_cli_follows_the_images_profile_and_trains_micro_batch_rule(monkeypatch):
    class NoNvml:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setenv("VERLFIT_PROFILE", "a10")
    request, _ = plan.request_from_args(cli.build_parser().parse_args(["plan", "--micro-batch-size", "8"]), nvml=NoNvml())
    assert (request.dtype, request.rollout) == ("bfloat16", "vllm")
    assert (request.actor_micro_batch_size, request.critic_micro_batch_size, request.log_prob_micro_batch_size) == (8, 8, 16)
    monkeypatch.setenv("VERLFIT_PROFILE", "v100")
    with pytest.raises(VerlfitError, match="VERLFIT_PROFILE=v100 is not a profile"):
        plan.request_from_args(cli.build_parser().parse_args(["plan"]), nvml=NoNvml())


def test_a_plan_that_does_not_fit_points_to_auto_fit(capsys):
    status, out = run_cli(["plan", "--emulate", "p40", "--micro-batch-size", "16"], capsys)
    assert status == 1
    assert "verdict: does not fit" in out.out
    assert out.out.rstrip().endswith("add --auto-fit to let the planner choose micro-batches, gradient checkpointing and offload (as verlfit train does)")
    status, out = run_cli(["plan", "--emulate", "p40"], capsys)
    assert status == 0 and "add --auto-fit" not in out.out
