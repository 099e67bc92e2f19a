"""Building a PlanRequest (verlfit.plan.request): from a profile and from verlfit plan's arguments."""

import pytest

from plan_inputs import SMALL
from verlfit import cli
from verlfit.errors import VerlfitError
from verlfit.plan.memory import GIB
from verlfit.commands.plan import plan_options
from verlfit.plan.request import request_for_profile, request_from_options


def test_fused_kernels_follow_the_attention_that_runs():
    from verlfit.profiles import load_profile

    a10 = load_profile("a10")
    assert request_for_profile(a10, SMALL, 24 * GIB).fused_kernels is True  # flash_attention_2: padding-free path
    # sdpa on the a10 profile runs verl's padded path: eager entropy, whatever the image holds (dp_actor.py:266-268)
    assert request_for_profile(a10, SMALL, 24 * GIB, attention="sdpa").fused_kernels is False
    assert request_for_profile(load_profile("p40"), SMALL, 24 * GIB).fused_kernels is False


def test_cli_without_gpu_plans_for_p40():
    class NoNvml:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    args = cli.build_parser().parse_args(["plan"])
    request, source = request_from_options(plan_options(args), nvml=NoNvml())
    assert request.gpu_memory_bytes == int(22.5 * GIB)
    assert source.startswith("no NVIDIA GPU visible: NVML could not start (NVML Shared Library Not Found)")
    assert source.endswith("planning for the p40 card (22.5 GiB usable); pass --gpu-memory or --emulate to choose")


def test_cli_follows_the_images_profile_and_trains_micro_batch_rule(monkeypatch):
    class NoNvml:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setenv("VERLFIT_PROFILE", "a10")
    request, _ = request_from_options(
        plan_options(cli.build_parser().parse_args(["plan", "--micro-batch-size", "8"])), nvml=NoNvml()
    )
    assert (request.dtype, request.rollout) == ("bfloat16", "vllm")
    assert (request.actor_micro_batch_size, request.critic_micro_batch_size, request.log_prob_micro_batch_size) == (
        8,
        8,
        16,
    )
    monkeypatch.setenv("VERLFIT_PROFILE", "p100")
    with pytest.raises(VerlfitError, match="VERLFIT_PROFILE=p100 is not a profile"):
        request_from_options(plan_options(cli.build_parser().parse_args(["plan"])), nvml=NoNvml())


def test_the_request_decodes_with_cuda_graphs_as_the_runs_override_list_says():
    # the profile's +actor_rollout_ref.rollout.cuda_graph=True (kept with LoRA since issue 43), verlfit's forcing off
    # (several GPUs), the user's value after -- last (verlfit.patch_switches.forced_switches, build_overrides' order)
    from verlfit.run_settings import TrainSettings
    from verlfit.plan.request import request_from_settings
    from verlfit.profiles import customize, load_profile

    p40, a10 = load_profile("p40"), load_profile("a10")

    def graph(profile, **fields):
        return request_from_settings(TrainSettings(model="m", **fields), profile, 24 * GIB, shape=SMALL).cuda_graph

    assert graph(p40) is True
    assert (graph(p40, lora_rank=32), graph(p40, gpus=2), graph(p40, nodes=2)) == (True, False, False)
    assert graph(p40, lora_rank=32, extra_overrides=["+actor_rollout_ref.rollout.cuda_graph=False"]) is False
    assert graph(p40, gpus=2, extra_overrides=["+actor_rollout_ref.rollout.cuda_graph=True"]) is True
    assert graph(p40, extra_overrides=["actor_rollout_ref.rollout.cuda_graph=False"]) is False
    assert graph(p40, extra_overrides=["~actor_rollout_ref.rollout.cuda_graph"]) is False
    assert graph(a10) is False  # vLLM, and its HF fallback keeps it opt-in
    assert graph(customize(a10, rollout="hf"), extra_overrides=["+actor_rollout_ref.rollout.cuda_graph=True"]) is True
    # verlfit plan: the profile's, or --cuda-graph / --no-cuda-graph (the flags the time model reads too)
    assert (
        request_from_options(plan_options(cli.build_parser().parse_args(["plan", "--emulate", "p40"])))[0].cuda_graph
        is True
    )
    assert (
        request_from_options(
            plan_options(cli.build_parser().parse_args(["plan", "--emulate", "p40", "--no-cuda-graph"]))
        )[0].cuda_graph
        is False
    )


@pytest.mark.parametrize(
    "argv, asked",
    [
        (["plan"], 1),  # the profile, the usable memory and the time card all come from the one answer
        (["plan", "--algo", "grpo", "--json"], 1),
        (["plan", "--profile", "p40", "--gpu-memory", "20"], 1),  # the time card is the detected one
        (["plan", "--profile", "p40", "--gpu-memory", "20", "--card", "t4"], 0),
        (["plan", "--emulate", "p40"], 0),
    ],
)
def test_a_plan_asks_nvml_at_most_once(argv, asked, capsys, monkeypatch):
    # issue 33: one verlfit plan asked NVML for the card up to three times (profile and memory, speed pick, time)
    import sys

    from fakes import FakeNvml

    class CountingNvml(FakeNvml):
        starts = 0

        def nvmlInit(self):
            CountingNvml.starts += 1

    monkeypatch.setitem(sys.modules, "pynvml", CountingNvml([("Tesla P40", (6, 1), 25_769_803_776)]))
    assert cli.main(argv) in (0, 1)
    assert CountingNvml.starts == asked
    if asked:
        assert "Tesla P40" in capsys.readouterr().out  # the detected card is the one planned and estimated for


