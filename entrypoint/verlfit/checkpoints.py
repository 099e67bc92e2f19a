"""A run directory's checkpoints: which steps verl saved, which are complete, and keeping only the newest N.

verl 0.4.1 writes the checkpoint of step N as ``RUN_DIR/checkpoints/global_step_N/`` (``actor/``, ``critic/`` for PPO,
then ``data.pt``) and, last, the marker ``checkpoints/latest_checkpointed_iteration.txt`` holding N
(``ray_trainer.py:806-839``): a ``global_step_N`` above the marker is a save in progress or one a failure cut short.
The files of one checkpoint are described in :mod:`verlfit.export`.

**Why verlfit prunes too.** ``--keep-checkpoints K`` becomes verl's ``trainer.max_actor_ckpt_to_keep`` /
``max_critic_ckpt_to_keep``, but verl's checkpoint manager prunes only what the running process saved itself: the
paths of its own saves are a list in memory (``previous_saved_paths``, ``fsdp_checkpoint_manager.py:184-187`` and
``:305``), empty in every new process, and it removes an old save's ``actor/`` and ``critic/`` folders but not
``global_step_N`` itself, whose ``data.pt`` stays (``checkpoint_manager.py:132-140``). So every checkpoint from before a
``--resume`` stayed on disk: the 500-step PPO soak of 2026-12-01 (three resumes, ``--keep-checkpoints 2``) ended with
ten ``global_step_*`` folders, seven of them whole checkpoints (docs/reliability.md). :func:`prune` removes what verl
leaves; ``verlfit train`` calls it before a resumed run starts, each time the marker changes while verl runs, and
when verl exits (:func:`verlfit.train.supervise.launch`).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import time
from pathlib import Path
from typing import Callable

from verlfit.errors import VerlfitError
from verlfit.run_files import CHECKPOINTS_DIR

TRACKER = "latest_checkpointed_iteration.txt"  # ray_trainer.py:837, written after every save
STEP_PREFIX = "global_step_"
REMOVING_PREFIX = (
    ".removing-"  # a pruned checkpoint's name while it is removed: never a global_step_N to verl or export
)
_STEP_NAME = re.compile(r"0|[1-9][0-9]*")  # the N verl writes in global_step_N: str(step), ASCII, no leading zero
_MARKER = re.compile(
    rb"[0-9]+"
)  # what verl's int() reads back from the marker (ray_trainer.py:837, checkpoint_manager.py:187), ASCII only


def saved_steps(checkpoints: Path) -> list[int]:
    """The N of every ``global_step_N`` folder under ``checkpoints`` (``RUN_DIR/checkpoints``), ascending; [] when the
    folder does not exist. Other names (``global_step_007``, ``global_step_²``, files) are ignored: verl writes
    ``global_step_{step}`` (``ray_trainer.py:806``)."""
    found = []
    for entry in checkpoints.glob(f"{STEP_PREFIX}*") if checkpoints.is_dir() else ():
        suffix = entry.name[len(STEP_PREFIX) :]
        if entry.is_dir() and _STEP_NAME.fullmatch(suffix):
            found.append(int(suffix))
    return sorted(found)


def read_marker(checkpoints: Path) -> int | None:
    """The step in verl's marker ``checkpoints/latest_checkpointed_iteration.txt``; None when it is missing or holds no
    whole number in ASCII digits (text that is not UTF-8, ``²``, ``-3``, ``+4`` are none).

    Raises:
        VerlfitError: the marker exists but cannot be read (permissions, I/O error), naming it.
    """
    try:
        text = (checkpoints / TRACKER).read_bytes().strip()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise VerlfitError(f"cannot read {checkpoints / TRACKER}: {error.strerror}") from error
    return int(text) if _MARKER.fullmatch(text) else None


def latest_checkpoint(run_dir: str | os.PathLike) -> int | None:
    """The step of the newest complete checkpoint of a run directory, or None when there is none.

    verl 0.4.1 writes ``checkpoints/latest_checkpointed_iteration.txt`` (the step) only after a checkpoint is
    complete (``ray_trainer.py:837``), and resumes from ``global_step_<step>`` when that directory exists
    (``find_latest_ckpt_path``, ``checkpoint_manager.py:165-190``); otherwise it trains from scratch. A marker that
    cannot be read counts as none.
    """
    try:
        return _resumable_step(Path(run_dir) / CHECKPOINTS_DIR)
    except VerlfitError:
        return None


def how_to_continue(run_dir: str | os.PathLike, save_freq: int) -> str:
    """What a run stopped before its end (Ctrl-C, ``--stall-timeout``) can do next, one line without the ``verlfit:``
    prefix: ``--resume`` from its newest complete checkpoint (:func:`latest_checkpoint`), e.g. ``"stopped. Continue
    from step 50 with: verlfit train --resume /runs/r"`` (the path shell-quoted); before the first checkpoint (one every
    ``save_freq`` steps, ``--save-freq``) that there is nothing to resume."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return f"stopped before the first checkpoint (--save-freq {save_freq}): nothing to resume; start a new run"
    return f"stopped. Continue from step {checkpoint} with: verlfit train --resume {shlex.quote(str(run_dir))}"


