"""Profiles: validation on load, auto selection, refusal on a GPU that cannot run one, env precedence."""

import pytest

from verlfit.errors import VerlfitError
from verlfit.gpu import GpuInfo
from verlfit.profiles import environment_shell, load_profile, parse_profile, resolve_environment, select_profile

P40 = GpuInfo(
    index=0,
    name="Tesla P40",
    compute_capability=(6, 1),
    total_memory_bytes=25_637_224_448,
    free_memory_bytes=25_000_000_000,
)
A10 = GpuInfo(
    index=0,
    name="NVIDIA A10",
    compute_capability=(8, 6),
    total_memory_bytes=24_146_608_128,
    free_memory_bytes=23_000_000_000,
)


def test_auto_picks_by_compute_capability():
    assert select_profile("auto", P40).name == "p40"
    assert select_profile("auto", A10).name == "a10"


def test_a10_on_p40_is_refused_naming_gpu_capability_and_fix():
    with pytest.raises(VerlfitError) as caught:
        select_profile("a10", P40)
    text = str(caught.value)
    assert "GPU 0 is a Tesla P40 with compute capability 6.1" in text
    assert "use --profile p40 (image verlfit:p40)" in text


def test_p40_profile_values():
    profile = load_profile("p40")
    assert (profile.dtype, profile.attention, profile.rollout) == ("float32", "sdpa", "hf")
    assert profile.environment == {
        "VLLM_DTYPE": "float32",
        "TRITON_MAX_SHARED_MEMORY": "49152",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert "actor_rollout_ref.rollout.name=hf" in profile.overrides


def test_user_environment_wins_an_empty_value_too():
    """Issue 24: `-e PYTORCH_CUDA_ALLOC_CONF=` is how a user switches the profile's allocator settings off; it used
    to be replaced by the default."""
    profile = load_profile("p40")
    resolved = resolve_environment(profile, {"VLLM_DTYPE": "float16", "PYTORCH_CUDA_ALLOC_CONF": "", "OTHER": "x"})
    assert resolved == {"VLLM_DTYPE": "float16", "TRITON_MAX_SHARED_MEMORY": "49152", "PYTORCH_CUDA_ALLOC_CONF": ""}
    with pytest.raises(VerlfitError) as raised:
        resolve_environment(profile, {"VLLM_DTYPE": ""})
    assert raised.value.message == "VLLM_DTYPE='' is not a rollout dtype"


def test_an_empty_user_value_stays_empty_through_the_image_entrypoint():
    environ = image_environment("p40", PYTORCH_CUDA_ALLOC_CONF="")
    assert environ["PYTORCH_CUDA_ALLOC_CONF"] == ""
    assert environ["VERLFIT_PROFILE_DEFAULTS"].split() == ["VLLM_DTYPE=float32", "TRITON_MAX_SHARED_MEMORY=49152"]


def test_environment_shell_lines():
    assert environment_shell(load_profile("a10")).splitlines() == [
        'VERLFIT_PROFILE_DEFAULTS="${VERLFIT_PROFILE_DEFAULTS:-}"',
        '[ -n "${VLLM_DTYPE+set}" ] || VERLFIT_PROFILE_DEFAULTS="${VERLFIT_PROFILE_DEFAULTS} VLLM_DTYPE=bfloat16"',
        (
            '[ -n "${TRITON_MAX_SHARED_MEMORY+set}" ] || VERLFIT_PROFILE_DEFAULTS="${VERLFIT_PROFILE_DEFAULTS}'
            ' TRITON_MAX_SHARED_MEMORY=101376"'
        ),
        (
            '[ -n "${PYTORCH_CUDA_ALLOC_CONF+set}" ] || VERLFIT_PROFILE_DEFAULTS="${VERLFIT_PROFILE_DEFAULTS}'
            ' PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256"'
        ),
        "export VERLFIT_PROFILE_DEFAULTS",
        'export VLLM_DTYPE="${VLLM_DTYPE-bfloat16}"',
        'export TRITON_MAX_SHARED_MEMORY="${TRITON_MAX_SHARED_MEMORY-101376}"',
        'export PYTORCH_CUDA_ALLOC_CONF="${PYTORCH_CUDA_ALLOC_CONF-max_split_size_mb:256}"',
    ]


def image_environment(profile_name, **user):
    """The environment the image's entrypoint leaves: its lines run by bash over the user's variables."""
    import subprocess

    script = environment_shell(load_profile(profile_name)) + "\nenv -0"
    env = {"PATH": "/usr/bin:/bin", **user}
    out = subprocess.run(["bash", "-euc", script], env=env, capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split("\0") if "=" in line)


def test_the_image_profiles_defaults_give_way_to_another_profile_but_user_values_win():
    environ = image_environment("a10", VLLM_DTYPE="float16")
    assert environ["VERLFIT_PROFILE_DEFAULTS"].split() == [
        "TRITON_MAX_SHARED_MEMORY=101376",
        "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256",
    ]
    assert resolve_environment(load_profile("p40"), environ) == {
        "VLLM_DTYPE": "float16",
        "TRITON_MAX_SHARED_MEMORY": "49152",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    }
    assert resolve_environment(load_profile("a10"), environ) == {
        "VLLM_DTYPE": "float16",
        "TRITON_MAX_SHARED_MEMORY": "101376",
        "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:256",
    }
    # an entrypoint run again inside the container keeps the first one's list
    assert image_environment("a10", **environ)["VERLFIT_PROFILE_DEFAULTS"].split() == [
        "TRITON_MAX_SHARED_MEMORY=101376",
        "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256",
    ]
    # a value the user exports after the entrypoint ran (docker compose run shell) is the user's
    later = {**environ, "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"}
    assert resolve_environment(load_profile("p40"), later)["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:64"


def test_invalid_profile_names_the_key():
    data = {
        "name": "x",
        "description": "d",
        "image": "i",
        "compute_capability": {"min": "6.0"},
        "gpu_memory_gib": 1,
        "environment": {"VLLM_DTYPE": "float32", "TRITON_MAX_SHARED_MEMORY": "lots", "PYTORCH_CUDA_ALLOC_CONF": ""},
        "dtype": "float32",
        "attention": "sdpa",
        "rollout": "hf",
        "frozen_base_dtype": "bfloat16",
        "overrides": [],
    }
    with pytest.raises(VerlfitError, match="x.yaml: TRITON_MAX_SHARED_MEMORY must be a number of bytes, got 'lots'"):
        parse_profile(data, "x.yaml")
    data["environment"]["TRITON_MAX_SHARED_MEMORY"] = 1
    data["cpu_offload"] = True
    with pytest.raises(VerlfitError, match=r"unknown keys \['cpu_offload'\]"):
        parse_profile(data, "x.yaml")


@pytest.mark.parametrize(
    "variable, value, fragment",
    [
        (
            "VLLM_DTYPE",
            "int8",
            (
                "VLLM_DTYPE='int8' is not a rollout dtype\n  fix: unset it (the p40 profile uses float32) or set one"
                " of: float32, bfloat16, float16"
            ),
        ),
        ("TRITON_MAX_SHARED_MEMORY", "48k", "TRITON_MAX_SHARED_MEMORY='48k' is not a number of bytes"),
        (
            "PYTORCH_CUDA_ALLOC_CONF",
            "garbage",
            "PYTORCH_CUDA_ALLOC_CONF='garbage' is not a comma-separated list of option:value",
        ),
    ],
)
def test_bad_knob_values_are_refused(variable, value, fragment):
    with pytest.raises(VerlfitError) as caught:
        resolve_environment(load_profile("p40"), {variable: value})
    assert fragment in str(caught.value)
    assert caught.value.exit_code == 2  # a usage error, as VLLM_DTYPE=bfloat16 on a P40 is


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("bfloat16", "VLLM_DTYPE=bfloat16 on the p40 profile's cards (compute capability below 8.0): bf16 needs 8.0"),
        ("fp99", "VLLM_DTYPE='fp99' is not a rollout dtype"),
    ],
)
def test_a_bad_rollout_dtype_is_a_usage_error_whatever_is_wrong_with_it(value, fragment, monkeypatch, capsys):
    """new-user trial: VLLM_DTYPE=bfloat16 on the p40 profile exited 2 and VLLM_DTYPE=fp99 exited 1, for the same
    kind of error (a bad environment value)."""
    from verlfit import cli

    monkeypatch.setenv("VLLM_DTYPE", value)
    monkeypatch.delenv("VERLFIT_PROFILE_DEFAULTS", raising=False)
    assert cli.main(["train", "--profile", "p40", "--plan", "off", "--dry-run"]) == 2
    assert fragment in capsys.readouterr().err


