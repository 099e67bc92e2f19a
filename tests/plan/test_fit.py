"""The fitting search (verlfit.plan.fit): auto-fit's choices on constructed cards, refusal with the smallest
change, and what it writes into verlfit train's settings."""

import json
from dataclasses import replace

import pytest

from plan_inputs import QWEN, QWEN_1P5B, qwen_request
from verlfit import cli
from verlfit.errors import VerlfitError
from verlfit.plan import fit, memory
from verlfit.model_shape import load_model_shape
from verlfit.plan.fit import auto_fit, fit_memory
from verlfit.plan.memory import GIB, predict
from verlfit.plan.request import request_for_profile
from verlfit.profiles import load_profile


def _need(request, phase):
    return predict(request).phase(phase).total + memory.ALLOCATOR_HEADROOM_BYTES


def _checkpointed_offloaded_request():
    """Batch 32, mini-batch 16, checkpointing and both optimizers offloaded: the actor micro-batch is what fits."""
    return qwen_request(
        train_batch_size=32,
        ppo_mini_batch_size=16,
        gradient_checkpointing=True,
        actor_optimizer_offload=True,
        critic_optimizer_offload=True,
    )


def test_auto_fit_picks_the_largest_actor_micro_batch_that_fits():
    base = _checkpointed_offloaded_request()
    need4 = _need(replace(base, actor_micro_batch_size=4), "actor_update")
    need8 = _need(replace(base, actor_micro_batch_size=8), "actor_update")
    assert need4 < need8
    card = int((need4 + need8) / 2 / 0.9)
    decision = auto_fit(replace(base, gpu_memory_bytes=card), keep=("gradient_checkpointing", "offload"))
    assert decision.fits and decision.request.actor_micro_batch_size == 4
    budget = int(0.9 * card)
    assert (
        f"actor micro-batch 4: 8 would need {need8 / GIB:.1f} GiB of {budget / GIB:.1f} GiB (90% of"
        f" {card / GIB:.1f} GiB) in actor update" in decision.reasons
    )
    # every phase of the chosen plan is within the budget
    assert decision.plan.required_bytes <= budget


def test_a_need_just_over_the_budget_is_told_with_the_decimals_that_tell_them_apart():
    """New-user trial: a refusal read "would need 12.6 GiB of 12.6 GiB". A need 0.01 GiB over the budget is printed
    with two decimals (both numbers), and the peak note's required-of-usable the same way."""
    base = _checkpointed_offloaded_request()
    need8 = _need(replace(base, actor_micro_batch_size=8), "actor_update")
    budget = need8 - GIB // 100
    assert f"{need8 / GIB:.1f}" == f"{budget / GIB:.1f}"  # the case: alike at one decimal
    card = int(budget / 0.9) + 1
    decision = auto_fit(replace(base, gpu_memory_bytes=card), keep=("gradient_checkpointing", "offload"))
    assert decision.fits and decision.request.actor_micro_batch_size == 4
    assert (
        f"actor micro-batch 4: 8 would need {need8 / GIB:.2f} GiB of {int(0.9 * card) / GIB:.2f} GiB (90% of"
        f" {card / GIB:.1f} GiB) in actor update" in decision.reasons
    )
    assert memory.format_gib_against(int(12.64 * GIB), int(12.63 * GIB)) == ("12.64 GiB", "12.63 GiB")
    assert memory.format_gib_against(int(12.6401 * GIB), int(12.6399 * GIB)) == ("12.640 GiB", "12.640 GiB")
    assert memory.format_gib_against(12 * GIB, 12 * GIB) == ("12.0 GiB", "12.0 GiB")
    assert memory.format_gib_against(int(12.64 * GIB), int(20.2 * GIB)) == ("12.6 GiB", "20.2 GiB")
    assert memory.format_gib_against(int(12.56 * GIB), 14 * GIB, int(12.6 * GIB)) == (
        "12.56 GiB",
        "14.00 GiB",
        "12.60 GiB",
    )
    # the peak note: required against the budget (new-user trial: "= 12.6 GiB of 14.0 GiB usable (90%); budget at
    # 90%: 12.6 GiB" with the verdict tight)
    plan = predict(replace(base, actor_micro_batch_size=8, gpu_memory_bytes=card))
    assert plan.verdict == "tight" and f"{plan.required_bytes / GIB:.1f}" == f"{0.9 * card / GIB:.1f}"
    assert plan.notes[0].endswith(
        f"= {plan.required_bytes / GIB:.2f} GiB of {card / GIB:.2f} GiB usable (90%); budget at 90%: "
        f"{0.9 * card / GIB:.2f} GiB"
    )