def test_the_resolved_run_is_read_only_and_carries_the_flags_switches():
    import dataclasses

    from verlfit.plan.request import resolve_plan_run

    run = resolve_plan_run(
        plan_options(cli.build_parser().parse_args(["plan", "--emulate", "p40", "--no-cuda-graph", "--lora-rank", "8"]))
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.memory_bytes = 1
    assert (run.profile.name, run.memory_bytes, run.card.key, run.card_source) == (
        "p40",
        int(22.5 * GIB),
        "p40",
        "--emulate p40",
    )
    # the p40 profile's trims stay; --no-cuda-graph turns its graphs off; a LoRA actor on one GPU unwraps (forced)
    assert (
        run.switches.trim_padding,
        run.switches.rollout_trim_padding,
        run.switches.cuda_graph,
        run.switches.unwrap_fsdp,
    ) == (("actor", "ref", "critic"), True, False, True)
    assert run.gpu is None and run.time_switches is None


def test_grpo_with_one_sample_is_refused_as_it_learns_nothing(capsys):
    """New-user trial: --algo grpo --samples 1 was accepted; every GRPO advantage is then 0."""
    assert cli.main(["plan", "--profile", "p40", "--algo", "grpo", "--samples", "1"]) == 2
    assert (
        capsys.readouterr().err
        == "verlfit: error: --samples 1 with --algo grpo: GRPO's advantage is each response's reward minus the mean of"
        " its prompt's group (verl's compute_grpo_outcome_advantage), so in a group of one every advantage is 0 and"
        " the actor learns nothing\n  fix: use --samples 2 or more (verlfit's default is 4), or --algo ppo, whose"
        " critic gives the baseline for one response per prompt\n"
    )
    assert cli.main(["plan", "--profile", "p40", "--algo", "grpo", "--samples", "2"]) == 0


def test_a_given_profile_without_a_gpu_is_no_driver_question():
    """New-user trial: `plan --profile p40` on a machine without a GPU asked "is the NVIDIA driver installed ...?",
    although the profile says which card to plan for."""

    class NoNvml:
        def nvmlInit(self):
            raise RuntimeError("NVML Shared Library Not Found")

    args = cli.build_parser().parse_args(["plan", "--profile", "p40"])
    request, source = request_from_options(plan_options(args), nvml=NoNvml())
    assert request.gpu_memory_bytes == int(22.5 * GIB)
    assert (
        source == "no NVIDIA GPU visible here: planning for the p40 card (--profile p40: 22.5 GiB usable); pass"
        " --gpu-memory or"
        " --emulate to choose"
    )


def test_lengths_past_the_models_context_are_refused_by_plan_and_the_dry_run(capsys):
    """New-user trial: `--max-prompt-length 10000000` was accepted (a plan of 384,778 GiB, or a step of minutes);
    the prompt and response must fit in max_position_embeddings (Qwen2.5's 32768)."""
    message = (
        "verlfit: error: --max-prompt-length 10,000,000 and --max-response-length 256 make sequences of up to"
        " 10,000,256 tokens, more than Qwen/Qwen2.5-0.5B-Instruct (built-in shape)'s context of 32,768"
        " (max_position_embeddings in its config.json): positions past it are untrained\n"
        "  fix: keep the two within 32,768 tokens together, e.g. --max-prompt-length 32512\n"
    )
    assert cli.main(["plan", "--profile", "p40", "--max-prompt-length", "10000000"]) == 2
    assert capsys.readouterr().err == message
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--max-prompt-length", "10000000"]) == 2
    assert capsys.readouterr().err == message
    assert cli.main(["plan", "--profile", "p40", "--max-prompt-length", "1024"]) == 0  # within the context


def test_a_response_length_past_the_context_is_fixed_by_a_shorter_response_not_a_prompt_of_one_token(capsys):
    """New-user trial finding 10: `--max-response-length 40000` was refused with the fix `--max-prompt-length 1`,
    which the data's prompts do not fit in (another refusal). The fix names a response length that fits beside the
    prompt length; where both are past the context, lengths for both."""
    assert cli.main(["plan", "--profile", "p40", "--max-response-length", "40000"]) == 2
    assert capsys.readouterr().err.endswith(
        "  fix: keep the two within 32,768 tokens together, e.g. --max-response-length 32256 or less (beside"
        " --max-prompt-length 512)\n"
    )
    # followed, the fix is no refusal (the plan says whether 32256-token responses fit a P40: they do not, exit 1)
    assert cli.main(["plan", "--profile", "p40", "--max-response-length", "32256"]) == 1
    assert "context" not in capsys.readouterr().err
    assert cli.main(["plan", "--profile", "p40", "--max-prompt-length", "20000", "--max-response-length", "20000"]) == 2
    assert capsys.readouterr().err.endswith(
        "  fix: keep the two within 32,768 tokens together, e.g. --max-response-length 12768 or less (beside"
        " --max-prompt-length 20000), or --max-prompt-length 12768\n"
    )
    assert cli.main(["plan", "--profile", "p40", "--max-prompt-length", "40000", "--max-response-length", "40000"]) == 2
    assert capsys.readouterr().err.endswith(
        "  fix: keep the two within 32,768 tokens together, e.g. --max-prompt-length 16384 and --max-response-length"
        " 16384 or less\n"
    )