def test_customize_a10_to_hf_rollout_and_sdpa_rewrites_exactly_the_overrides_that_follow():
    from verlfit.profiles import customize

    a10 = load_profile("a10")
    custom = customize(a10, rollout="hf", attention="sdpa")
    assert (custom.rollout, custom.attention, custom.vllm_gpu_memory_utilization) == ("hf", "sdpa", None)
    assert custom.description.endswith("(with rollout hf, attention sdpa)")
    assert list(custom.overrides) == [
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "+critic.model.fsdp_config.mixed_precision.param_dtype=bf16",
        "+actor_rollout_ref.actor.autocast_dtype=bf16",
        "+actor_rollout_ref.ref.autocast_dtype=bf16",
        "+critic.autocast_dtype=bf16",
        "+actor_rollout_ref.model.attn_implementation=sdpa",
        "+critic.model.attn_implementation=sdpa",
        "actor_rollout_ref.model.use_remove_padding=False",
        "critic.model.use_remove_padding=False",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        # the profile's fallbacks: the HF rollout's trimming and CUDA-graph decoding, then the padded path's
        # (patches 0021, 0022, 0020)
        "+actor_rollout_ref.rollout.trim_padding=True",
        "+actor_rollout_ref.rollout.cuda_graph=True",
        "+actor_rollout_ref.actor.trim_padding=True",
        "+actor_rollout_ref.ref.trim_padding=True",
        "+critic.trim_padding=True",
    ]
    assert (
        a10.rollout == "vllm" and "actor_rollout_ref.rollout.enforce_eager=False" in a10.overrides
    )  # the original is untouched


