"""Every file and folder verlfit writes: where it may write, and how, so that nothing the user owns is ever lost.

One policy for every writing command (``prepare-gsm8k``, ``prepare-data``, ``train``'s run directory, ``export``,
``eval``, ``report``, ``bench``):

* **Where** (:func:`check_output`, before any work is done). Paths are resolved first (symlinks followed, ``..``
  removed), so a link to a folder is judged as that folder. Refused, with the fix, exit status 2:

  - a path that is or lies below a dangling symbolic link (the write would create the link's target wherever it
    points) or a symbolic link loop (:func:`check_links_on_the_way`);

  - the current directory or a folder above it (``--output .``, ``--output ..``);
  - a run directory (a folder holding ``run.json`` or ``checkpoints/``), a folder containing one, or a path inside
    one, except the command's own place in that run (``RUN/export/NAME``, ``RUN/eval/NAME``, ``RUN/report``);
  - an input of the same command, or a folder containing one, or a path inside a folder it reads (``reads``:
    eval's model and data folders, train's);
  - a file where a folder is written, or a folder where a file is written;
  - a folder holding anything verlfit did not write: any file its marker (:data:`MARKER_NAME`) does not list with
    the size and SHA-256 it wrote. Refused even with ``--force``: verlfit never deletes or overwrites such a file.

* **Replacing.** A folder verlfit wrote (every file in it listed by its marker, unchanged) is replaced without
  ``--force`` only by a re-run of the command that wrote it, on the same inputs (the marker records both);
  anything else verlfit wrote there needs ``--force``, whose one meaning in every command is: *replace what verlfit
  wrote there before* (the message names those files), never a file it did not write.

* **How** (:func:`write_folder`, :func:`write_file`). A folder is built whole under a hidden name beside the target
  (``.NAME.verlfit-building-HOST-PID-TOKEN``, NAME cut to :data:`HIDDEN_NAME_BYTES`: :func:`hidden_name`), its files
  fsync-ed, its marker written last, and switched in, under a lock on the folder it goes in (:func:`folder_locked`)
  and only while the target is what :func:`check_output` saw (a write racing another into one output fails, exit
  status 1, instead of replacing it), with one
  ``renameat2(RENAME_EXCHANGE)`` (Linux 3.15+; the old folder then lies under a hidden name and its listed files
  are removed), or where the file system lacks it with two renames; SIGINT, SIGTERM and SIGHUP are held back from
  the switch until the old folder is removed (:func:`signals_held`). After any interruption the target is the old
  folder or the new one, never a mix: a multi-file output (prepare-data's train + test + marker, eval's rows +
  summary + comparison) switches as one. A single file
  (``run.json``, ``metrics.jsonl``, bench's JSON) is written to a hidden temporary name in its folder, fsync-ed,
  given the umask's mode and renamed over the old one. On any failure the temporary file or folder is removed,
  and so are the parent folders the write created (only while empty). What a killed write (SIGKILL, a power loss)
  left is removed by the next write into that folder once its process is provably gone (:func:`remove_stale`).

A run directory has no marker: ``run.json`` names it (``verlfit train`` builds it whole and switches it in, and
refuses one that exists).
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import fcntl
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

from verlfit.errors import StandardOutputFailed, VerlfitError
from verlfit.input_files import kind_of
from verlfit.run_files import CHECKPOINTS_DIR, RUN_FILE, is_run_directory

MARKER_NAME = ".verlfit-written.json"
# the marker of data folders prepared by verlfit before this module: read as a marker, never written
LEGACY_MARKER_NAME = ".verlfit-prepared.json"
MARKER_FORMAT = 2
BUILDING = ".verlfit-building-"  # the hidden folder a write builds beside its target (hidden_name)
REPLACED = ".verlfit-replaced-"  # what an exchange leaves under a hidden name until its listed files are removed
WRITING = ".verlfit-writing-"  # the hidden temporary file write_file renames over its target
# Bytes of the output's name a hidden name keeps (for people reading a listing): with the kind, host, pid and token it
# stays under 100 bytes, so any legal output name (up to NAME_MAX, 255 bytes on Linux file systems) has a legal
# hidden name beside it. A choice verlfit makes.
HIDDEN_NAME_BYTES = 40
# This machine in hidden names (4 hex digits of its host name's SHA-256): a leftover whose pid is checked must come
# from this host, since a pid means nothing on another machine (or container) sharing the folder
HOST_TAG = hashlib.sha256(socket.gethostname().encode("utf-8", "surrogateescape")).hexdigest()[:4]
_HIDDEN = re.compile(
    r"\.(?P<name>.*)(?P<kind>" + "|".join(map(re.escape, (BUILDING, REPLACED, WRITING))) + r")"
    r"(?P<host>[0-9a-f]{4})-(?P<pid>[0-9]+)-[0-9a-f]{8}",
    re.DOTALL,
)

T = TypeVar("T")


# --------------------------------------------------------------------------- paths


def resolved(path: str | os.PathLike) -> Path:
    """``path`` absolute, ``~`` expanded, every symlink followed and ``..`` removed (``os.path.realpath``): where a
    write would really land. A path that does not exist yet is resolved as far as it exists."""
    return Path(os.path.realpath(os.path.expanduser(os.fspath(path))))


def enclosing_run(path: Path) -> Path | None:
    """The run directory ``path`` (resolved) is or lies in: the nearest of it and its parents that is one."""
    for candidate in (path, *path.parents):
        if candidate.is_dir() and is_run_directory(candidate):
            return candidate
    return None


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def missing_parents(directory: Path) -> list[Path]:
    """The folders of ``directory`` and its parents that do not exist yet, outermost first."""
    missing = []
    for candidate in (directory, *directory.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    return missing[::-1]


def remove_created(created: list[Path]) -> None:
    """Remove the folders a write created (``missing_parents`` before it made them), innermost first, each only while
    empty: never one that existed before or that someone else has written into since."""
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:
            break


def umask_mode(folder: bool = False) -> int:
    """The mode a plain ``open`` (``0o666``) or ``mkdir`` (``0o777``) gives under the process umask; ``mkstemp`` and
    ``mkdtemp`` give 0600 and 0700, and a written output is shared like any other file."""
    mask = os.umask(0)
    os.umask(mask)
    return (0o777 if folder else 0o666) & ~mask


def share_as_umask(folder: Path) -> None:
    """Give ``folder`` and everything in it :func:`umask_mode`'s modes (the safetensors writer, for one, leaves
    ``model.safetensors`` 0600 while the tokenizer files follow the umask)."""
    for root, folders, files in os.walk(folder):
        for name in files:
            os.chmod(Path(root) / name, umask_mode())
        for name in folders:
            os.chmod(Path(root) / name, umask_mode(folder=True))
    os.chmod(folder, umask_mode(folder=True))


# --------------------------------------------------------------------------- the marker


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_files(folder: Path) -> list[str]:
    """Every file (and link) under ``folder`` as a POSIX path relative to it, sorted; the markers excluded."""
    names = []
    for root, folders, files in os.walk(folder):
        here = Path(root).relative_to(folder)
        names += [(here / name).as_posix() for name in files]
        names += [(here / name).as_posix() for name in folders if (Path(root) / name).is_symlink()]
    return sorted(name for name in names if name not in (MARKER_NAME, LEGACY_MARKER_NAME))


def marker_content(folder: Path, written_by: str, inputs: Iterable[str] = ()) -> dict:
    """The marker's JSON object: the command, its inputs, and each file under ``folder`` with its size in bytes and
    SHA-256."""
    files = {
        name: {"bytes": (folder / name).stat().st_size, "sha256": file_digest(folder / name)}
        for name in folder_files(folder)
    }
    return {"format": MARKER_FORMAT, "written_by": written_by, "inputs": list(inputs), "files": files}


def _write_marker(folder: Path, output: "Output") -> None:
    text = json.dumps(marker_content(folder, output.command, output.inputs), indent=2, sort_keys=True) + "\n"
    (folder / MARKER_NAME).write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class Marker:
    """What a folder's marker says: the command that wrote it, its inputs (None in a marker older than this module),
    and file (relative path) -> ``{"bytes", "sha256"}``."""

    written_by: str
    inputs: tuple[str, ...] | None
    files: dict


def read_marker(folder: Path) -> tuple[Marker | None, str]:
    """(the folder's :class:`Marker`, "") or (None, why there is none usable); :data:`MARKER_NAME`, else the legacy
    :data:`LEGACY_MARKER_NAME` of data folders prepared by an earlier verlfit."""
    for name in (MARKER_NAME, LEGACY_MARKER_NAME):
        path = folder / name
        if path.is_file():
            break
    else:
        return None, "no verlfit marker"
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, f"its verlfit marker does not read ({error})"
    files = content.get("files") if isinstance(content, dict) else None
    if not isinstance(files, dict) or not all(isinstance(entry, dict) for entry in files.values()):
        return None, "its verlfit marker lists no files"
    inputs = content.get("inputs")
    written_by = content.get("written_by")
    return Marker(
        written_by if isinstance(written_by, str) else "verlfit",
        tuple(map(str, inputs)) if isinstance(inputs, list) else None,
        files,
    ), ""


def unchanged(path: Path, recorded: dict) -> bool:
    """Whether the file at ``path`` has the size and SHA-256 the marker recorded for it."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size != recorded.get("bytes"):
            return False
        return file_digest(path) == recorded.get("sha256")
    except OSError:
        return False


@dataclass(frozen=True)
class FolderOwner:
    """Who a folder's content belongs to.

    Attributes:
        state: ``"absent"``, ``"empty"``, ``"verlfit"`` (every file listed by its marker, unchanged), ``"foreign"``
            (anything else) or ``"not-a-folder"``.
        files: the files in it (relative paths, sorted; markers excluded).
        marker: its marker, when it has a usable one.
        reason: for ``"foreign"``: which files verlfit did not write, or which changed since.
    """

    state: str
    files: tuple[str, ...] = ()
    marker: Marker | None = None
    reason: str = ""


def _listed(files: Iterable[str], limit: int = 8) -> str:
    files = list(files)
    return ", ".join(files[:limit]) + (f" and {len(files) - limit} more" if len(files) > limit else "")


def folder_owner(folder: Path) -> FolderOwner:
    """Say whose the content of ``folder`` is (:class:`FolderOwner`); reads names, sizes and the SHA-256 of the
    files its marker lists. Writes nothing."""
    if not folder.exists() and not folder.is_symlink():
        return FolderOwner("absent")
    if not folder.is_dir():
        return FolderOwner("not-a-folder")
    files = tuple(folder_files(folder))
    marker, why_not = read_marker(folder)
    if not files and marker is None and not any(folder.iterdir()):
        return FolderOwner("empty")
    if marker is None:
        return FolderOwner(
            "foreign", files, None, f"{why_not}: verlfit did not write {_listed(files) or 'its content'}"
        )
    unlisted = [name for name in files if name not in marker.files]
    changed = [name for name in files if name in marker.files and not unchanged(folder / name, marker.files[name])]
    if unlisted:
        return FolderOwner("foreign", files, marker, f"verlfit did not write {_listed(unlisted)}")
    if changed:
        them = "it" if len(changed) == 1 else "them"
        return FolderOwner("foreign", files, marker, f"{_listed(changed)} changed after verlfit wrote {them}")
    return FolderOwner("verlfit", files, marker)


# --------------------------------------------------------------------------- where


@dataclass(frozen=True)
class Output:
    """An output :func:`check_output` allowed.

    Attributes:
        path: where it is written (resolved).
        given: the path as the user gave it (for messages).
        flag: the option that named it (``--output``, ``--run-dir``).
        command: the command writing it (``"verlfit eval"``), recorded in the marker.
        inputs: the command's inputs as recorded in the marker (resolved paths, hub ids).
        replaces: the files of verlfit's earlier output there that the write replaces (empty: nothing there).
        force: whether ``--force`` was given.
        seen: the target's :func:`target_state` when it was checked.
    """

    path: Path
    given: Path
    flag: str
    command: str
    inputs: tuple[str, ...]
    replaces: tuple[str, ...] = ()
    force: bool = False
    # what the target held when checked (:func:`target_state`): the switch-in refuses a target changed since
    seen: tuple = ("absent", None)


def replaced_text(output: Output) -> str:
    """The line a command prints after replacing verlfit's earlier output (``""`` when nothing was there): which
    files, so ``--force`` always says what it replaced."""
    if not output.replaces:
        return ""
    return f"replaced what verlfit wrote in {output.given} before: {_listed(output.replaces)}"


def _refuse(message: str, fix: str) -> VerlfitError:
    return VerlfitError(message, fix=fix, exit_code=2)


def _collided(message: str, fix: str) -> VerlfitError:
    """The failure of a write another process got to first (the target changed after :func:`check_output`): exit
    status 1, since no input of this command is wrong and the same command may succeed run again."""
    return VerlfitError(message, fix=fix, exit_code=1)


def _shown(given: Path, target: Path) -> str:
    return str(given) if resolved(given) == target and str(given) == str(target) else f"{given} ({target})"


def check_output(
    path: str | os.PathLike,
    command: str,
    *,
    flag: str = "--output",
    force: bool = False,
    inputs: Iterable[str | os.PathLike] = (),
    own_place: tuple[str, ...] | None = None,
    kind: str = "folder",
    force_flag: str | None = "--force",
    reads: Iterable[tuple[str, str | os.PathLike]] = (),
) -> Output:
    """Check that ``command`` may write ``path`` (the module docstring's rules) and say what it would replace.

    Args:
        path: the output as given (``--output``, a default).
        command: e.g. ``"verlfit export"``; with ``inputs``, what a re-run must match to replace without ``force``.
        flag: the option that names the output, used in the messages.
        force: ``--force``: replace what verlfit wrote there before.
        inputs: the command's input files, folders or hub ids (paths are resolved; an output that is or contains
            one is refused).
        own_place: the command's place inside a run directory, as path parts below ``RUN``: ``("export", "*")``
            allows ``RUN/export/NAME``, ``("report",)`` allows ``RUN/report``; None: nowhere in a run.
        kind: ``"folder"``, ``"file"`` (a file output: bench's JSON) or ``"new-folder"`` (must not exist: a run
            directory).
        force_flag: the command's option for ``force`` (None: it has none).
        reads: the folders the command reads, each with the option or argument that names it (``("--data",
            "data/small")``, ``("MODEL", "models/tiny")``): an output inside one is refused. A hub id (no folder
            there) and a folder that is or lies in a run directory are skipped: the run rule places outputs there.

    Returns:
        The :class:`Output` to pass to :func:`write_folder` / :func:`write_file`.

    Raises:
        VerlfitError: exit status 2, naming the output and the fix, for every refusal.
    """
    given = Path(path)
    check_name_lengths(given, flag)
    check_links_on_the_way(given, flag)
    target = resolved(given)
    shown = _shown(given, target)
    cwd = resolved(os.getcwd())
    if _inside(cwd, target):
        here = "the current directory" if target == cwd else "a folder holding the current directory"
        raise _refuse(
            f"{flag} {shown} is {here}: verlfit writes its output as a folder of its own and never into the "
            "folder you work in",
            fix=f"pass {flag} a new folder, e.g. {flag} ./{command.split()[-1]}-output",
        )
    file_above = next((parent for parent in target.parents if parent.exists() and not parent.is_dir()), None)
    if file_above is not None:
        raise _refuse(
            f"{flag} {shown}: {file_above} is a file, not a folder", fix=f"pass {flag} a path whose parents are folders"
        )
    run = enclosing_run(target)
    if run is not None and run == target:
        holds = RUN_FILE if (run / RUN_FILE).is_file() else CHECKPOINTS_DIR + "/"
        raise _refuse(
            f"{flag} {shown} is a run directory (it holds {holds}): its checkpoints and records are never replaced",
            fix=f"pass {flag} a new folder outside the run{_own_place_hint(run, own_place)}",
        )
    if run is not None:
        relative = target.relative_to(run).parts
        allowed = (
            own_place is not None
            and len(relative) == len(own_place)
            and all(want == "*" or want == part for want, part in zip(own_place, relative))
        )
        if not allowed:
            raise _refuse(
                f"{flag} {shown} lies inside the run directory {run}, outside this command's own place there",
                fix=f"pass {flag} a new folder outside the run{_own_place_hint(run, own_place)}",
            )
    resolved_inputs = [(str(item), resolved(item)) for item in inputs if _is_path_like(item)]
    for text, source in resolved_inputs:
        if _inside(source, target):
            what = "is" if source == target else "holds"
            raise _refuse(
                f"{flag} {shown} {what} the input {text} of this command: writing there would replace what it reads",
                fix=f"pass {flag} a new folder outside {text}",
            )
    for read_flag, folder in reads:
        source = resolved(folder)
        if _inside(target, source) and source.is_dir() and enclosing_run(source) is None:
            where = "is" if source == target else "lies inside"
            raise _refuse(
                f"{flag} {shown} {where} {read_flag} {folder}, which this command reads: verlfit never writes into"
                f" its own input (the output would be taken for part of {folder}, and go with it when it is moved,"
                " copied or cleaned)",
                fix=f"pass {flag} a folder outside {folder}",
            )
    if target.is_dir() and kind != "file":
        held = next((child for child in _children(target) if child.is_dir() and is_run_directory(child)), None)
        if held is not None:
            raise _refuse(
                f"{flag} {shown} holds the run directory {held}: its checkpoints and records are never replaced",
                fix=f"pass {flag} a new folder",
            )
    if kind == "file":
        return _check_file(given, target, shown, flag, command, force, force_flag)
    if kind == "new-folder":
        if target.exists() or target.is_symlink():
            raise _refuse(f"{flag} {shown} already exists", fix=f"pass {flag} a path that does not exist yet")
        return Output(target, given, flag, command, tuple(_input_text(item) for item in inputs), (), force)
    owner = folder_owner(target)
    seen = (owner.state, owner.marker)
    recorded_inputs = tuple(_input_text(item) for item in inputs)
    if owner.state == "not-a-folder":
        raise _refuse(
            f"{flag} {shown} is {kind_of(target)}, not a folder: {command} writes a folder and never replaces a file",
            fix=f"pass {flag} a folder path (it is created if missing)",
        )
    if owner.state == "foreign":
        even = f", even with {force_flag}" if force_flag else ""
        raise _refuse(
            f"{flag} {shown} holds files verlfit did not write ({owner.reason}): verlfit never replaces or "
            f"deletes them{even}",
            fix=f"pass {flag} a new folder (it is created), or move your files out of {given}",
        )
    if owner.state == "verlfit":
        rerun = owner.marker.written_by == command and owner.marker.inputs == recorded_inputs
        if not (force or rerun):
            what = owner.marker.written_by + (f" from {', '.join(owner.marker.inputs)}" if owner.marker.inputs else "")
            fix = f"pass {force_flag} to replace those files (only those), or " if force_flag else ""
            fix += f"pass {flag} a new folder"
            raise _refuse(
                f"{flag} {shown} holds what {what} wrote ({_listed(owner.files)}); {command} replaces it "
                f"without {force_flag or 'asking'} only when re-run on the same inputs",
                fix=fix,
            )
        return Output(target, given, flag, command, recorded_inputs, owner.files, force, seen)
    return Output(target, given, flag, command, recorded_inputs, (), force, seen)


def check_name_lengths(given: Path, flag: str) -> None:
    """Refuse a path (named by the option ``flag``) with a name longer than its file system takes (``NAME_MAX``:
    ``os.pathconf(..., "PC_NAME_MAX")`` of the nearest existing folder, 255 bytes where it cannot be read), before any
    call fails on it with ``ENAMETOOLONG``.

    Raises:
        VerlfitError: exit status 2, naming the name's first 40 characters, its bytes and the limit.
    """
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(given))))
    existing = next((folder for folder in path.parents if os.path.isdir(folder)), Path("/"))  # False on any OSError
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        limit = 255
    for part in path.parts[1:]:
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > limit:
            raise _refuse(
                f"{flag}: the name {part[:40]}... is {size} bytes, longer than the {limit} bytes a file name may have"
                f" on {existing}'s file system",
                fix=f"pass {flag} a path whose every name is at most {limit} bytes",
            )


