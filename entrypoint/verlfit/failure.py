"""Why a verl run stopped: read the end of its log and say it in the user's terms.

verl runs its workers as Ray actors; when one fails, the driver prints Ray's wrapped traceback
(``ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor()``)
and exits non-zero. The user needs three facts from it: what went wrong, in which phase of the
PPO/GRPO step, and what to change. :func:`diagnose` finds them in the log's lines; the launcher
(``verlfit train``) prints its message and records it in ``run.json``.

How phases are named: verl colocates its roles (actor/rollout, critic, reference) in one Ray
actor class, ``WorkerDict``, whose methods are ``<role>_<method>``
(``verl/single_controller/ray/base.py:684``, ``method_name_with_prefix = key + "_" + method_name``)
and the trainer calls them once per phase (``verl/trainer/ppo/ray_trainer.py:983-1130``).
:data:`WORKER_METHOD_PHASES` maps those names to the planner's phases
(:data:`verlfit.plan.PHASES`).

Where the method's name comes from: Ray names the task in its wrapped error (``ray::WorkerDict.<method>()``) when a
worker's method raises. When the worker process itself dies (SIGKILL, the kernel's OOM killer), Ray's
``ActorDiedError`` names only the class (``create_colocated_worker_cls.<locals>.WorkerDict``); the method is then
read from the driver's traceback above it, the trainer's call on the role's worker group
(``self.actor_rollout_wg.generate_sequences(gen_batch)``, ``ray_trainer.py:983``), whose WorkerDict method is the
group's role prefix + the call (:data:`WORKER_GROUP_ROLES`; recorded:
``tests/data/verl_logs/ray_worker_killed_h200.log``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verlfit.plan.fit import auto_fit
from verlfit.plan.memory import format_gib, predict
from verlfit.plan.time import checkpoint_disk_bytes

# Ray method of verl's colocated WorkerDict -> the planner's phase (verlfit.plan.PHASES) or "checkpoint"
WORKER_METHOD_PHASES: dict[str, str] = {
    "actor_rollout_generate_sequences": "rollout",
    "actor_rollout_compute_log_prob": "old_log_prob",
    "actor_rollout_compute_ref_log_prob": "ref_log_prob",
    "ref_compute_ref_log_prob": "ref_log_prob",
    "critic_compute_values": "values",
    "critic_update_critic": "critic_update",
    "actor_rollout_update_actor": "actor_update",
    "actor_rollout_save_checkpoint": "checkpoint",
    "critic_save_checkpoint": "checkpoint",
    "actor_rollout_init_model": "model_init",
    "critic_init_model": "model_init",
    "ref_init_model": "model_init",
}

# RayPPOTrainer's worker-group attribute -> the WorkerDict role prefix it was spawned with (ray_trainer.py:780-792)
WORKER_GROUP_ROLES: dict[str, str] = {
    "actor_rollout_wg": "actor_rollout",
    "critic_wg": "critic",
    "ref_policy_wg": "ref",
    "rm_wg": "rm",
}

# verl's role -> the words a message uses for it (the role prefixes of verl/trainer/ppo/ray_trainer.py:736-757)
ROLE_WORDS: dict[str, str] = {
    "actor_rollout": "the actor/rollout worker",
    "critic": "the critic worker",
    "ref": "the reference worker",
    "rm": "the reward-model worker",
}

_METHOD = re.compile(r"ray::WorkerDict\.(\w+)")
_GROUP_CALL = re.compile(r"\bself\.(" + "|".join(WORKER_GROUP_ROLES) + r")\.(\w+)\(")
_OOM = re.compile(r"(?:torch\.)?(?:cuda\.)?OutOfMemoryError|CUDA out of memory")
_OOM_DETAIL = re.compile(
    r"Tried to allocate ([\d.]+ [KMG]iB)\. GPU \d+ has a total capacity of ([\d.]+ [KMG]iB) "
    r"of which ([\d.]+ [KMG]iB) is free"
)
# under a per-process limit (torch.cuda.set_per_process_memory_fraction: patch 0006, --gpu-memory-limit, --emulate)
# torch's line adds "X GiB allowed; Of the allocated memory Y GiB is allocated by PyTorch"
_OOM_LIMIT = re.compile(r"([\d.]+ [KMG]iB) allowed; Of the allocated memory ([\d.]+ [KMG]iB) is allocated by PyTorch")
_DISK_FULL = re.compile(r"\[Errno 28\]|No space left on device|ENOSPC")
_ACTOR_DIED = re.compile(r"ActorDiedError|The actor died unexpectedly|Worker exit type: SYSTEM_ERROR|RayActorError")
# patch 0024's stop (verl/utils/loss_scaling.py LossScaler.step): every update overflowed in fp16 N times in a row
_FP16_OVERFLOW = re.compile(
    r"verlfit loss scaling: the last (\d+) (actor|critic) updates all overflowed in fp16 "
    r"\(inf/nan gradients at every loss scale from (\S+) down to (\S+)\)"
)
_OBJECT_STORE = re.compile(r"ObjectStoreFullError|object store is full|/dev/shm .*(?:too small|only has)")


@dataclass(frozen=True)
class Failure:
    """What stopped a run.

    Attributes:
        kind: ``"out_of_memory"``, ``"disk_full"``, ``"worker_died"``, ``"shared_memory"`` or ``"fp16_overflow"``
            (patch 0024's dynamic loss scaling stopped the run: facts ``updates``, ``role``, ``from_scale``,
            ``to_scale``).
        phase: the planner's phase name (``"actor_update"``, ...), ``"checkpoint"``, ``"model_init"``
            or None when the log does not say.
        worker_method: verl's Ray method that was running (``"actor_rollout_update_actor"``) or None.
        detail: the log line the diagnosis rests on (stripped).
        facts: figures read from the log (for OOM: ``tried``, ``capacity``, ``free`` as written by torch, and under a
            per-process limit ``allowed`` and ``allocated``).
    """

    kind: str
    phase: str | None
    worker_method: str | None
    detail: str
    facts: dict = field(default_factory=dict)

    @property
    def role(self) -> str | None:
        """verl's role whose method was running: ``actor_rollout``, ``critic``, ``ref`` or ``rm``."""
        if not self.worker_method:
            return None
        for role in ROLE_WORDS:
            if self.worker_method.startswith(role + "_"):
                return role
        return None