def test_customize_with_the_profiles_own_choices_returns_it_unchanged():
    from verlfit.profiles import customize

    p40 = load_profile("p40")
    assert customize(p40) is p40
    assert customize(p40, rollout="hf", attention="sdpa") is p40
    eager = customize(p40, attention="eager")
    assert [o for o in eager.overrides if "attn_implementation" in o or "remove_padding" in o] == [
        "+actor_rollout_ref.model.attn_implementation=eager",
        "+critic.model.attn_implementation=eager",
        "actor_rollout_ref.model.use_remove_padding=False",
        "critic.model.use_remove_padding=False",
    ]


@pytest.mark.parametrize(
    "profile, changes, fragment",
    [
        ("p40", {"rollout": "vllm"}, "--rollout vllm with the p40 profile: vLLM needs compute capability 7.0"),
        (
            "p40",
            {"attention": "flash_attention_2"},
            "FlashAttention-2 needs compute capability 8.0 and fp16/bf16 (the profile computes in float32)",
        ),
        (
            "t4",
            {"rollout": "vllm"},
            "--rollout vllm with the t4 profile: it runs in the verlfit:p40 image, which has no vLLM",
        ),
        (
            "v100",
            {"attention": "flash_attention_2"},
            "FlashAttention-2 needs compute capability 8.0 and fp16/bf16 (the profile computes in float16)",
        ),
        ("a10", {"rollout": "sglang"}, "rollout 'sglang' is not one of hf, vllm"),
        ("a10", {"attention": "flash"}, "attention 'flash' is not one of sdpa, eager, flash_attention_2"),
    ],
)
def test_customize_refuses_what_the_profiles_cards_cannot_run(profile, changes, fragment):
    from verlfit.profiles import customize

    with pytest.raises(VerlfitError) as caught:
        customize(load_profile(profile), **changes)
    assert fragment in str(caught.value)