def check_links_on_the_way(given: Path, flag: str) -> None:
    """Refuse an output (named by the option ``flag``) that is, or lies below, a symbolic link that leads nowhere: a
    dangling link (the write would create its target, and the folders missing above it, wherever it points) or a
    link loop (``ELOOP``: no write gets through). A link to an existing folder is followed, as :func:`resolved` does.

    Raises:
        VerlfitError: exit status 2, naming the link, its target (a dangling one) and the fix.
    """
    path = Path(os.path.abspath(os.path.expanduser(os.fspath(given))))
    for candidate in (*reversed(path.parents), path):
        if not os.path.islink(candidate):
            if not os.path.lexists(candidate):
                return  # nothing is there, so nothing below it either
            continue
        where = f"{flag} {given} is" if candidate == path else f"{flag} {given}: {candidate} is"
        try:
            os.stat(candidate)
        except FileNotFoundError:
            target = os.path.realpath(candidate)
            raise _refuse(
                f"{where} a symbolic link to {target}, which does not exist: verlfit would create {target} (and the"
                " folders missing above it) wherever the link points",
                fix=f"pass {flag} the folder you mean (not through the link), or create {target} first if the link is"
                " meant",
            ) from None
        except OSError as error:
            if error.errno != errno.ELOOP:
                return  # not searchable, say: the checks and the write that follow name it
            raise _refuse(
                f"{where} a symbolic link loop ({error.strerror}), not a folder",
                fix=f"pass {flag} a path that does not go through {candidate}, or point that link at a folder",
            ) from None


