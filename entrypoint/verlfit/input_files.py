"""What a path the user named is, in words, for the messages of every command that reads a file or a folder:
:func:`kind_of` (``"a folder"``, ``"a named pipe (FIFO)"``, ``"a symbolic link to /x, which does not exist"``...)
and :func:`require_regular_file` (the one refusal of anything that is not a readable regular file, naming what it
is instead). ``os.stat`` / ``os.lstat`` and the ``stat`` module decide; nothing is opened, so a FIFO never blocks.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from verlfit.errors import VerlfitError

# st_mode file types -> words (stat module); a regular file and a folder are the two verlfit reads
_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def kind_of(path: str | os.PathLike) -> str:
    """What ``path`` is, following symbolic links: one of ``"a file"`` (a regular one), ``"a folder"``, ``"a named pipe
    (FIFO)"``, ``"a socket"``, ``"a character device"``, ``"a block device"``, ``"a symbolic link to TARGET, which
    does not exist"`` (a dangling link), ``"missing"`` (nothing there), or ``"not reachable (REASON)"`` when
    ``os.stat`` fails otherwise (e.g. a parent folder without search permission)."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if path.is_symlink():
            return f"a symbolic link to {os.readlink(path)}, which does not exist"
        return "missing"
    except OSError as error:
        return f"not reachable ({error.strerror or error})"
    return next((words for test, words in _KINDS if test(mode)), "not a regular file")


def require_regular_file(path: str | os.PathLike, what: str, fix: str) -> Path:
    """``path`` when it is a regular file (through links); else one :class:`VerlfitError` (exit status 2) saying
    what it is: ``"{what} {path} does not exist"``, ``"... is a folder, not a file"``, ``"... is a named pipe (FIFO),
    not a file"``, ``"... is a symbolic link to X, which does not exist"``; ``fix`` is the error's fix.

    Args:
        path: the path given.
        what: how the message names it (``"--train"``, ``"reward function file"``).
        fix: what to pass instead.

    Raises:
        VerlfitError: anything but a regular file.
    """
    kind = kind_of(path)
    if kind == "a file":
        return Path(path)
    if kind == "missing":
        raise VerlfitError(f"{what} {path} does not exist", fix=fix, exit_code=2)
    if kind.startswith(("a symbolic link", "not reachable")):
        raise VerlfitError(f"{what} {path} is {kind}", fix=fix, exit_code=2)
    raise VerlfitError(f"{what} {path} is {kind}, not a file", fix=fix, exit_code=2)