def test_auto_fit_turns_on_checkpointing_only_when_needed():
    base = qwen_request(max_prompt_length=512, max_response_length=1024)
    ones = dict(
        actor_micro_batch_size=1, critic_micro_batch_size=1, log_prob_micro_batch_size=1, rollout_micro_batch_size=1
    )
    without = predict(replace(base, **ones)).required_bytes
    with_gc = predict(replace(base, gradient_checkpointing=True, **ones)).required_bytes
    assert with_gc < without
    card = int((with_gc + without) / 2 / 0.9)
    decision = auto_fit(replace(base, gpu_memory_bytes=card))
    r = decision.request
    assert decision.fits and r.gradient_checkpointing
    assert not (
        r.actor_optimizer_offload or r.critic_optimizer_offload or r.actor_param_offload or r.critic_param_offload
    )
    assert decision.reasons[0].startswith("gradient checkpointing on: without it, ")
    roomy = auto_fit(replace(base, gpu_memory_bytes=4 * card))
    assert roomy.fits and not roomy.request.gradient_checkpointing


def test_auto_fit_never_offloads_actor_params_with_hf_rollout():
    decision = auto_fit(
        qwen_request(max_prompt_length=1024, max_response_length=8192, gpu_memory_bytes=int(22.5 * GIB))
    )
    assert not decision.request.actor_param_offload


def test_auto_fit_refuses_with_the_smallest_change():
    request = qwen_request(max_prompt_length=1024, max_response_length=8192, gpu_memory_bytes=int(22.5 * GIB))
    decision = auto_fit(request)
    assert not decision.fits
    assert decision.reasons[-1].startswith("nothing fits: even with every saving on, ")
    assert decision.suggestion.startswith("smallest changes that would fit, each on its own: --max-response-length ")
    length = int(decision.suggestion.split("--max-response-length ")[1].split()[0])
    assert length % 32 == 0 and length < 8192
    assert auto_fit(replace(request, max_response_length=length)).fits
    assert not auto_fit(replace(request, max_response_length=length + 32)).fits


def test_auto_fit_keeps_what_it_is_told_to():
    request = qwen_request(
        actor_micro_batch_size=2,
        critic_micro_batch_size=2,
        log_prob_micro_batch_size=2,
        rollout_micro_batch_size=4,
        gradient_checkpointing=True,
        gpu_memory_bytes=int(22.5 * GIB),
    )
    kept = ("micro_batches", "rollout_micro_batch", "offload", "gradient_checkpointing")
    decision = auto_fit(request, keep=kept)
    assert decision.fits and decision.request == request
    # the rollout's micro-batch is kept apart: --micro-batch-size alone leaves it to the planner (the whole batch here)
    decision = auto_fit(request, keep=("micro_batches", "offload", "gradient_checkpointing"))
    assert decision.fits and decision.request == replace(request, rollout_micro_batch_size=32)


def Settings():
    """verlfit train's settings with their defaults (verlfit.run_settings.TrainSettings: the type fit_for_train reads
    and
    writes): Qwen2.5-0.5B, PPO, batch 32, mini-batch 16, micro-batches 4/8/4, 512 + 256 tokens."""
    from verlfit.run_settings import TrainSettings

    return TrainSettings()


