"""The patch switches of a run (patches 0020-0023 and 0027 of patches/verl-0.4.1), read once from an override list
into typed fields: :class:`PatchSwitches`.

The patched verl reads each switch as ``bool(config.get(key, False))``; verlfit sets them in three layers, in the
order of the run's override list (:func:`verlfit.overrides.build_overrides`): the profile's overrides, what verlfit
forces over them for the run (:func:`forced_switches`), then the user's after ``--``. A command parses that list once
at its edge (:func:`run_switches`, for :mod:`verlfit.resolved_run`); the memory and time models read the fields.
Recorded runs (``run.json``'s final override list) are read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from verlfit.errors import VerlfitError

CUDA_GRAPH_KEY = "actor_rollout_ref.rollout.cuda_graph"  # patch 0022
UNWRAP_KEY = "actor_rollout_ref.rollout.unwrap_fsdp"  # patch 0023
TRAINING_ROLES = ("actor", "ref", "critic")  # the roles whose passes patch 0020 trims (one key each)
# patch 0027: the LoRA roles whose adapters are kept out of FSDP (one key each)
OUTSIDE_FSDP_KEYS = {
    "actor": "actor_rollout_ref.model.adapters_outside_fsdp",
    "critic": "critic.model.adapters_outside_fsdp",
}
ADAPTER_ROLES = tuple(OUTSIDE_FSDP_KEYS)
STRATEGY_KEYS = {"actor": "actor_rollout_ref.actor.strategy", "critic": "critic.strategy"}  # verl's fsdp / fsdp2

# patch keys -> the switch they set (patches/verl-0.4.1/0020-0023 headers; verlfit.overrides.KNOWN_ADDED_KEYS):
# a role of TRAINING_ROLES for patch 0020's trims, else a field of PatchSwitches
SWITCH_KEYS = {
    "actor_rollout_ref.actor.trim_padding": "actor",
    "actor_rollout_ref.ref.trim_padding": "ref",
    "critic.trim_padding": "critic",
    "actor_rollout_ref.rollout.trim_padding": "rollout_trim_padding",
    "actor_rollout_ref.rollout.cuda_graph": "cuda_graph",
    "actor_rollout_ref.rollout.unwrap_fsdp": "unwrap_fsdp",
    **{key: f"outside:{role}" for role, key in OUTSIDE_FSDP_KEYS.items()},
}


def override_fix(text: str) -> str:
    """The fix for an override Hydra's grammar refuses: a ``key=value`` whose value holds text Hydra reads only inside
    quotes (non-ASCII letters such as ``café``, or spaces; Hydra's override grammar, "Quoted values") gets the value
    quoted for Hydra and the whole for the shell; anything else (``key=[``, no ``=``) gets the ``section.key=value``
    form."""
    key, equals, value = text.partition("=")
    quoted_already = value[:1] in ("'", '"') and value[-1:] == value[:1]
    if equals and key and not quoted_already and any(not c.isascii() or c.isspace() for c in value):
        quoted = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
        return f'quote the value for Hydra, inside the shell\'s quotes: "{key}={quoted}"'
    return "write overrides as section.key=value, e.g. actor_rollout_ref.actor.optim.lr=1e-6"


@dataclass(frozen=True)
class PatchSwitches:
    """Which of patches 0020-0023 and 0027 a run turns on.

    Attributes:
        trim_padding: the roles (of :data:`TRAINING_ROLES`, in that order) whose training passes patch 0020 trims
            to the micro-batch's window of used columns (``+actor_rollout_ref.actor.trim_padding``,
            ``+actor_rollout_ref.ref.trim_padding``, ``+critic.trim_padding``).
        rollout_trim_padding: patch 0021 (``+actor_rollout_ref.rollout.trim_padding``): each HF rollout micro-batch
            is generated from its prompts cut to the longest one.
        cuda_graph: patch 0022 (``+actor_rollout_ref.rollout.cuda_graph``): HF decode steps replayed as a CUDA graph.
        unwrap_fsdp: patch 0023 (``+actor_rollout_ref.rollout.unwrap_fsdp``): HF generate through the unwrapped
            module, without FSDP's hooks.
        adapters_outside_fsdp: the roles (of :data:`ADAPTER_ROLES`, in that order) whose LoRA adapters patch 0027
            keeps out of FSDP (``+actor_rollout_ref.model.adapters_outside_fsdp``,
            ``+critic.model.adapters_outside_fsdp``).

    Only the HF rollout reads ``rollout_trim_padding``, ``cuda_graph`` and ``unwrap_fsdp``; the fields say what the
    override list sets, whatever the rollout.
    """

    trim_padding: tuple[str, ...] = ()
    rollout_trim_padding: bool = False
    cuda_graph: bool = False
    unwrap_fsdp: bool = False
    adapters_outside_fsdp: tuple[str, ...] = ()

    @classmethod
    def from_overrides(cls, overrides) -> PatchSwitches:
        """The switches a verl override list sets through :data:`SWITCH_KEYS`, in order: a later override of a key
        wins, ``~key`` switches it off. Values as verl reads them (``bool(value)``), parsed by Hydra's own override
        parser.

        Raises:
            VerlfitError: an override Hydra cannot parse (naming it).
        """
        state = {}
        for override in parse_overrides(overrides):
            key = override.key_or_group
            if key in SWITCH_KEYS:
                state[SWITCH_KEYS[key]] = False if override.is_delete() else bool(override.value())
        return cls(
            trim_padding=tuple(role for role in TRAINING_ROLES if state.get(role)),
            rollout_trim_padding=bool(state.get("rollout_trim_padding")),
            cuda_graph=bool(state.get("cuda_graph")),
            unwrap_fsdp=bool(state.get("unwrap_fsdp")),
            adapters_outside_fsdp=tuple(role for role in ADAPTER_ROLES if state.get(f"outside:{role}")),
        )

    def fields_set(self) -> dict:
        """The switches that are on, as keyword arguments of :class:`verlfit.plan.time.TimeInputs` (``{}`` when
        none is): ``trim_padding`` and ``adapters_outside_fsdp`` as their roles, the others as True."""
        fields = {"trim_padding": self.trim_padding} if self.trim_padding else {}
        if self.adapters_outside_fsdp:
            fields["adapters_outside_fsdp"] = self.adapters_outside_fsdp
        for name in ("rollout_trim_padding", "cuda_graph", "unwrap_fsdp"):
            if getattr(self, name):
                fields[name] = True
        return fields

    def trims_prompts(self, rollout: str) -> bool:
        """Whether a pass of the run is cut to its longest prompt (patch 0020 on any role, or patch 0021 with the HF
        ``rollout``): where the data's longest prompt, when measured, bounds the columns the planner counts."""
        return bool(self.trim_padding) or (self.rollout_trim_padding and rollout == "hf")


def speed_switches(overrides) -> dict:
    """:meth:`PatchSwitches.from_overrides` of a recorded override list as a dict of the switches that are on
    (:meth:`PatchSwitches.fields_set`), for the tools that read run records (``benchmarks/``).

    Raises:
        VerlfitError: an override Hydra cannot parse.
    """
    return PatchSwitches.from_overrides(overrides).fields_set()


def unwraps_lora_generation(settings, profile) -> bool:
    """Whether verlfit turns patch 0023's ``unwrap_fsdp`` on: a LoRA actor, the HF rollout, one GPU in all (on
    several GPUs every rank would gather the whole model for generation, untested: the patch's header)."""
    return bool(settings.lora_rank) and profile.rollout == "hf" and settings.gpus * settings.nodes == 1


def forced_switches(settings, profile) -> list[str]:
    """What verlfit sets over the patch switches of ``profile`` (a :class:`verlfit.profiles.Profile`) for a run of
    ``settings`` (:class:`verlfit.run_settings.TrainSettings`), in :func:`verlfit.overrides.build_overrides`' order
    (after the profile's overrides, before the user's after ``--``, so the user's own value still wins):

    * ``+actor_rollout_ref.rollout.cuda_graph=False`` when the profile turns patch 0022 on and the run has several
      GPUs (:data:`verlfit.overrides.CUDA_GRAPH_SEVERAL_GPUS_NOTE`; the patch is for FSDP1 on one GPU). A LoRA actor
      keeps the profile's graphs: greedy tokens as ``generate``'s with the adapter, also after in-place adapter
      updates, for the Qwen2.5, Qwen3 and Llama 3.2 families, fp32 and 16-bit bases, fp32/fp16/bf16 rollouts
      (tests/gpu/test_cuda_graph_lora.py; in 16 bits up to a tie of 16-bit logits); ``-- +...cuda_graph=False``
      turns them off. FSDP parameter
      offload of the actor needs no rule: with the HF rollout verlfit refuses it before
      (``verlfit.plan.unsupported_reason``; ``--`` cannot set it, :data:`verlfit.overrides.MANAGED_KEYS`), and the
      critic's or the reference's offload does not touch the module generated with.
    * ``+actor_rollout_ref.rollout.unwrap_fsdp=True`` for a LoRA actor on one GPU with the HF rollout
      (:func:`unwraps_lora_generation`, :data:`verlfit.overrides.LORA_UNWRAP_NOTE`).
    * ``+actor_rollout_ref.model.adapters_outside_fsdp=True`` (and ``+critic.model.adapters_outside_fsdp=True`` for
      a PPO critic with an adapter) where :func:`adapters_outside_fsdp_roles` says so.
    """
    out = []
    if f"+{CUDA_GRAPH_KEY}=True" in profile.overrides and settings.gpus * settings.nodes > 1:
        out.append(f"+{CUDA_GRAPH_KEY}=False")
    if unwraps_lora_generation(settings, profile):
        out.append(f"+{UNWRAP_KEY}=True")
    out += [f"+{OUTSIDE_FSDP_KEYS[role]}=True" for role in adapters_outside_fsdp_roles(settings, profile)]
    return out


def adapters_outside_fsdp_roles(settings, profile) -> tuple[str, ...]:
    """The LoRA roles whose adapters verlfit keeps out of FSDP (patch 0027): the actor with an adapter, and a PPO
    critic with one, when the run computes in 16 bits (``profile.dtype`` bfloat16 or float16: FSDP's cast of every
    adapter unit at each unshard is what it saves; in fp32 the passes were bound by the GPU, 0.331 s against 0.332 s
    in benchmarks/adapter_pass_probe.py, and gradients differ by cuBLAS' choice of kernel), with the HF rollout (what
    vLLM's LoRA weight sync reads of ignored parameters is untested) on one GPU in all (the patch refuses more: FSDP
    would not all-reduce the adapters' gradients). Measured on one H200 (the probe, 8 layers of Qwen2.5-7B's shape,
    rank 32, micro-batch 4 x 768): a bf16 log-prob forward 0.099 s -> 0.044 s, a training micro-batch 0.291 s ->
    0.158 s, log-probs and adapter gradients bit-identical."""
    if profile.dtype == "float32" or not unwraps_lora_generation(settings, profile):
        return ()
    critic_rank = settings.effective_critic_lora_rank
    roles = ("actor", "critic") if settings.algorithm == "ppo" and critic_rank > 0 else ("actor",)
    # a role the user moved to FSDP2 after -- keeps its adapters as verl wraps them (the patch is for FSDP1)
    return tuple(role for role in roles if _user_value(settings.extra_overrides, STRATEGY_KEYS[role]) != "fsdp2")


def _user_value(overrides, key: str):
    """The value the last of ``overrides`` that sets ``key`` gives it (``~key``: None), else None.

    Raises:
        VerlfitError: an override Hydra cannot parse (naming it).
    """
    value = None
    for override in parse_overrides(overrides):
        if override.key_or_group == key:
            value = None if override.is_delete() else override.value()
    return value


def parse_overrides(overrides) -> list:
    """``overrides`` parsed one by one by Hydra's own override parser.

    Raises:
        VerlfitError: an override Hydra cannot parse, naming it, with :func:`override_fix`'s fix.
    """
    # lazy: only where verl's config is composed
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException  # lazy: only where verl's config is composed

    parser = OverridesParser.create()
    parsed = []
    for text in overrides:
        try:
            (override,) = parser.parse_overrides([text])
        except HydraException as err:
            raise VerlfitError(f"override {text!r} does not parse: {err}", fix=override_fix(text), exit_code=2) from err
        parsed.append(override)
    return parsed


def run_switches(profile, settings, forced: list[str] | None = None) -> PatchSwitches:
    """The patch switches of a run of ``settings`` (:class:`verlfit.run_settings.TrainSettings`: its LoRA rank, GPUs,
    nodes and the user's ``extra_overrides``) with ``profile`` (a :class:`verlfit.profiles.Profile`): the profile's
    overrides, then what verlfit forces over them (``forced``, else :func:`forced_switches`), then the user's, in the
    order :func:`verlfit.overrides.build_overrides` writes them, read once (:meth:`PatchSwitches.from_overrides`).

    Raises:
        VerlfitError: a user override Hydra cannot parse.
    """
    forced = forced_switches(settings, profile) if forced is None else forced
    return PatchSwitches.from_overrides([*profile.overrides, *forced, *settings.extra_overrides])
