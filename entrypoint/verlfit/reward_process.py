"""The user's reward function, imported and called in a child process that verlfit can stop.

A reward function is the user's code: it may sleep or loop at import, start a non-daemon thread, ignore ``SIGALRM``,
call ``sys.exit`` / ``exit()`` / ``os._exit``, close ``sys.stdout`` or write files into the current directory. Run in
verlfit's own process, any of these hangs or ends the dry run, the doctor or eval, or touches the user's files. So
:class:`RewardProcess` runs it in a child Python (this interpreter, ``sys.executable``, with this process's
``sys.path``) that:

* starts in a scratch directory (``tempfile.mkdtemp``, removed afterwards) with no standard input, its standard
  output sent to verlfit's standard error (what the reward prints is seen, verlfit's own output stays clean), or with
  ``capture_output`` kept in a temporary file and summarised (:meth:`RewardProcess.printed`): the checks call it on
  every row, twice;
* imports the file as verl 0.4.1's ``get_custom_reward_fn`` does (``spec_from_file_location`` then
  ``exec_module``), with the file's folder first on ``sys.path`` as ``python FILE`` has it, so a helper module beside
  it imports;
* answers each request over a socket pair (``multiprocessing.connection``: pickled tuples); the parent waits for a
  reply at most the request's time limit, then kills the child's whole process group (``SIGKILL``: nothing the
  reward does can delay it) and raises :class:`RewardTimedOut`. A ``SystemExit`` in the reward becomes
  :class:`RewardExited`; a child that vanishes (``os._exit``, a crash) too, with its exit status or signal. An import
  or a call that leaves standard output or error closed (``sys.stdout.close()``, ``os.close(1)``) becomes
  :class:`RewardClosedOutput`.

The child side (:func:`serve`) imports only the standard library, so it starts in a tenth of a second. The messages
users read are composed by :mod:`verlfit.reward_function` from the exceptions here.
"""

from __future__ import annotations

import ctypes
import importlib.machinery
import importlib.util
import inspect
import json
import numbers
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from verlfit.errors import VerlfitError

# The keywords verl's naive reward manager passes (verl/workers/reward_manager/naive.py, NaiveRewardManager.__call__)
CALL_KEYWORDS = ("data_source", "solution_str", "ground_truth", "extra_info")
# Seconds the child Python may take to start and import this module before it answers (a fresh interpreter starts
# in ~0.1 s; 60 s covers a loaded 2-core machine). A bound verlfit sets.
START_TIME_LIMIT_S = 60.0
# The module name the file is imported under, as verl 0.4.1's get_custom_reward_fn names it (verl/trainer/ppo/
# reward.py: ``module = importlib.util.module_from_spec(spec)`` registered as ``custom_module``)
MODULE_NAME = "custom_module"
# The child's start: this process's sys.path (argv[1], JSON) first, then serve() on the inherited socket (argv[2])
_BOOTSTRAP = (
    "import json, sys\n"
    "sys.path[:] = json.loads(sys.argv[1])\n"
    "from verlfit.reward_process import serve\n"
    "serve(int(sys.argv[2]), int(sys.argv[3]))\n"
)
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class RewardTimedOut(Exception):
    """The reward did not answer within the request's time limit; the child was killed."""

    def __init__(self, seconds: float):
        super().__init__(f"no answer within {seconds:g} s")
        self.seconds = seconds


class RewardExited(Exception):
    """The reward ended its process; ``how`` says how, e.g. ``"SystemExit(0): sys.exit() or exit()"``,
    ``"exit status 3 without SystemExit: os._exit()"``, ``"killed by signal SIGSEGV"``."""

    def __init__(self, how: str):
        super().__init__(how)
        self.how = how


class RewardRaised(Exception):
    """The reward raised an exception in the child: its type's name, its text and, for a failed import, the line of
    the file it came from (None when unknown or a SyntaxError, whose text names the line)."""

    def __init__(self, type_name: str, text: str, line: int | None = None):
        super().__init__(f"{type_name}: {text}")
        self.type_name, self.text, self.line = type_name, text, line