def test_fit_for_train_writes_settings_and_refuses():
    from verlfit.profiles import load_profile

    settings = Settings()
    lines = fit.fit_for_train(settings, load_profile("p40"), int(22.5 * GIB))
    assert lines[-1].startswith("plan: peak: ") and lines[-1].endswith("-> fits")
    assert settings.gradient_checkpointing  # never turned off
    assert settings.rollout_micro_batch_size in (1, 2, 4, 8, 16, 32)
    hopeless = Settings()
    hopeless.max_response_length = 8192
    with pytest.raises(VerlfitError) as caught:
        fit.fit_for_train(hopeless, load_profile("p40"), int(22.5 * GIB))
    assert caught.value.fix.startswith("smallest changes that would fit")


def test_auto_fit_reasons_for_a_batch_that_is_not_a_power_of_two():
    """issue 16 item 8: with --batch-size 3 auto-fit said "log-prob micro-batch 2: the largest possible (2 responses
    per GPU)" although there are 3. verl's log-prob split takes a last, smaller chunk (dp_actor.py:345), so the whole
    3 is a candidate; every choice names the real count."""
    decision = auto_fit(
        qwen_request(train_batch_size=3, ppo_mini_batch_size=3, gradient_checkpointing=True, gpu_memory_bytes=80 * GIB),
        keep=("gradient_checkpointing", "offload"),
    )
    assert decision.fits
    assert decision.reasons == (
        "actor micro-batch 3: the largest possible (3 responses per GPU)",
        "log-prob micro-batch 3: the largest possible (3 responses per GPU)",
        "critic micro-batch 3: the largest possible (3 responses per GPU)",
        "rollout micro-batch 3: the largest possible (3 prompts per GPU)",
    )
    r = decision.request
    assert (
        r.actor_micro_batch_size,
        r.log_prob_micro_batch_size,
        r.critic_micro_batch_size,
        r.rollout_micro_batch_size,
    ) == (3, 3, 3, 3)


def test_log_prob_candidates_end_with_the_whole_batch():
    assert fit._candidates(qwen_request(train_batch_size=3, ppo_mini_batch_size=3), "log_prob") == [1, 2, 3]
    assert fit._candidates(qwen_request(train_batch_size=24, ppo_mini_batch_size=12), "log_prob") == [
        1,
        2,
        4,
        8,
        16,
        24,
    ]
    assert fit._candidates(qwen_request(train_batch_size=32, ppo_mini_batch_size=16), "log_prob") == [
        1,
        2,
        4,
        8,
        16,
        32,
    ]


def test_a_lora_rank_too_large_for_the_card_is_offered_the_largest_rank_that_fits():
    """new-user trial: `verlfit train --lora-rank 100000` said "no single change found that fits: use a smaller model
    or a card with more memory", while a smaller --lora-rank fits on a P40."""
    from verlfit.plan.fit import DEFAULT_MARGIN, _fits_fully_saved
    from verlfit.plan.request import request_for_profile
    from verlfit.profiles import load_profile

    # as train builds it: the critic at the actor's rank (--lora-rank alone sets both); 1536 = the 1.5B's bound
    request = request_for_profile(
        load_profile("p40"),
        QWEN_1P5B,
        int(22.5 * GIB),
        algorithm="ppo",
        rollout_n=1,
        lora_rank=1536,
        critic_lora_rank=1536,
    )
    decision = auto_fit(request)
    assert not decision.fits
    prefix = "smallest changes that would fit, each on its own: --lora-rank "
    assert decision.suggestion.startswith(prefix)
    rank = int(decision.suggestion.removeprefix(prefix).split()[0])
    assert decision.suggestion.startswith(f"{prefix}{rank} (from 1536; and --critic-lora-rank {rank} if you gave one)")
    assert _fits_fully_saved(replace(request, lora_rank=rank, critic_lora_rank=rank), DEFAULT_MARGIN, frozenset())
    assert not _fits_fully_saved(
        replace(request, lora_rank=rank + 1, critic_lora_rank=rank + 1), DEFAULT_MARGIN, frozenset()
    )
    # a critic rank set apart is lowered on its own
    apart = auto_fit(replace(request, lora_rank=32)).suggestion
    assert apart.startswith(
        "smallest changes that would fit, each on its own: --critic-lora-rank "
    ) and "--lora-rank" not in apart.replace("--critic-lora-rank", "")