@pytest.mark.parametrize(
    "text, well_formed",
    [
        ("expandable_segments:True", True),
        ("expandable_segments:True,max_split_size_mb:256", True),
        ("roundup_power2_divisions:[256:1,512:2],max_split_size_mb:128", True),  # commas inside a bracketed list
        (" backend : cudaMallocAsync ", True),
        ("garbage", False),
        ("max_split_size_mb:", False),
        ("max_split_size_mb:256,", False),
        ("expandable_segments=True", False),
    ],
)
def test_allocator_config_syntax(text, well_formed):
    from verlfit.profiles import allocator_config_is_well_formed

    assert allocator_config_is_well_formed(text) is well_formed


def test_a_malformed_allocator_config_is_refused_before_launch():
    from verlfit.profiles import load_profile, resolve_environment

    with pytest.raises(VerlfitError) as error:
        resolve_environment(load_profile("p40"), {"PYTORCH_CUDA_ALLOC_CONF": "garbage"})
    assert error.value.message == "PYTORCH_CUDA_ALLOC_CONF='garbage' is not a comma-separated list of option:value"
    assert (
        error.value.fix == "unset it (the p40 profile uses expandable_segments:True) or write e.g."
        " expandable_segments:True,max_split_size_mb:256"
    )


T4 = GpuInfo(
    index=0,
    name="Tesla T4",
    compute_capability=(7, 5),
    total_memory_bytes=16_106_127_360,
    free_memory_bytes=15_000_000_000,
)
V100 = GpuInfo(
    index=0,
    name="Tesla V100-SXM2-32GB",
    compute_capability=(7, 0),
    total_memory_bytes=34_089_730_048,
    free_memory_bytes=33_000_000_000,
)
P100 = GpuInfo(
    index=0,
    name="Tesla P100-PCIE-16GB",
    compute_capability=(6, 0),
    total_memory_bytes=17_071_734_784,
    free_memory_bytes=16_000_000_000,
)
SEVEN_X = (
    "; this card could also run fp16 on its tensor cores (the {} profile, which auto picks), Triton (torch.compile,"
    " Triton kernels) and vLLM (both need 7.0), which the p40 profile leaves off (its TRITON_MAX_SHARED_MEMORY=49152,"
    " under the 81920 B verlfit asks for Triton, keeps torch.compile, liger and fused kernels off; HF rollout)"
)
FP16_NOTE = (
    "fp16 tensor cores but no bf16 and no FlashAttention-2 (both need 8.0), so fp16 compute with fp32 master weights"
    " and dynamic loss scaling (an overflowing update is skipped and shows in the progress line); --profile p40 runs it"
    " in fp32"
)


@pytest.mark.parametrize(
    "gpu, note",
    [
        (
            T4,
            "profile p40 for Tesla T4 (compute capability 7.5): below 8.0 there is no bf16 and no FlashAttention-2,"
            " which the a10 profile is built on" + SEVEN_X.format("t4"),
        ),
        (
            V100,
            "profile p40 for Tesla V100-SXM2-32GB (compute capability 7.0): below 8.0 there is no bf16 and no"
            " FlashAttention-2, which the a10 profile is built on" + SEVEN_X.format("v100"),
        ),
        (
            P100,
            (
                "profile p40 for Tesla P100-PCIE-16GB (compute capability 6.0): below 8.0 there is no bf16 and no"
                " FlashAttention-2, which the a10 profile is built on; it has the P40's other limits too (Triton and"
                " vLLM need 7.0), so the profile leaves nothing off"
            ),
        ),
        (P40, None),
    ],
)
def test_cards_the_p40_profile_was_not_made_for_are_told_why_and_what_is_left_off(gpu, note):
    from verlfit.profiles import profile_choice_note

    assert select_profile("p40", gpu).name == "p40"  # --profile p40 stays possible on a 7.x card
    assert profile_choice_note("p40", gpu) == note
    assert profile_choice_note("a10", A10) is None