class RewardRefused(Exception):
    """The file imported, but what it holds cannot be called as verl calls it: ``reason`` is ``"not_python"``,
    ``"no_function"`` (``detail``: the module's own functions), ``"not_callable"`` (``detail``: the attribute's type
    name) or ``"signature"`` (``detail``: Python's TypeError text)."""

    def __init__(self, reason: str, detail: Any = None):
        super().__init__(reason)
        self.reason, self.detail = reason, detail


class RewardClosedOutput(Exception):
    """The reward left its process's standard output or error closed, after its import or a call: ``closed`` names
    what, e.g. ``("sys.stdout",)``, ``("file descriptor 1 (standard output)",)``. verl's reward manager prints right
    after scoring (verl 0.4.1 ``naive.py``), which then fails."""

    def __init__(self, closed: tuple[str, ...] | list[str]):
        self.closed = tuple(closed)
        super().__init__(" and ".join(self.closed))


@dataclass(frozen=True)
class Returned:
    """A value the reward returned that is not plain data (:func:`_plain`): its ``repr`` and its type's name, made in
    the child."""

    text: str
    type_name: str

    def __repr__(self) -> str:
        return self.text


@dataclass(frozen=True)
class PrintedOutput:
    """What the reward printed to its standard output while checked: the number of lines and the first few
    (:data:`PRINTED_LINES_SHOWN`, each cut at :data:`PRINTED_LINE_CHARACTERS` characters)."""

    lines: int
    first: tuple[str, ...]


PRINTED_LINES_SHOWN = 3
PRINTED_LINE_CHARACTERS = 120


@dataclass(frozen=True)
class ImportedModules:
    """The modules the reward imported from its own folder (files, absolute; a package's ``__init__.py`` included),
    and the top-level names among them that another module of this Python also provides (which a copy first on
    ``PYTHONPATH`` would hide)."""

    files: tuple[Path, ...]
    shadowing: tuple[str, ...]