def test_lora_rank_suggestions_stay_within_the_layers_rank():
    """new-user trial: the 0.5B (hidden 896) was offered --lora-rank 1307; no LoRA update of its layers has a rank
    above min(in, out features) = 896 (q_proj 896 -> 896), and rank 896 fits on a P40."""
    from verlfit.plan.request import request_for_profile
    from verlfit.profiles import load_profile

    request = request_for_profile(
        load_profile("p40"), QWEN, int(22.5 * GIB), algorithm="ppo", rollout_n=1, lora_rank=896, critic_lora_rank=896
    )
    assert memory.lora_rank_bound(QWEN, "actor") == (896, "q_proj")
    assert auto_fit(request).fits
    unvalidated = replace(request, lora_rank=100000, critic_lora_rank=100000)  # what the search sees, past validation
    assert fit.smallest_change(unvalidated).startswith(
        "smallest changes that would fit, each on its own: --lora-rank 896 (from 100000;"
    )
    with pytest.raises(VerlfitError) as error:
        auto_fit(unvalidated)
    assert error.value.exit_code == 2
    assert (
        str(error.value)
        == "--lora-rank 100000: above 896, the largest rank a LoRA update of the actor's targeted layers can have on"
        f" {QWEN.name} (min(in, out features); the widest is q_proj, 896 -> 896): a larger rank adds memory and no"
        " capacity\n  fix: use --lora-rank 896 or less (e.g. 32)"
    )
    with pytest.raises(
        VerlfitError, match=r"^--critic-lora-rank 900: above 896, the largest rank a LoRA update of the critic's"
    ):
        memory.validate_request(replace(request, lora_rank=32, critic_lora_rank=900))
    memory.validate_request(replace(request, lora_rank=896, critic_lora_rank=896))


def test_nothing_fits_names_the_phase_the_peak_line_names():
    """new-user trial: full-parameter 1.5B PPO said "nothing fits: ... actor update at actor micro-batch 1 would need
    35.0 GiB" while its peak line said "peak: critic update 34.5 GiB" (both 34.50 GiB in the table; the critic update is
    30,740 bytes larger: its value head)."""
    from verlfit.model_shape import load_model_shape
    from verlfit.plan.memory import ALLOCATOR_HEADROOM_BYTES, format_gib
    from verlfit.plan.request import request_for_profile
    from verlfit.profiles import load_profile

    request = request_for_profile(load_profile("p40"), load_model_shape("Qwen/Qwen2.5-1.5B-Instruct"), int(22.5 * GIB))
    decision = auto_fit(request)
    phases = {p.phase: p.total for p in decision.plan.phases}
    assert phases["critic_update"] - phases["actor_update"] == 30_740 and decision.plan.peak.phase == "critic_update"
    assert (
        decision.reasons[0]
        == "nothing fits: even with every saving on, critic update at critic micro-batch 1 would need 35.0 GiB of 20.2"
        " GiB (90% of 22.5 GiB)"
    )
    assert decision.plan.notes[0].startswith(
        f"peak: critic update 34.5 GiB + {format_gib(ALLOCATOR_HEADROOM_BYTES)} allocator headroom = 35.0 GiB"
    )


def _a10_request(model, algorithm="grpo"):
    """A LoRA r32 request on the a10 profile (vLLM, 35% of the card) at train's sizes (batch 32, 512/256)."""
    return request_for_profile(
        load_profile("a10"),
        load_model_shape(model),
        int(22 * GIB),
        algorithm=algorithm,
        lora_rank=32,
        frozen_base_dtype="bfloat16",
        train_batch_size=32,
        ppo_mini_batch_size=16,
        rollout_n=4 if algorithm == "grpo" else 1,
        max_prompt_length=512,
        max_response_length=256,
    )