def _resumable_step(checkpoints: Path) -> int | None:
    """verl's marker step when its ``global_step_N`` folder is there (what verl resumes from), else None.

    Raises:
        VerlfitError: the marker cannot be read (:func:`read_marker`).
    """
    step = read_marker(checkpoints)
    return step if step is not None and (checkpoints / f"{STEP_PREFIX}{step}").is_dir() else None


def checkpoints_to_prune(checkpoints: Path, keep: int) -> list[int]:
    """The steps :func:`prune` removes, ascending: every ``global_step_N`` at or below verl's marker except the newest
    ``keep`` whole ones. Whole: at or below the marker with an ``actor/`` folder (what verl's own pruning removes
    first, so a folder it pruned, holding only ``data.pt``, is not whole). The marker's own step is never removed,
    nor anything above it (a save in progress, or one a failure cut short: :func:`remove_cut_short`). ``keep`` 0 (keep
    all, ``--keep-checkpoints 0``), no marker, or a marker whose ``global_step_N`` is not there (verl resumes from
    nothing then, ``checkpoint_manager.py:189``, and the older checkpoints may be all the user has): [].
    """
    marker = _resumable_step(checkpoints)
    if keep <= 0 or marker is None:
        return []
    settled = [step for step in saved_steps(checkpoints) if step <= marker]
    whole = [step for step in settled if (checkpoints / f"{STEP_PREFIX}{step}" / "actor").is_dir()]
    kept = set(whole[-keep:]) | {marker}
    return [step for step in settled if step not in kept]


def prune(run_dir: str | os.PathLike, keep: int) -> list[Path]:
    """Remove the checkpoints of ``run_dir`` that ``--keep-checkpoints keep`` does not keep
    (:func:`checkpoints_to_prune`); return the removed ``global_step_N`` paths, oldest first.

    Each folder is first renamed to ``.removing-global_step_N`` and then deleted, so a removal that is interrupted
    (Ctrl-C, a power cut) leaves no half-deleted folder under a checkpoint's name; leftovers of such a removal are
    deleted by the next call. Safe while verl runs: verl writes only steps above the marker, and its own pruning
    skips a path that is gone (``checkpoint_manager.py:138``).

    A ``global_step_N`` that is a symbolic link is not removed: verlfit does not delete through links.

    Raises:
        OSError: a folder could not be renamed or deleted (permissions, I/O error); what was removed before stays
            removed.
        VerlfitError: verl's marker cannot be read, or a checkpoint to remove is a symbolic link (nothing renamed).
    """
    checkpoints = Path(run_dir) / CHECKPOINTS_DIR
    for leftover in checkpoints.glob(f"{REMOVING_PREFIX}{STEP_PREFIX}*") if checkpoints.is_dir() else ():
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        else:  # a file, or a link renamed by an older verlfit: the link goes, not what it points to
            leftover.unlink()
    removed = []
    for step in checkpoints_to_prune(checkpoints, keep):
        path = checkpoints / f"{STEP_PREFIX}{step}"
        if path.is_symlink():
            raise VerlfitError(
                f"{path} is a symbolic link to {os.readlink(path)}, and verlfit does not delete through links: "
                f"remove the link (and {os.readlink(path)} if you no longer need it)"
            )
        doomed = checkpoints / f"{REMOVING_PREFIX}{path.name}"
        path.rename(doomed)
        shutil.rmtree(doomed)
        removed.append(path)
    return removed


