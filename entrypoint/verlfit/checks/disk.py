"""Will a run's checkpoints fit on the disk under its run directory: how many it holds at once
(:func:`checkpoints_held`) and the ``disk`` verdict for them (:func:`checkpoint_space`). The doctor's ``disk`` line
and ``verlfit train``'s warning before a launch both give it. Which file system a path lies on
(:func:`file_system_type`): ``verlfit train`` refuses a ``--run-dir`` on one of :data:`PSEUDO_FILE_SYSTEMS`.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Callable

from verlfit.checks.result import FAIL, PASS, WARN, CheckResult

GIB = 1024**3

MOUNT_TABLE = "/proc/self/mountinfo"  # the kernel's table of this process's mounts (proc(5): /proc/pid/mountinfo)
# file systems the kernel makes up from its own state (proc(5), sysfs(5), cgroups(7), ...): a folder on one holds no
# files a run could write, whatever the permission bits say (root passes os.access on /proc)
PSEUDO_FILE_SYSTEMS = frozenset(
    "binfmt_misc bpf cgroup cgroup2 configfs debugfs devpts devtmpfs efivarfs fusectl hugetlbfs mqueue nsfs proc "
    "pstore rpc_pipefs securityfs selinuxfs sysfs tracefs".split()
)


def existing_parent(path: str | os.PathLike) -> Path:
    """``path`` or its nearest existing parent (a run directory is measured before it is created)."""
    path = Path(path).expanduser().absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def file_system_type(path: str | os.PathLike, mount_table: str | os.PathLike = MOUNT_TABLE) -> str | None:
    """The type of the file system ``path`` lies on (``"ext4"``, ``"tmpfs"``, ``"proc"``): field 9 of the line of
    ``mount_table`` (``/proc/self/mountinfo``, format in proc(5)) whose mount point is the longest one holding the
    path with its symbolic links resolved; mount points there write a space as ``\\040``. None when the table cannot
    be read (not Linux) or names no mount for the path. The standard library has no call for it (``os.statvfs`` gives
    the flags, not the type) and psutil is not a dependency.
    """
    resolved = Path(os.path.realpath(path))
    try:
        lines = Path(mount_table).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    best, found = -1, None
    for line in lines:
        fields, _, after = line.partition(" - ")
        fields, after = fields.split(), after.split()
        if len(fields) < 5 or not after:
            continue
        mount_point = Path(re.sub(r"\\([0-7]{3})", lambda octal: chr(int(octal[1], 8)), fields[4]))
        if (resolved == mount_point or mount_point in resolved.parents) and len(mount_point.parts) >= best:
            best, found = len(mount_point.parts), after[0]  # a later mount over the same point hides the earlier
    return found


def checkpoints_held(keep: int, saves: int | None = None) -> int:
    """How many checkpoints a run has on disk at its peak.

    verl 0.4.1 deletes the oldest kept checkpoint *before* it writes the next one, once ``keep`` exist
    (``fsdp_checkpoint_manager.py:183-186``), so the peak is ``keep`` (``keep`` - 1 complete + the one being
    written), not ``keep`` + 1. ``keep`` 0 (keep all) holds every save: ``saves`` when known, else 2 are counted.
    verl's prune list is per process: checkpoints from before a ``--resume`` are left to verlfit, which removes
    them as the resumed run's saves complete (:mod:`verlfit.checkpoints`), so a resumed run holds at most ``keep`` + 1
    at once (the one being written); its check asks for ``keep`` more, which covers that. Never more than ``saves``
    when that is known.
    """
    held = keep if keep > 0 else (saves if saves is not None else 2)
    return max(1, min(held, saves) if saves is not None else held)


def checkpoint_space(
    path: str | os.PathLike,
    one_checkpoint: int,
    held: int,
    disk_usage: Callable = shutil.disk_usage,
    resume: bool = False,
) -> CheckResult:
    """The ``disk`` verdict for checkpoints of ``one_checkpoint`` bytes under ``path``, ``held`` at once
    (:func:`checkpoints_held`): FAIL when not even one fits, WARN when fewer than ``held`` fit, else PASS. The message
    names the measured folder (``path`` or its nearest existing parent), the free GiB and the need.

    The fix names only what changes the verdict: more space (and, unless ``resume``, another ``--run-dir``); when
    some fit, keeping that many (``--keep-checkpoints N``, N = those that fit, when N >= 2 and below ``held``) and,
    unless ``resume`` (a resumed run keeps its ``--save-freq``), saving at most that many times (``--save-freq``).
    Neither helps when not even one fits."""
    where = existing_parent(path)
    if not where.is_dir():
        return CheckResult(
            "disk",
            FAIL,
            f"{where} is a file: checkpoints cannot go under it ({path})",
            "pass --run-dir a directory path",
        )
    try:
        free = disk_usage(str(where)).free
    except OSError as error:
        return CheckResult("disk", WARN, f"cannot measure free space at {where}: {error}")
    need = held * one_checkpoint
    text = (
        f"{free / GIB:.1f} GiB free at {where}; this run holds {held} checkpoint{'s' if held > 1 else ''} of "
        f"{one_checkpoint / GIB:.1f} GiB at once ({need / GIB:.1f} GiB)"
    )
    if free >= need:
        return CheckResult("disk", PASS, text)
    fit = free // one_checkpoint
    fixes = [f"free disk space at {where}"] + ([] if resume else ["point --run-dir at a bigger disk"])
    if fit < 1:
        return CheckResult("disk", FAIL, text + ": not even one checkpoint fits", " or ".join(fixes))
    if 2 <= fit < held:
        fixes.append(f"keep {fit} (--keep-checkpoints {fit})")
    if not resume:
        fixes.append(f"save at most {fit} time{'s' if fit > 1 else ''} in the run (--save-freq)")
    return CheckResult(
        "disk",
        WARN,
        text + f": only {fit} fit{'s' if fit == 1 else ''}, the save after that fails with a full disk",
        ", ".join(fixes[:-1]) + " or " + fixes[-1],
    )