class RewardProcess:
    """A child Python holding one reward function, loaded by :meth:`load` and called like the function itself
    (keywords only; each call within ``call_time_limit_s`` seconds). A context manager: :meth:`close` on exit.

    Args:
        path: the reward file, absolute.
        name: the function's name in it.
        call_time_limit_s: seconds one call may take before the child is killed (:class:`RewardTimedOut`).
        capture_output: keep what the reward prints (standard output and error) in a temporary file instead of
            passing it to verlfit's standard error (a check calls it twice per row: a print in it would flood the
            terminal); :meth:`printed` summarises it, and :meth:`close` passes on what was never summarised (a failed
            check shows the reward's own prints, as an uncaptured run would).

    Raises (from :meth:`load` and calls): :class:`RewardTimedOut`, :class:`RewardExited`, :class:`RewardRaised`,
    :class:`RewardRefused`, :class:`RewardClosedOutput`; after any of them the child is gone and further calls raise
    the same kind again.
    ``VerlfitError`` when the child Python cannot start (exit status 1: verlfit's environment, not the reward).
    """

    def __init__(self, path: Path, name: str, call_time_limit_s: float, capture_output: bool = False):
        self.path, self.name, self.call_time_limit_s = Path(path), name, call_time_limit_s
        self.capture_output = capture_output
        self._output = None  # the open file the child prints into, with capture_output
        self._output_summarised = False
        self.scratch: Path | None = None
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self._ended: Exception | None = None  # what stopped the child; raised again by later requests

    def __enter__(self) -> RewardProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def start(self) -> None:
        """Start the child in a new scratch directory and wait for it to answer (:data:`START_TIME_LIMIT_S`)."""
        self.scratch = Path(tempfile.mkdtemp(prefix="verlfit-reward-check-"))
        if self.capture_output:
            # not in the scratch directory: the reward's own files there are its business
            self._output = tempfile.TemporaryFile(prefix="verlfit-reward-printed-")
        parent_end, child_end = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, json.dumps(sys.path), str(child_end.fileno()), str(os.getpid())],
                cwd=self.scratch,
                stdin=subprocess.DEVNULL,
                stdout=self._output if self._output is not None else _error_stream(),
                stderr=subprocess.STDOUT if self._output is not None else None,  # captured: both streams, in order
                pass_fds=[child_end.fileno()],
                start_new_session=True,  # its own process group: killed whole, and the terminal's Ctrl-C is verlfit's
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        finally:
            child_end.close()
        self._connection = Connection(parent_end.detach())
        try:
            self._request(None, START_TIME_LIMIT_S)
        except (RewardTimedOut, RewardExited) as error:
            raise VerlfitError(
                f"the Python process that checks the reward function ({sys.executable}) did not start: {error}",
                fix="check that this Python runs (`python -c 'import verlfit'`), then run the command again",
            ) from error

    def load(self, import_time_limit_s: float) -> None:
        """Start the child (unless started) and import the reward file in it within ``import_time_limit_s`` seconds,
        checking that the function exists, is callable and takes verl's keywords (:data:`CALL_KEYWORDS`)."""
        if self._process is None:
            self.start()
        self._request(("load", str(self.path), self.name), import_time_limit_s)

    def __call__(self, **keywords) -> Any:
        """The function's return value for ``keywords`` as plain data (:func:`_plain`; a :class:`Returned` where it is
        not)."""
        return self._request(("call", keywords), self.call_time_limit_s)

    def imported_modules(self) -> ImportedModules:
        """The modules the reward imported so far from its own folder (:class:`ImportedModules`)."""
        return self._request(("modules",), START_TIME_LIMIT_S)

    def printed(self) -> PrintedOutput:
        """What the reward printed so far (with ``capture_output``; none without it)."""
        self._output_summarised = True
        if self._output is None:
            return PrintedOutput(0, ())
        self._output.seek(0)
        lines = self._output.read().decode("utf-8", errors="replace").splitlines()
        first = tuple(line[:PRINTED_LINE_CHARACTERS] for line in lines[:PRINTED_LINES_SHOWN])
        return PrintedOutput(len(lines), first)

    def save_printed(self, path: Path) -> None:
        """Copy what the reward printed so far (with ``capture_output``) into the file ``path``, whole; it counts as
        summarised (:meth:`close` does not pass it on)."""
        self._output_summarised = True
        if self._output is None:
            return
        self._output.seek(0)
        with open(path, "wb") as handle:
            shutil.copyfileobj(self._output, handle)

    def close(self) -> None:
        """Kill the child's process group (whatever threads or processes the reward left), wait for it, pass on what
        it printed if never summarised (:meth:`printed`), and remove the scratch directory with anything written
        there."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._process is not None:
            _kill_group(self._process)
            self._process = None
        if self._output is not None:
            if not self._output_summarised:
                self._output.seek(0)
                sys.stderr.write(self._output.read().decode("utf-8", errors="replace"))
                sys.stderr.flush()
            self._output.close()
            self._output = None
        if self.scratch is not None:
            # verlfit's own temporary folder: what the reward left there (even unreadable) is not the user's to keep
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def _request(self, request: tuple | None, seconds: float) -> Any:
        """Send ``request`` (None: only wait for the child's greeting) and return the answer's value, or raise what
        the answer or the child's end says."""
        if self._ended is not None:
            raise self._ended
        if self._connection is None:
            raise RuntimeError("the reward process is not started")
        try:
            if request is not None:
                self._connection.send(request)
            if not self._connection.poll(seconds):
                raise RewardTimedOut(seconds)
            kind, *value = self._connection.recv()
        except RewardTimedOut as error:
            self._end(error)
            raise
        except (EOFError, OSError) as gone:  # the child ended without answering: os._exit, a crash, a kill
            error = RewardExited(_exit_words(_kill_group(self._process)))
            self._end(error)
            raise error from gone
        if kind == "ok":
            return value[0]
        error = {
            "raised": RewardRaised,
            "refused": RewardRefused,
            "exited": RewardExited,
            "closed_output": RewardClosedOutput,
        }[kind](*value)
        if kind == "exited":
            self._end(error)
        raise error

    def _end(self, error: Exception) -> None:
        self._ended = error
        self.close()


def _error_stream():
    """verlfit's standard error as a file descriptor for the child's standard output, or None (inherit standard
    output) where it has none (a replaced ``sys.stderr``)."""
    try:
        return sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def _kill_group(process: subprocess.Popen) -> int:
    """SIGKILL ``process``'s process group (it leads one: ``start_new_session``) and return its exit status."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # the group is gone already: it exited by itself
    return process.wait()


def _exit_words(status: int) -> str:
    """How a child that vanished ended: ``"exit status 3 without SystemExit: os._exit()"``, ``"killed by signal
    SIGSEGV"``."""
    if status < 0:
        return f"killed by signal {signal.Signals(-status).name}"
    return f"exit status {status} without SystemExit: os._exit()"


# ---- the child's side: standard library only -------------------------------------------------------------------


def serve(descriptor: int, parent: int | None = None) -> None:
    """The child's loop: greet, then answer requests from the connection on file descriptor ``descriptor`` until it
    closes; then end at once (``os._exit``: a non-daemon thread the reward started cannot keep it alive). Killed with
    its parent process ``parent`` (Linux's ``PR_SET_PDEATHSIG``), so a verlfit ended by SIGTERM or SIGKILL does not
    leave a reward sleeping at import behind."""
    _die_with_parent(parent)
    connection = Connection(descriptor)
    connection.send(("ok", None))
    state: dict[str, Any] = {}
    while True:
        try:
            request = connection.recv()
        except (EOFError, OSError):
            os._exit(0)
        connection.send(_answer(request, state))


def _die_with_parent(parent: int | None) -> None:
    """Ask Linux to SIGKILL this process when its parent ends; end now if ``parent`` has ended already. Elsewhere (no
    ``prctl``) the child ends when its connection closes, once the reward returns."""

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _plain(value: Any) -> Any:
    """``value`` as the parent can read it without the reward's modules: None, bools, strings and bytes as they are,
    real numbers as ``int``/``float``, dicts, lists and tuples element by element, a one-element array or tensor
    (``.item()``: numpy, torch) as its number, as verl's ``reward_tensor[i, j] = reward`` takes it; anything else as a
    :class:`Returned` (its ``repr`` and type name). Unpickling the reward's own objects in the parent needed the
    reward's modules (a class of its own: ``ModuleNotFoundError``) or torch's shared-memory handshake (a tensor:
    ``AuthenticationError``), which the check then reported as if the reward had raised them."""
    if value is None or isinstance(value, (bool, str, bytes)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, dict):
        return {key if isinstance(key, (str, int)) else repr(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value) if type(value) in (list, tuple) else list(map(_plain, value))
    item, size = getattr(value, "item", None), getattr(value, "size", None)
    count = value.numel() if callable(getattr(value, "numel", None)) else size if isinstance(size, int) else None
    if callable(item) and count == 1:
        try:
            number = item()
        except Exception:  # noqa: BLE001 - an object whose item() fails is reported by its repr below
            number = None
        if isinstance(number, numbers.Real) and not isinstance(number, bool):
            return float(number)
    return Returned(repr(value)[:200], type(value).__name__)


def _closed_output() -> list[str]:
    """What of this process's standard output and error is closed: ``sys.stdout`` / ``sys.stderr`` (a stream whose
    ``closed`` is true; None is not closed: print() then writes nothing), file descriptors 1 and 2."""
    closed = [f"sys.{name}" for name in ("stdout", "stderr") if getattr(getattr(sys, name), "closed", False) is True]
    for descriptor, stream in ((1, "standard output"), (2, "standard error")):
        try:
            os.fstat(descriptor)
        except OSError:
            closed.append(f"file descriptor {descriptor} ({stream})")
    return closed


def _answer(request: tuple, state: dict) -> tuple:
    kind = request[0]
    try:
        if kind == "load":
            state["function"], state["path"] = _load(Path(request[1]), request[2]), Path(request[1])
            closed = _closed_output()
            return ("closed_output", closed) if closed else ("ok", None)
        if kind == "call":
            value = _plain(state["function"](**request[1]))
            closed = _closed_output()
            return ("closed_output", closed) if closed else ("ok", value)
        if kind == "modules":
            return ("ok", _imported_modules(state["path"]))
        raise ValueError(f"unknown request {kind!r}")
    except SystemExit as error:
        return ("exited", f"SystemExit({error.code!r}): sys.exit() or exit()")
    except RewardRefused as refused:
        return ("refused", refused.reason, refused.detail)
    except BaseException as error:  # the reward's own exception, reported with its type, text and line
        # the line in the file, for an import (a SyntaxError's text names its line already)
        line = _line_in(error, Path(request[1])) if kind == "load" and not isinstance(error, SyntaxError) else None
        return ("raised", type(error).__name__, _text(error), line)


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # a user's exception whose __str__ fails
        return f"<{type(error).__name__} whose text cannot be shown>"


def _line_in(error: BaseException, path: Path) -> int | None:
    """The line of the deepest frame of ``error``'s traceback in ``path``, else None."""
    line = None
    for frame, number in traceback.walk_tb(error.__traceback__):
        if Path(frame.f_code.co_filename) == path:
            line = number
    return line


def _load(path: Path, name: str):
    """Import ``path`` as verl does, its folder first on ``sys.path``, and return its attribute ``name`` once it is a
    callable taking verl's keywords; else raise :class:`RewardRefused`."""
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(MODULE_NAME, path)
    if spec is None or spec.loader is None:
        raise RewardRefused("not_python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[MODULE_NAME] = module
    spec.loader.exec_module(module)
    if not hasattr(module, name):
        functions = sorted(
            key for key, value in vars(module).items() if inspect.isfunction(value) and value.__module__ == MODULE_NAME
        )
        raise RewardRefused("no_function", functions)
    function = getattr(module, name)
    if not callable(function):
        raise RewardRefused("not_callable", type(function).__name__)
    try:
        inspect.signature(function).bind(**{keyword: None for keyword in CALL_KEYWORDS})
    except TypeError as error:
        raise RewardRefused("signature", str(error)) from error
    except ValueError:
        pass  # a builtin without a readable signature: the calls on real rows decide
    return function


def _imported_modules(path: Path) -> ImportedModules:
    """The modules in ``sys.modules`` whose top-level module lives in ``path``'s folder (``NAME.py`` or ``NAME/``),
    other than the reward file itself; and which of their top-level names another ``sys.path`` entry provides too. When
    there are any, the folder goes on verl's PYTHONPATH, so the reward file's own name is checked too (a reward named
    ``random.py`` would then be every ``import random`` of verl's processes)."""
    folder = path.parent
    files, tops = set(), set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or name == MODULE_NAME:
            continue
        top = name.split(".")[0]
        file = Path(file)
        if file == folder / f"{top}.py" or (folder / top / "__init__.py").is_file() and folder / top in file.parents:
            files.add(file)
            tops.add(top)
    others = [entry for entry in sys.path if entry and Path(entry).resolve() != folder.resolve()]
    if files:
        tops.add(path.stem)
    shadowing = sorted(
        top
        for top in tops
        if top in sys.builtin_module_names or importlib.machinery.PathFinder.find_spec(top, others) is not None
    )
    return ImportedModules(tuple(sorted(files)), tuple(shadowing))