def remove_cut_short(run_dir: str | os.PathLike) -> list[Path]:
    """Remove every ``global_step_N`` above the newest complete checkpoint (:func:`latest_checkpoint`; all of them
    when there is none): saves a failure cut short, which verl never resumes from. Return the removed paths, oldest
    first. Used after a full disk, so the space they held is free again
    (:func:`verlfit.train.supervise.report_failure`). A linked folder loses its link, not what it points to.

    Raises:
        OSError: a folder could not be deleted.
    """
    checkpoints = Path(run_dir) / CHECKPOINTS_DIR
    marker = latest_checkpoint(run_dir)
    removed = []
    for step in saved_steps(checkpoints):
        if marker is None or step > marker:
            path = checkpoints / f"{STEP_PREFIX}{step}"
            if path.is_symlink():  # the link goes, not what it points to
                path.unlink()
            else:
                shutil.rmtree(path)
            removed.append(path)
    return removed


class CheckpointKeeper:
    """Keeps a running verl's checkpoints to ``--keep-checkpoints``: :meth:`check` prunes (:func:`prune`) whenever
    verl's marker names a new step, and says what it removed through ``say`` (one line of text, e.g. the progress
    display's).

    ``keep`` 0 keeps everything (no checks). Checks at most once every ``interval`` seconds unless ``force``. A failed
    removal (an ``OSError`` or an unreadable marker) is said once, naming the error and what to do, and pruning stops
    for this session: the run goes on, since a checkpoint left on disk loses nothing.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike,
        keep: int,
        say: Callable[[str], None],
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_dir, self.keep, self.say, self.interval, self.clock = Path(run_dir), keep, say, interval, clock
        self.failed: Exception | None = None
        self._marker: int | None = None
        self._checked_at: float | None = None

    def check(self, force: bool = False) -> list[Path]:
        """Prune when verl's marker changed since the last check (or on the first check); return the removed paths."""
        if self.keep <= 0 or self.failed is not None:
            return []
        now = self.clock()
        if not force and self._checked_at is not None and now - self._checked_at < self.interval:
            return []
        self._checked_at = now
        try:
            marker = read_marker(self.run_dir / CHECKPOINTS_DIR)
            if marker is None or marker == self._marker:
                return []
            removed = prune(self.run_dir, self.keep)
        except (OSError, VerlfitError) as error:
            self.failed = error
            self.say(
                f"verlfit: could not remove old checkpoints of {self.run_dir} for --keep-checkpoints {self.keep}: "
                f"{error}; they stay on disk (nothing is lost) and verlfit stops pruning for this session: delete the "
                "global_step_N folders you do not need"
            )
            return []
        self._marker = marker
        if removed:
            kept = [step for step in saved_steps(self.run_dir / CHECKPOINTS_DIR) if step <= marker]
            self.say(
                f"verlfit: removed {', '.join(path.name for path in removed)} (--keep-checkpoints {self.keep}; "
                f"kept: {', '.join(f'{STEP_PREFIX}{step}' for step in kept)})"
            )
        return removed