def test_train_says_at_launch_which_profile_a_7x_card_got_and_why(capsys):
    from verlfit import cli
    from verlfit.train.describe import describe
    from verlfit.commands.train import prepare_launch

    args = cli.build_parser().parse_args(["train", "--profile", "p40", "--plan", "off", "--dry-run"])
    plan = prepare_launch(args, environ={}, gpu=T4)
    assert plan.profile_name == "p40"
    expected = (
        "profile p40 for Tesla T4 (compute capability 7.5): below 8.0 there is no bf16 and no FlashAttention-2, which"
        " the a10 profile is built on" + SEVEN_X.format("t4")
    )
    # and the planner's warning: the p40 profile's default sizes, as given (--plan off), do not fit a T4's 15 GiB
    assert [note for note in plan.notes if not note.startswith("plan: WARN --plan off: ")] == [expected]
    assert f"note: {expected}" in " ".join(describe(plan).split())  # the dry run wraps its notes
    assert (
        "actor_rollout_ref.actor.use_torch_compile=False" in plan.overrides
    )  # what the note says the profile leaves off
    assert (
        prepare_launch(
            cli.build_parser().parse_args(["train", "--plan", "off", "--dry-run"]), environ={}, gpu=P40
        ).notes
        == []
    )


def test_a10_fallbacks_apply_one_at_a_time_and_p40_carries_the_speed_keys_itself():
    from verlfit.profiles import customize

    trims = [
        "+actor_rollout_ref.actor.trim_padding=True",
        "+actor_rollout_ref.ref.trim_padding=True",
        "+critic.trim_padding=True",
        "+actor_rollout_ref.rollout.trim_padding=True",
    ]
    a10 = load_profile("a10")
    assert not any("trim_padding" in o or "cuda_graph" in o for o in a10.overrides)  # vLLM and packed FA2 sequences
    graph = "+actor_rollout_ref.rollout.cuda_graph=True"
    assert customize(a10, rollout="hf").overrides[-2:] == ("+actor_rollout_ref.rollout.trim_padding=True", graph)
    assert customize(a10, attention="sdpa").overrides[-3:] == tuple(trims[:3])
    assert list(load_profile("p40").overrides[-5:]) == [*trims, graph]
    assert customize(load_profile("p40"), attention="eager").overrides[-5:] == (
        *trims,
        graph,
    )  # no fallbacks to add: already there
    # CUDA-graph decoding (patch 0022): on in the p40 profile and in the a10's HF fallback (measured on the 7B GRPO LoRA
    # A10 target, a10.yaml); never on the a10's own vLLM path, which has its own graphs
    assert [o for o in load_profile("p40").overrides if "cuda_graph" in o] == [graph]
    assert [o for o in customize(a10, rollout="hf", attention="sdpa").overrides if "cuda_graph" in o] == [graph]
    assert not any("cuda_graph" in o for o in customize(a10, attention="sdpa").overrides)


def test_fallbacks_must_be_lists_of_overrides():
    from importlib import resources

    import yaml

    data = yaml.safe_load(resources.files("verlfit.profiles").joinpath("a10.yaml").read_text())
    with pytest.raises(
        VerlfitError,
        match=r"fallbacks must be a mapping with the keys \['hf_rollout', 'padded_training'\], got \['vllm_rollout'\]",
    ):
        parse_profile({**data, "fallbacks": {"vllm_rollout": []}}, "x.yaml")
    with pytest.raises(VerlfitError, match="fallbacks.hf_rollout must be a list of 'key=value' strings"):
        parse_profile({**data, "fallbacks": {"hf_rollout": ["cuda_graph"]}}, "x.yaml")