def _search_around(lines: list[str], before: int, find) -> str | None:
    """``find(line)``'s first answer at or before line ``before``, nearest first, else the first after it."""
    for line in (*reversed(lines[: before + 1]), *lines[before + 1 :]):
        found = find(line)
        if found:
            return found
    return None


def _group_call(line: str) -> str | None:
    match = _GROUP_CALL.search(line)
    return f"{WORKER_GROUP_ROLES[match.group(1)]}_{match.group(2)}" if match else None


def _last_method(lines: list[str], before: int) -> str | None:
    """The WorkerDict method that was running: the last ``ray::WorkerDict.<method>`` named at or before line
    ``before`` (or anywhere after it, as Ray prints the task name both above and below the wrapped traceback);
    when Ray names none (a killed worker), the trainer's worker-group call in the driver's traceback, nearest
    the same way (module docstring)."""
    return _search_around(
        lines, before, lambda line: (match := _METHOD.search(line)) and match.group(1)
    ) or _search_around(lines, before, _group_call)


def diagnose(lines: list[str]) -> Failure | None:
    """Classify a failed run from its log lines (oldest first); None when nothing is recognised.

    The first match wins in this order: CUDA out-of-memory, a full disk, Ray's shared-memory object
    store, fp16 loss scaling's stop (patch 0024), a dead worker (a worker killed by a signal or by the kernel's OOM
    killer surfaces as ``ActorDiedError`` in the driver). A dead worker is checked last because Ray also reports the
    actors of a run that failed for one of the other reasons as dead.
    """
    for kind, pattern in (
        ("out_of_memory", _OOM),
        ("disk_full", _DISK_FULL),
        ("shared_memory", _OBJECT_STORE),
        ("fp16_overflow", _FP16_OVERFLOW),
        ("worker_died", _ACTOR_DIED),
    ):
        for index, line in enumerate(lines):
            if pattern.search(line):
                method = _last_method(lines, index)
                facts, detail = {}, line.strip()
                if kind == "out_of_memory":
                    for later in lines[index:]:
                        figures = _OOM_DETAIL.search(later)
                        if figures:  # torch's own line says more than Ray's wrapper around it
                            facts = {"tried": figures.group(1), "capacity": figures.group(2), "free": figures.group(3)}
                            limit = _OOM_LIMIT.search(later)
                            if limit:
                                facts.update(allowed=limit.group(1), allocated=limit.group(2))
                            detail = later.strip()
                            break
                if kind == "fp16_overflow":
                    found = pattern.search(line)
                    facts = {
                        "updates": int(found.group(1)),
                        "role": found.group(2),
                        "from_scale": found.group(3),
                        "to_scale": found.group(4),
                    }
                return Failure(
                    kind=kind,
                    phase=WORKER_METHOD_PHASES.get(method) if method else None,
                    worker_method=method,
                    detail=detail,
                    facts=facts,
                )
    return None