def test_a_model_larger_than_vllms_share_is_refused_and_sent_to_the_hf_rollout(capsys):
    # the a10 profile gives vLLM 35% of the card; a 7B's bf16 weights (14.2 GiB) do not fit its 7.9 GiB, so vLLM
    # would stop at start: no rung of offload helps, and the fixes are the rollouts that need no second copy
    argv = ["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--algo", "grpo", "--emulate", "a10", "--lora-rank", "32"]
    assert cli.main([*argv, "--auto-fit", "--json"]) == 1
    plan = json.loads(capsys.readouterr().out)
    share = (
        "vLLM's share of the card (35%, 7.9 GiB) is smaller than the weights it loads (14.2 GiB): it would stop at "
        "start with no memory for its KV cache; --rollout hf generates from the training weights instead"
    )
    assert plan["verdict"] == "does not fit"
    assert plan["auto_fit"]["reasons"] == ["nothing fits: even with every saving on, " + share]
    assert plan["auto_fit"]["suggestion"] == (
        "smallest changes that would fit, each on its own: --rollout hf (HF generate from the training weights: no "
        "second copy of the model in vLLM's share of the card; slower generation); --frozen-base-dtype nf4 --rollout "
        "hf (QLoRA: the layers' Linears in 4 bits; the adapter learns against the quantised base)"
    )
    assert share in plan["notes"]
    # the 3B's 5.8 GiB fit the share: no such refusal
    assert memory.vllm_share_shortfall(_a10_request("Qwen/Qwen2.5-3B-Instruct")) is None


def test_a_phase_no_micro_batch_sizes_over_the_budget_climbs_the_ladder():
    # the 3B PPO LoRA on the a10 profile: its vLLM rollout (the FSDP weights and vLLM's share beside them) is over
    # the 90% budget at the first rung, which auto-fit once took anyway (a 20.7 GiB "fit" in 19.8): now offload
    # brings it under, and every phase then fits
    decision = fit_memory(_a10_request("Qwen/Qwen2.5-3B-Instruct", algorithm="ppo"))
    assert decision.fits and decision.plan.required_bytes <= 0.9 * decision.request.gpu_memory_bytes
    assert decision.reasons[:3] == (
        "gradient checkpointing on: without it, rollout would need 21.2 GiB of 19.8 GiB (90% of 22.0 GiB)",
        "optimizer offload on: without it, rollout would need 21.2 GiB of 19.8 GiB (90% of 22.0 GiB)",
        "param offload on: without it, rollout would need 20.3 GiB of 19.8 GiB (90% of 22.0 GiB)",
    )
    # with vLLM the actor's parameters may leave the GPU too (verl moves them back to the CPU once synced)
    assert decision.request.critic_param_offload and decision.request.actor_param_offload


def test_a_kept_rollout_micro_batch_that_fits_nowhere_is_offered_to_the_planner(capsys):
    # plan's --rollout-micro-batch-size 16 for the 7B GRPO LoRA on a P40: 16 prompts x 4 samples in one generate call
    # fit no rung; without it auto-fit fits (8 prompts a call, with the NF4 base): that is the fix, not "no change"
    argv = ["plan", "--model", "Qwen/Qwen2.5-7B-Instruct", "--emulate", "p40", "--algo", "grpo", "--lora-rank", "32"]
    assert cli.main([*argv, "--rollout-micro-batch-size", "16", "--json"]) == 1
    plan = json.loads(capsys.readouterr().out)
    assert plan["auto_fit"]["suggestion"] == (
        "smallest changes that would fit, each on its own: leave --rollout-micro-batch-size out for the planner to "
        "choose (its choice: 8 prompts a generate call, the base in nf4)"
    )