def test_profiles_command_shows_the_a10_fallbacks(capsys):
    from verlfit import cli

    assert cli.main(["profiles", "a10"]) == 0
    out = capsys.readouterr().out
    assert (
        "  with --rollout hf also:\n    +actor_rollout_ref.rollout.trim_padding=True\n"
        "    +actor_rollout_ref.rollout.cuda_graph=True\n" in out
    )
    assert (
        "  with --attention sdpa|eager also:\n    +actor_rollout_ref.actor.trim_padding=True\n   "
        " +actor_rollout_ref.ref.trim_padding=True\n    +critic.trim_padding=True\n" in out
    )
    assert cli.main(["profiles", "p40"]) == 0
    assert "also:" not in capsys.readouterr().out


# --- compute capability 7.x: the fp16 profiles (issue 27) -----------------------------------------------------------
RTX2080TI = GpuInfo(
    index=0,
    name="NVIDIA GeForce RTX 2080 Ti",
    compute_capability=(7, 5),
    total_memory_bytes=11_546_394_624,
    free_memory_bytes=11_000_000_000,
)
XAVIER = GpuInfo(
    index=0,
    name="Xavier",
    compute_capability=(7, 2),
    total_memory_bytes=16_000_000_000,
    free_memory_bytes=15_000_000_000,
)
FP16_KEYS = [
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype=fp32",
    "+actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype=fp32",
    "+actor_rollout_ref.ref.fsdp_config.model_dtype=fp16",
    "+actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype=fp16",
    "+critic.model.fsdp_config.mixed_precision.param_dtype=fp16",
    "+critic.model.fsdp_config.mixed_precision.reduce_dtype=fp32",
    "+critic.model.fsdp_config.mixed_precision.buffer_dtype=fp32",
    "+actor_rollout_ref.actor.autocast_dtype=fp16",
    "+actor_rollout_ref.ref.autocast_dtype=fp16",
    "+critic.autocast_dtype=fp16",
    "+actor_rollout_ref.actor.loss_scaling.enabled=True",
    "+critic.loss_scaling.enabled=True",
    "+actor_rollout_ref.model.attn_implementation=sdpa",
    "+critic.model.attn_implementation=sdpa",
    "actor_rollout_ref.model.use_remove_padding=False",
    "critic.model.use_remove_padding=False",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "actor_rollout_ref.rollout.do_sample=True",
    "+actor_rollout_ref.actor.trim_padding=True",
    "+actor_rollout_ref.ref.trim_padding=True",
    "+critic.trim_padding=True",
    "+actor_rollout_ref.rollout.trim_padding=True",
    "+actor_rollout_ref.rollout.cuda_graph=True",
]


@pytest.mark.parametrize(
    "gpu, name",
    [(T4, "t4"), (RTX2080TI, "t4"), (V100, "v100"), (XAVIER, "v100"), (P100, "p40"), (P40, "p40"), (A10, "a10")],
)
def test_auto_gives_7x_cards_the_fp16_profiles(gpu, name):
    assert select_profile("auto", gpu).name == name


def test_the_fp16_profiles_values_and_their_one_difference():
    t4, v100 = load_profile("t4"), load_profile("v100")
    for profile in (t4, v100):
        assert (profile.dtype, profile.attention, profile.rollout, profile.image, profile.min_compute_capability) == (
            "float16",
            "sdpa",
            "hf",
            "verlfit:p40",
            (7, 0),
        )
        assert list(profile.overrides) == FP16_KEYS
        assert profile.environment["VLLM_DTYPE"] == "float16"
    # the reference cards: usable memory (the --emulate cap) and shared memory per block (Triton's gate)
    assert (t4.gpu_memory_gib, t4.environment["TRITON_MAX_SHARED_MEMORY"]) == (14.0, "65536")
    assert (v100.gpu_memory_gib, v100.environment["TRITON_MAX_SHARED_MEMORY"]) == (30.5, "98304")


def test_triton_backed_features_stay_off_on_the_t4_and_on_for_the_v100():
    from verlfit.overrides import triton_allowed

    assert triton_allowed(load_profile("t4").environment, (7, 5)) is False
    assert triton_allowed(load_profile("v100").environment, (7, 0)) is True