def disk_full_seen_by_verlfit(lines: list[str], detail: str) -> Failure:
    """A full disk that verlfit's own write into the run directory met (``ENOSPC`` on ``train.log``), for a log in
    which :func:`diagnose` found nothing more specific: the phase is that of the last WorkerDict method the lines
    name (None when they name none); ``detail`` says what verlfit could not write."""
    method = _last_method(lines, len(lines) - 1)
    return Failure(
        kind="disk_full",
        phase=WORKER_METHOD_PHASES.get(method) if method else None,
        worker_method=method,
        detail=detail,
    )


PHASE_WORDS = {
    "rollout": "the rollout (HF generate)",
    "old_log_prob": "the old log-prob pass",
    "ref_log_prob": "the reference log-prob pass",
    "values": "the critic's value pass",
    "critic_update": "the critic update",
    "actor_update": "the actor update",
    "checkpoint": "a checkpoint save",
    "model_init": "model loading",
}


# PlanRequest field -> (what auto-fit changed, how its value is written)
FIT_CHOICES: dict[str, tuple[str, object]] = {
    "actor_micro_batch_size": ("actor micro-batch", str),
    "critic_micro_batch_size": ("critic micro-batch", str),
    "log_prob_micro_batch_size": ("log-prob micro-batch", str),
    "gradient_checkpointing": ("gradient checkpointing", lambda on: "on" if on else "off"),
    "actor_optimizer_offload": ("actor optimizer offload", lambda on: "on" if on else "off"),
    "actor_param_offload": ("actor parameter offload", lambda on: "on" if on else "off"),
    "critic_optimizer_offload": ("critic optimizer offload", lambda on: "on" if on else "off"),
    "critic_param_offload": ("critic parameter offload", lambda on: "on" if on else "off"),
}


