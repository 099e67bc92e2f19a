"""The patch switches of a run (patches 0020-0023 of patches/verl-0.4.1), read once from an override list into typed
fields: :class:`PatchSwitches`.

The patched verl reads each switch as ``bool(config.get(key, False))``; verlfit sets them in three layers, in the
order of the run's override list (:func:`verlfit.overrides.build_overrides`): the profile's overrides, what verlfit
forces over them for the run (:func:`verlfit.overrides.forced_switches`), then the user's after ``--``. A command
parses that list once at its edge (:mod:`verlfit.resolved_run`); the memory and time models read the fields.
Recorded runs (``run.json``'s final override list) are read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

from verlfit.errors import VerlfitError

TRAINING_ROLES = ("actor", "ref", "critic")  # the roles whose passes patch 0020 trims (one key each)

# patch keys -> the switch they set (patches/verl-0.4.1/0020-0023 headers; verlfit.overrides.KNOWN_ADDED_KEYS):
# a role of TRAINING_ROLES for patch 0020's trims, else a field of PatchSwitches
SWITCH_KEYS = {
    "actor_rollout_ref.actor.trim_padding": "actor",
    "actor_rollout_ref.ref.trim_padding": "ref",
    "critic.trim_padding": "critic",
    "actor_rollout_ref.rollout.trim_padding": "rollout_trim_padding",
    "actor_rollout_ref.rollout.cuda_graph": "cuda_graph",
    "actor_rollout_ref.rollout.unwrap_fsdp": "unwrap_fsdp",
}


@dataclass(frozen=True)
class PatchSwitches:
    """Which of patches 0020-0023 a run turns on.

    Attributes:
        trim_padding: the roles (of :data:`TRAINING_ROLES`, in that order) whose training passes patch 0020 trims
            to the micro-batch's window of used columns (``+actor_rollout_ref.actor.trim_padding``,
            ``+actor_rollout_ref.ref.trim_padding``, ``+critic.trim_padding``).
        rollout_trim_padding: patch 0021 (``+actor_rollout_ref.rollout.trim_padding``): each HF rollout micro-batch
            is generated from its prompts cut to the longest one.
        cuda_graph: patch 0022 (``+actor_rollout_ref.rollout.cuda_graph``): HF decode steps replayed as a CUDA graph.
        unwrap_fsdp: patch 0023 (``+actor_rollout_ref.rollout.unwrap_fsdp``): HF generate through the unwrapped
            module, without FSDP's hooks.

    Only the HF rollout reads the last three; the fields say what the override list sets, whatever the rollout.
    """

    trim_padding: tuple[str, ...] = ()
    rollout_trim_padding: bool = False
    cuda_graph: bool = False
    unwrap_fsdp: bool = False

    @classmethod
    def from_overrides(cls, overrides) -> PatchSwitches:
        """The switches a verl override list sets through :data:`SWITCH_KEYS`, in order: a later override of a key
        wins, ``~key`` switches it off. Values as verl reads them (``bool(value)``), parsed by Hydra's own override
        parser.

        Raises:
            VerlfitError: an override Hydra cannot parse (naming it).
        """
        from hydra.core.override_parser.overrides_parser import OverridesParser
        from hydra.errors import HydraException

        parser = OverridesParser.create()
        state = {}
        for text in overrides:
            try:
                (override,) = parser.parse_overrides([text])
            except HydraException as err:
                raise VerlfitError(
                    f"override {text!r} does not parse: {err}", fix="write overrides as section.key=value"
                ) from err
            key = override.key_or_group
            if key in SWITCH_KEYS:
                state[SWITCH_KEYS[key]] = False if override.is_delete() else bool(override.value())
        return cls(
            trim_padding=tuple(role for role in TRAINING_ROLES if state.get(role)),
            rollout_trim_padding=bool(state.get("rollout_trim_padding")),
            cuda_graph=bool(state.get("cuda_graph")),
            unwrap_fsdp=bool(state.get("unwrap_fsdp")),
        )

    def fields_set(self) -> dict:
        """The switches that are on, as keyword arguments of :class:`verlfit.plan.time.TimeInputs` (``{}`` when
        none is): ``trim_padding`` as its roles, the others as True."""
        fields = {"trim_padding": self.trim_padding} if self.trim_padding else {}
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