@pytest.mark.parametrize(
    "profile, gpu, note",
    [
        ("t4", T4, "profile t4 for Tesla T4 (compute capability 7.5): " + FP16_NOTE),
        ("v100", V100, "profile v100 for Tesla V100-SXM2-32GB (compute capability 7.0): " + FP16_NOTE),
        (
            "t4",
            V100,
            "profile t4 for Tesla V100-SXM2-32GB (compute capability 7.0): "
            + FP16_NOTE
            + "; the t4 profile is made for the T4 (16 GB) (compute capability 7.5): same code paths, its shared memory"
            " per block decides Triton",
        ),
        ("t4", A10, None),
    ],
)
def test_the_fp16_profiles_say_why_fp16(profile, gpu, note):
    from verlfit.profiles import profile_choice_note

    assert profile_choice_note(profile, gpu) == note


def test_the_fp16_profiles_are_refused_on_a_pascal_card_naming_the_fix():
    with pytest.raises(VerlfitError) as caught:
        select_profile("t4", P40)
    assert (
        caught.value.message
        == "profile 't4' needs compute capability >= 7.0 (fp16 tensor cores), but GPU 0 is a Tesla P40 with compute"
        " capability 6.1"
    )
    assert caught.value.fix == "use --profile p40 (image verlfit:p40)"


def test_auto_on_a_t4_says_why_at_launch_and_the_dry_run_prints_the_fp16_and_loss_scaling_keys():
    from verlfit import cli
    from verlfit.commands.train import prepare_launch
    from verlfit.train.describe import describe

    plan = prepare_launch(cli.build_parser().parse_args(["train", "--plan", "off", "--dry-run"]), environ={}, gpu=T4)
    assert plan.profile_name == "t4"
    # and the planner's warning (issue 28): the default sizes, given as they are (--plan off), do not fit a T4's memory
    assert [note for note in plan.notes if not note.startswith("plan: WARN --plan off: ")] == [
        "profile t4 for Tesla T4 (compute capability 7.5): " + FP16_NOTE
    ]
    assert sum(note.startswith("plan: WARN --plan off: ") for note in plan.notes) == 1
    text = describe(plan).splitlines()
    for key in (
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=fp16",
        "+actor_rollout_ref.actor.autocast_dtype=fp16",
        "+actor_rollout_ref.actor.loss_scaling.enabled=True",
        "+critic.loss_scaling.enabled=True",
    ):
        assert key in plan.overrides
        assert any(key in line for line in text), key
    assert "actor_rollout_ref.actor.use_torch_compile=False" in plan.overrides  # 64 KiB shared memory: no Triton
    v100 = prepare_launch(cli.build_parser().parse_args(["train", "--plan", "off", "--dry-run"]), environ={}, gpu=V100)
    assert v100.profile_name == "v100" and "actor_rollout_ref.actor.use_torch_compile=False" not in v100.overrides