def _own_place_hint(run: Path, own_place: tuple[str, ...] | None) -> str:
    if own_place is None:
        return ""
    place = run.joinpath(*(part if part != "*" else "NAME" for part in own_place))
    return f", or leave it out for this command's own place in the run, {place}"


def _children(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError:
        return []


def _is_path_like(item) -> bool:
    return isinstance(item, os.PathLike) or (isinstance(item, str) and os.path.exists(os.path.expanduser(item)))


def _input_text(item) -> str:
    """An input as the marker records it: a resolved path for what exists, else the text (a hub id)."""
    return str(resolved(item)) if _is_path_like(item) else str(item)


BENCH_RECORD_KEY = "verlfit_bench"  # the key a bench record's JSON starts with (verlfit.bench)


def written_by_verlfit(path: Path) -> bool:
    """Whether the single file at ``path`` is one verlfit writes as a file of its own: a JSON object holding
    :data:`BENCH_RECORD_KEY` (``verlfit bench``'s record)."""
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    return isinstance(content, dict) and BENCH_RECORD_KEY in content


def _check_file(
    given: Path, target: Path, shown: str, flag: str, command: str, force: bool, force_flag: str | None
) -> Output:
    if target.is_dir():
        raise _refuse(
            f"{flag} {shown} is a folder: {command} writes one file",
            fix=f"pass {flag} a file path, e.g. {given / 'result.json'}",
        )
    if target.exists():
        if not written_by_verlfit(target):
            even = f", even with {force_flag}" if force_flag else ""
            raise _refuse(
                f"{flag} {shown} is a file verlfit did not write: it is never replaced{even}",
                fix=f"pass {flag} a new file name",
            )
        if not force:
            raise _refuse(
                f"{flag} {shown} holds an earlier record {command} wrote",
                fix=(f"pass {force_flag} to replace it, or " if force_flag else "pass ") + f"{flag} a new file name",
            )
        return Output(target, given, flag, command, (), (target.name,), force)
    return Output(target, given, flag, command, (), (), force)


# --------------------------------------------------------------------------- how


@contextmanager
def signals_held() -> Iterator[None]:
    """While inside, SIGINT, SIGTERM and SIGHUP are only noted, and delivered again on the way out (to the handlers
    there were before), so a Ctrl-C cannot fall between two renames that belong together. Python runs signal handlers
    in the main thread only, whichever thread the kernel gave the signal to, so the handlers are swapped rather than
    the thread's signal mask. Outside the main thread: nothing held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {}
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        handler = signal.getsignal(number)
        if handler is not None and handler is not signal.SIG_IGN:  # None: set outside Python, left alone
            previous[number] = signal.signal(number, lambda received_number, frame: received.append(received_number))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for number in dict.fromkeys(received):
            signal.raise_signal(number)


@contextmanager
def terminate_as_exit() -> Iterator[None]:
    """While inside, SIGTERM and SIGHUP raise ``SystemExit(128 + signal)`` (the shell's status for them) in the main
    thread, so ``finally`` blocks remove the temporary files; Python's default for them ends the process without
    unwinding. A handler someone else installed is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for number in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(number) is signal.SIG_DFL:
            previous[number] = signal.signal(number, _exit_on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _exit_on_signal(number, frame):
    raise SystemExit(128 + number)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def exchange(first: Path, second: Path) -> bool:
    """Swap two existing paths in one step (``renameat2(..., RENAME_EXCHANGE)``); False where the C library or the
    file system does not offer it (the caller then renames twice).

    Raises:
        OSError: the exchange failed for another reason (permission, a full disk).
    """
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(second))


_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def fsync_folder(folder: Path) -> None:
    """fsync a folder, so the renames in it survive a power loss."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _fsync_tree(folder: Path) -> None:
    for root, _folders, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if not path.is_symlink():
                with open(path, "rb") as handle:
                    os.fsync(handle.fileno())
        fsync_folder(Path(root))


def hidden_name(name: str, kind: str) -> str:
    """The hidden name of a write's temporary folder or file beside ``name``: ``.`` + the first
    :data:`HIDDEN_NAME_BYTES` bytes of ``name`` + ``kind`` (:data:`BUILDING`, :data:`REPLACED`, :data:`WRITING`) +
    this host's tag, this process's pid and a random token, e.g. ``.gsm8k.verlfit-building-3fa2-4121-9c0e77d1``:
    short enough beside any legal name, and telling :func:`remove_stale` whose it is."""
    short = name.encode("utf-8", "surrogateescape")[:HIDDEN_NAME_BYTES].decode("utf-8", "ignore")
    return f".{short}{kind}{HOST_TAG}-{os.getpid()}-{secrets.token_hex(4)}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def remove_stale(folder: Path, say: Callable[[str], None] | None = None) -> list[Path]:
    """Remove from ``folder`` the hidden leftovers of verlfit writes whose process is gone (a SIGKILL, a power loss),
    each said on standard error (or to ``say``), and return them: a building folder or temporary file
    (:data:`BUILDING`, :data:`WRITING`) whole, since only verlfit wrote into it; a replaced output
    (:data:`REPLACED`) through :func:`remove_listed`, so a file someone added is kept, and only while the output it
    was replaced by is in place. Only names :func:`hidden_name` made on this host (:data:`HOST_TAG`) whose pid no
    longer runs are touched: a live or unknown writer's are left alone (a reused pid keeps a leftover, never
    the reverse).
    """
    say = say or (lambda line: print(line, file=sys.stderr))
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed  # not listable: the write that follows says why
    for entry in entries:
        match = _HIDDEN.fullmatch(entry.name)
        if match is None or match["host"] != HOST_TAG or _process_alive(int(match["pid"])):
            continue
        why = f"left by an interrupted verlfit write (process {match['pid']} is gone)"
        if match["kind"] == REPLACED:
            if not any(_replaced_by(child, match["name"]) for child in entries):
                continue
            marker, _ = read_marker(entry)
            if remove_listed(entry, marker or Marker("verlfit", None, {})):
                continue  # kept, with remove_listed's warning naming what stays
        elif entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
        removed.append(entry)
        say(f"verlfit: removed {entry}, {why}")
    return removed


def _replaced_by(child: Path, short: str) -> bool:
    """Whether ``child`` is an output a replaced folder's hidden name (keeping ``short`` of its name) can belong to."""
    return (
        not child.name.startswith(".")
        and child.name.encode("utf-8", "surrogateescape")[:HIDDEN_NAME_BYTES].decode("utf-8", "ignore") == short
        and child.is_dir()
    )


@contextmanager
def folder_locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` itself (no lock file is written): verlfit's switch-ins into one
    folder happen one at a time, so each can check the target and rename without another landing in between."""
    try:
        handle = os.open(folder, os.O_RDONLY)
    except PermissionError:  # a folder one may write but not list (mode -wx): written unlocked, as before the lock
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def blocking_parent(path: Path) -> str | None:
    """``"PARENT is KIND, not a folder"`` for the outermost parent of ``path`` that is there but is no folder one can
    go through (a file, a symbolic link loop, a dangling link: :func:`verlfit.input_files.kind_of`), else None."""
    for parent in reversed(Path(os.path.abspath(path)).parents):
        if os.path.lexists(parent):
            kind = kind_of(parent)
            if kind != "a folder":
                return f"{parent} is {kind}, not a folder"
    return None


@contextmanager
def printed_while_writing() -> Iterator[Callable[[str], None]]:
    """A ``log`` for a command that writes an output (``prepare-gsm8k``, ``prepare-data``): each line printed, until
    standard output fails (:class:`verlfit.errors.StandardOutputFailed`: ``| head -1`` closed the pipe,
    ``> /dev/full``); then the lines after are dropped and the work goes on, so the output is written whole, and the
    failure is raised when the block ends, for ``verlfit.cli.main`` to end with (141 for a closed pipe). An error of
    the block itself (a refusal, Ctrl-C) goes first: nothing was written then. A process killed meanwhile leaves the
    previous output, as :func:`write_folder` does (the new one is switched in whole or not at all)."""
    failures: list[StandardOutputFailed] = []

    def log(line: str) -> None:
        if failures:
            return
        try:
            print(line)
        except StandardOutputFailed as failure:
            failures.append(failure)

    yield log
    if failures:
        raise failures[0]


def write_error(output: Output, error: OSError, before: str = "; what was there before is unchanged") -> VerlfitError:
    """The error for an OSError while writing ``output``: permission (naming the nearest existing folder), a
    read-only file system or a full disk in the user's words, naming the output, then ``before`` (what is left as it
    was)."""
    where = next((folder for folder in (output.path, *output.path.parents) if folder.exists()), output.path)
    if error.errno in (errno.EACCES, errno.EPERM):
        cause = f"permission denied ({where} is not writable for this user)"
    elif error.errno == errno.EROFS:
        cause = f"{where} is on a read-only file system"
    elif error.errno == errno.ENOSPC:
        cause = f"no space left on the disk of {output.given}"
    elif error.errno in (errno.EEXIST, errno.ENOTDIR, errno.ELOOP) and blocking_parent(output.path):
        # a folder on the way is a file, a symbolic link loop or a dangling link: mkdir says only "File exists"
        cause = blocking_parent(output.path)
    else:
        cause = (error.strerror or str(error)) + (f" ({error.filename})" if error.filename else "")
    if error.errno == errno.ENOSPC:
        fix = f"free space on the disk of {output.given}, or pass {output.flag} on another disk"
    else:
        fix = f"pass {output.flag} a folder you can write (it is created if missing)"
    return VerlfitError(f"cannot write to {output.flag} {output.given}: {cause}{before}", fix=fix)


def prepare_parent(output: Output) -> list[Path]:
    """Create the output's missing parent folders and check a file can be created there; return the folders created
    (outermost first) for :func:`remove_created`. In a folder that was there, the leftovers of interrupted verlfit
    writes whose process is gone are removed first, each said (:func:`remove_stale`).

    Raises:
        VerlfitError: the folder cannot be created or written (:func:`write_error`), having created nothing.
    """
    parent = output.path.parent
    created = missing_parents(parent)
    if not created:
        remove_stale(parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        probe = parent / hidden_name(output.path.name, BUILDING)
        probe.mkdir()
        probe.rmdir()
    except OSError as error:
        refusal = write_error(output, error, before="")  # said before the folders it created go again
        remove_created(created)
        raise refusal from error
    return created


def write_folder(output: Output, build: Callable[[Path], T], created: list[Path] | None = None) -> T:
    """Build ``output`` whole beside its target and switch it in (the module docstring's *How*); return what
    ``build`` returned.

    Args:
        output: from :func:`check_output`.
        build: writes the folder's content into the (empty) folder it is given.
        created: the parent folders :func:`prepare_parent` created earlier (removed again on failure); default:
            this call creates and tracks them.

    Raises:
        VerlfitError: the folder cannot be written (:func:`write_error`), or someone wrote a file of their own into
            the target since :func:`check_output` (it is left as it is).
        Whatever ``build`` raises (KeyboardInterrupt included): the building folder and the parents created are
            removed, the target is as it was.
    """
    if created is None:
        created = prepare_parent(output)

    def switch_in(staging: Path) -> None:
        _fsync_tree(staging)
        _switch(output, staging)
        fsync_folder(output.path.parent)
        remove_stale(output.path.parent)  # a replaced output a killed write left, now that its successor is in place

    return _build_beside(output, build, created, marked=True, place=switch_in)


def _build_beside(
    output: Output, build: Callable[[Path], T], created: list[Path], marked: bool, place: Callable[[Path], None]
) -> T:
    """The staging both folder writers share: ``build`` into a hidden folder beside ``output``'s target (with the
    marker when ``marked``, the umask's modes), then ``place`` it; an OSError is :func:`write_error`'s, and on any
    failure the hidden folder is removed and, where the target is not there, the parents this write created."""
    target = output.path
    staging = None
    try:
        with terminate_as_exit():
            try:
                staging = target.parent / hidden_name(target.name, BUILDING)
                staging.mkdir()
                result = build(staging)
                if marked:
                    _write_marker(staging, output)
                share_as_umask(staging)
                place(staging)
                staging = None
            except OSError as error:
                raise write_error(output, error) from error
    except BaseException:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        if not target.exists():
            remove_created(created)
        raise
    return result


def _switch(output: Output, staging: Path) -> None:
    """Put ``staging`` at ``output.path``: a rename onto nothing or an empty folder; else an exchange with verlfit's
    earlier output (checked again first), whose listed files are then removed."""
    target = output.path
    with folder_locked(target.parent):
        owner = folder_owner(target)
        if owner.state == "foreign":
            raise _collided(
                f"{output.flag} {output.given} changed while verlfit was writing: it now holds files verlfit did "
                f"not write ({owner.reason}); nothing was replaced",
                fix=f"pass {output.flag} a new folder",
            )
        if (owner.state, owner.marker) != output.seen and not (
            owner.state in ("absent", "empty") and output.seen[0] in ("absent", "empty")
        ):
            now = (
                f"{owner.marker.written_by}"
                + (f" from {', '.join(owner.marker.inputs)}" if owner.marker.inputs else "")
                + " wrote it meanwhile"
                if owner.marker is not None
                else f"it is {owner.state.replace('-', ' ')} now"
            )
            raise _collided(
                f"{output.flag} {output.given} changed while {output.command} was writing it ({now}); nothing was"
                " replaced and this output is discarded",
                fix=f"run {output.command} again (it checks {output.flag} anew), or pass {output.flag} a new folder",
            )
        if owner.state in ("absent", "empty"):
            os.rename(staging, target)  # rename(2) replaces an empty folder in one step
            return
        _exchange_in(target, staging, owner)


def _exchange_in(target: Path, staging: Path, owner: FolderOwner) -> None:
    """Exchange ``staging`` with verlfit's earlier output at ``target`` and remove that output's listed files."""
    old = target.parent / hidden_name(target.name, REPLACED)
    with signals_held():  # a Ctrl-C here is delivered once the new folder is in place and the old one removed
        if exchange(staging, target):
            os.rename(staging, old)
        else:
            os.rename(target, old)
            os.rename(staging, target)
        remove_listed(old, owner.marker)


def remove_listed(folder: Path, marker: Marker) -> list[str]:
    """Remove from ``folder`` (verlfit's replaced output) the files its marker lists, unchanged, and the markers,
    then the folders that left empty; return what stays (relative paths): a file someone added since the check is
    never deleted, and the folder is kept, with a warning on stderr naming it."""
    for name in marker.files:
        path = folder / name
        if unchanged(path, marker.files[name]):
            path.unlink()
    for name in (MARKER_NAME, LEGACY_MARKER_NAME):
        (folder / name).unlink(missing_ok=True)
    for root, _folders, _files in sorted(os.walk(folder), key=lambda entry: -len(entry[0])):
        try:
            os.rmdir(root)
        except OSError:
            pass
    left = folder_files(folder) if folder.exists() else []
    if left:
        print(f"verlfit: warning: kept {folder}: it holds {_listed(left)}, not written by verlfit", file=sys.stderr)
    return left


def write_file(path: Path, content: bytes | str | Callable[[object], None], mode: int | None = None) -> None:
    """Write one file atomically: to a hidden temporary name in its folder, fsync-ed, given ``mode`` (default the
    umask's, as ``open`` gives), then renamed over ``path``. ``content`` is the bytes or text (UTF-8), or a function
    writing into the binary handle it is given (``Figure.savefig``).

    Raises:
        OSError: the write or the rename failed (a full disk: ``ENOSPC``); no temporary file is left and ``path``
            is as it was. The caller names the path and the fix.
    """
    path = Path(path)
    temporary = path.parent / hidden_name(path.name, WRITING)
    try:
        with open(temporary, "xb") as handle:
            if callable(content):
                content(handle)
            else:
                handle.write(content.encode("utf-8") if isinstance(content, str) else content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, umask_mode() if mode is None else mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_output_file(output: Output, content: bytes | str | Callable[[object], None]) -> None:
    """:func:`write_file` of a checked file output (bench's record), its missing parents created (and removed again
    when it fails).

    Raises:
        VerlfitError: the file cannot be written (:func:`write_error`).
    """
    created = prepare_parent(output)
    try:
        write_file(output.path, content)
    except OSError as error:
        remove_created(created)
        raise write_error(output, error) from error
    except BaseException:
        remove_created(created)
        raise


def build_new_folder(output: Output, build: Callable[[Path], T], marked: bool = False) -> T:
    """Build a folder that must not exist yet (a run directory, bench's model) whole under a hidden name beside it and
    rename it into place; with ``marked``, a marker listing its files. On failure nothing is left.

    Raises:
        VerlfitError: something appeared at the path meanwhile, or the folder cannot be written (:func:`write_error`).
    """

    def rename_into_place(staging: Path) -> None:
        with folder_locked(output.path.parent):
            if output.path.exists() or output.path.is_symlink():
                raise _collided(
                    f"{output.flag} {output.given} appeared while verlfit was building it",
                    fix=f"pass {output.flag} a new path",
                )
            os.rename(staging, output.path)

    return _build_beside(output, build, prepare_parent(output), marked=marked, place=rename_into_place)