def explain(
    failure: Failure,
    request=None,
    run_dir: str = "RUN_DIR",
    checkpoint_step: int | None = None,
    disk_free_bytes: int | None = None,
    disk_path: str | None = None,
) -> tuple[str, str]:
    """Return ``(message, fix)`` for ``failure`` in the user's terms.

    Args:
        request: the run's :class:`verlfit.plan.PlanRequest` (for an out-of-memory step: the planner's prediction
            for the phase and the micro-batch auto-fit would pick; for a full disk: what one checkpoint needs).
        checkpoint_step: the newest complete checkpoint (``latest_checkpointed_iteration.txt``), None if none.
        disk_free_bytes, disk_path: free space on the checkpoint folder's file system, and the folder.
    """
    where = PHASE_WORDS.get(failure.phase, "an unknown phase") + (
        f" (verl's {failure.worker_method})" if failure.worker_method else ""
    )
    resume = f"verlfit train --resume {run_dir}" + (
        f" continues from step {checkpoint_step}"
        if checkpoint_step
        else " (after the first checkpoint; before it, start again)"
    )
    if failure.kind == "out_of_memory":
        message = f"verl ran out of GPU memory in {where}"
        if failure.facts:
            if "allowed" in failure.facts:  # the per-process limit ran out, not the card
                message += (
                    f": torch asked for {failure.facts['tried']} with {failure.facts['allocated']} of the "
                    f"{failure.facts['allowed']} allowed to this process already allocated (the card itself had "
                    f"{failure.facts['free']} of {failure.facts['capacity']} free)"
                )
            else:
                message += (
                    f": torch asked for {failure.facts['tried']} with {failure.facts['free']} of "
                    f"{failure.facts['capacity']} free"
                )
        fix = (
            "run with the planner on (drop --plan off and any micro-batch you set), or lower the micro-batch of that "
            "phase"
        )
        if request is not None:
            plan = predict(request)
            phase = next((p for p in plan.phases if p.phase == failure.phase), None)
            if phase is not None:
                message += (
                    f"; the planner predicts {format_gib(phase.total)} for this phase against "
                    f"{format_gib(plan.usable_bytes)} usable"
                )
            decision = auto_fit(request)
            if decision.fits:
                chosen = decision.request
                changes = [
                    f"{title} {written(getattr(chosen, name))}"
                    for name, (title, written) in FIT_CHOICES.items()
                    if getattr(chosen, name) != getattr(request, name)
                ]
                micro = (
                    min(chosen.actor_micro_batch_size, chosen.critic_micro_batch_size)
                    if request.has_critic
                    else chosen.actor_micro_batch_size
                )
                fix = (
                    f"auto-fit picks {', '.join(changes) or 'these sizes'}: drop --plan off so verlfit train sizes "
                    f"the run (or set --micro-batch-size {micro} yourself)"
                )
            elif decision.suggestion:
                fix = decision.suggestion
        return message, fix
    if failure.kind == "disk_full":
        message = f"the disk filled up during {where}"
        if disk_path is not None and disk_free_bytes is not None:
            message += f": {disk_path} has {format_gib(disk_free_bytes)} free"
        if request is not None:
            message += f"; one checkpoint of this run needs about {format_gib(checkpoint_disk_bytes(request))}"
        kept = f"; the checkpoint of step {checkpoint_step} is complete and kept" if checkpoint_step else ""
        return message + kept, f"free space (or lower --keep-checkpoints, raise --save-freq), then {resume}"
    if failure.kind == "shared_memory":
        return (
            f"Ray's object store (in /dev/shm) was full during {where}",
            "give the container more shared memory (compose.yaml's shm_size: 11gb, or docker run --shm-size=11g), then "
            + resume,
        )
    if failure.kind == "fp16_overflow":
        f = failure.facts
        return (
            f"fp16 loss scaling stopped the run in {where}: the last {f['updates']} {f['role']} updates all overflowed "
            f"(inf/nan gradients at every loss scale from {f['from_scale']} down to {f['to_scale']}), so fp16 cannot "
            "hold this run's gradients",
            f"train it in fp32 (verlfit train --profile p40: slower on this card) or with a lower --{f['role']}-lr",
        )
    if failure.worker_method and failure.role:
        where = (
            f"{PHASE_WORDS.get(failure.phase, 'an unknown phase')}, in {ROLE_WORDS[failure.role]} "
            f"(verl's {failure.worker_method})"
        )
    return (
        f"a verl worker process died during {where}: killed by a signal, or by the kernel's out-of-memory killer "
        "(host RAM: see `dmesg | grep -i 'killed process'`)",
        resume,
    )