def test_an_allocator_option_torch_does_not_know_is_refused_before_the_run():
    """New-user trial: PYTORCH_CUDA_ALLOC_CONF=garbage:yes was accepted (the other two managed variables are checked);
    torch stops on it with "Unrecognized CachingAllocator option" only when a worker first touches CUDA."""
    with pytest.raises(VerlfitError) as caught:
        resolve_environment(load_profile("p40"), {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,garbage:yes"})
    assert (caught.value.message, caught.value.fix, caught.value.exit_code) == (
        (
            "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True,garbage:yes' names 'garbage', not an option of torch's"
            ' CUDA allocator: torch stops with "Unrecognized CachingAllocator option" when a worker first touches'
            " CUDA, minutes into the run"
        ),
        (
            "unset it (the p40 profile uses 'expandable_segments:True') or use torch's options: max_split_size_mb,"
            " max_non_split_rounding_mb, garbage_collection_threshold, roundup_power2_divisions, backend,"
            " expandable_segments, release_lock_on_cudamalloc, pinned_use_cuda_host_register,"
            " pinned_num_register_threads, pinned_use_background_threads"
        ),
        2,
    )
    known = "max_split_size_mb:256,roundup_power2_divisions:[256:1,512:2],garbage_collection_threshold:0.6"
    assert (
        resolve_environment(load_profile("p40"), {"PYTORCH_CUDA_ALLOC_CONF": known})["PYTORCH_CUDA_ALLOC_CONF"] == known
    )


@pytest.mark.parametrize(
    "conf, message, fix",
    [
        (
            "expandable_segments:maybe",
            "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:maybe' sets expandable_segments to 'maybe': torch 2.6 takes"
            " True or False (capitalised) there, and stops on any other value when a worker first touches CUDA, minutes"
            " into the run",
            "unset it (the p40 profile uses 'expandable_segments:True') or write expandable_segments:True",
        ),
        (
            "max_split_size_mb:256,garbage_collection_threshold:7",
            "PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:256,garbage_collection_threshold:7' sets"
            " garbage_collection_threshold to '7': torch 2.6 takes a number between 0 and 1, both excluded (e.g. 0.6)"
            " there, and stops on any other value when a worker first touches CUDA, minutes into the run",
            "unset it (the p40 profile uses 'expandable_segments:True') or write garbage_collection_threshold:0.6",
        ),
    ],
)
def test_an_allocator_value_torch_refuses_is_refused_before_the_run(conf, message, fix):
    """New-user trial (finding 9): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:maybe and garbage_collection_threshold:7
    passed the dry run and the doctor: only the option names were checked, and torch refuses these values."""
    with pytest.raises(VerlfitError) as caught:
        resolve_environment(load_profile("p40"), {"PYTORCH_CUDA_ALLOC_CONF": conf})
    assert (caught.value.message, caught.value.fix, caught.value.exit_code) == (message, fix, 2)


# Each value as torch 2.6.0's own parser took it (CUDAAllocatorConfig::parseArgs of the torch-2.6.0 wheel's
# libc10_cuda.so, run on each string): True where it parsed, False where it stopped
TORCH_2_6_ANSWERS = {
    "expandable_segments:True": True,
    "expandable_segments: True": True,
    "expandable_segments:true": False,
    "garbage_collection_threshold:0.6": True,
    "garbage_collection_threshold:1": False,
    "garbage_collection_threshold:0": False,
    "garbage_collection_threshold:nan": False,
    "garbage_collection_threshold:abc": False,
    "max_split_size_mb:20": False,
    "max_split_size_mb:21": True,
    "max_split_size_mb:256.5": True,
    "max_split_size_mb:abc": False,
    "max_split_size_mb:1e3": False,
    "max_non_split_rounding_mb:20": False,
    "max_non_split_rounding_mb:64": True,
    "roundup_power2_divisions:4": True,
    "roundup_power2_divisions:3": False,
    "roundup_power2_divisions:0": False,
    "roundup_power2_divisions:[256:1,512:2,>:8]": True,
    "roundup_power2_divisions:[256:0]": True,
    "roundup_power2_divisions:[256:3]": False,
    "roundup_power2_divisions:[300:4]": False,
    "backend:native": True,
    "backend:foo": False,
    "release_lock_on_cudamalloc:True": True,
    "release_lock_on_cudamalloc:yes": False,
    "pinned_use_cuda_host_register:False": True,
    "pinned_use_cuda_host_register:1": False,
    "pinned_num_register_threads:8": True,
    "pinned_num_register_threads:3": False,
    "pinned_num_register_threads:256": False,
    "pinned_use_background_threads:True": True,
    "pinned_use_background_threads:x": False,
}


@pytest.mark.parametrize("conf, torch_takes", TORCH_2_6_ANSWERS.items())
def test_allocator_values_are_judged_as_torch_2_6_judges_them(conf, torch_takes):
    if torch_takes:
        assert resolve_environment(load_profile("p40"), {"PYTORCH_CUDA_ALLOC_CONF": conf})["PYTORCH_CUDA_ALLOC_CONF"]
    else:
        with pytest.raises(VerlfitError, match=r"^PYTORCH_CUDA_ALLOC_CONF=.* torch 2\.6 takes "):
            resolve_environment(load_profile("p40"), {"PYTORCH_CUDA_ALLOC_CONF": conf})
