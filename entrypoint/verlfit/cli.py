"""The ``verlfit`` command: a small ``main`` that wires one module per subcommand.

Each subcommand module exposes ``register(subparsers) -> argparse.ArgumentParser``, which adds
its parser and sets ``func`` (a callable taking the parsed namespace and returning an exit
status). Modules are imported only when their subcommand runs or help is built, so
``verlfit prepare-gsm8k`` never imports torch.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import re
import sys

from verlfit import __version__
from verlfit.errors import StandardOutputFailed, VerlfitError, os_error_words

# subcommand name -> module that registers it (order is the order shown in --help)
SUBCOMMANDS: dict[str, str] = {
    "prepare-gsm8k": "verlfit.commands.prepare_gsm8k",
    "prepare-data": "verlfit.commands.prepare_data",
    "train": "verlfit.commands.train",
    "plan": "verlfit.commands.plan",
    "doctor": "verlfit.commands.doctor",
    "report": "verlfit.commands.report",
    "export": "verlfit.commands.export",
    "eval": "verlfit.commands.eval",
    "profiles": "verlfit.commands.profiles",
    "bench": "verlfit.commands.bench",
}


class _GuardedOutput:
    """``sys.stdout`` as :func:`main` hands it to a command: the same stream (every attribute is the stream's), whose
    ``write`` and ``flush`` raise :class:`StandardOutputFailed` where the stream raises ``OSError``. Text the stream's
    encoding cannot hold (a path ``ünï`` under ``PYTHONIOENCODING=ascii``) is written with backslash escapes
    (``\\xfc``), as Python writes standard error: never a traceback after the work is done."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError as unencodable:
                # a text stream encodes the whole text before writing any of it: nothing was written
                return self._stream.write(
                    text.encode(unencodable.encoding, "backslashreplace").decode(unencodable.encoding)
                )
        except OSError as error:
            raise StandardOutputFailed(error) from error

    def flush(self):
        try:
            return self._stream.flush()
        except OSError as error:
            raise StandardOutputFailed(error) from error

    def __getattr__(self, name):
        return getattr(self._stream, name)


def _silence_standard_output() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's last flush at exit has nowhere to fail (else it prints
    "Exception ignored ... BrokenPipeError"): the recipe of Python's signal module documentation (note on SIGPIPE)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno())
    except (OSError, AttributeError, ValueError):  # no file descriptor (a test's captured stream): nothing to flush
        pass


class VerlfitArgumentParser(argparse.ArgumentParser):
    """argparse's parser (the class of the top parser and so of every subcommand's), whose "expected one argument"
    says why when the value was there: argparse reads a value that starts with ``-`` (``--actor-lr -1e-6``,
    ``--output -dash``) as the next option, and the fix is to join it with ``=``."""

    words: list[str] | None = None  # the command line parsed (set by main), to show the joined form with its value

    def error(self, message: str):
        words = self.words if self.words is not None else sys.argv[1:]
        option = re.fullmatch(r"argument (?P<option>--[\w-]+)(?:/-\w)?: expected one argument", message)
        if option:
            name = option["option"]
            after = [words[i + 1] for i, word in enumerate(words[:-1]) if word == name]
            if after and after[-1].startswith("-"):
                message += (
                    f" ({after[-1]} starts with '-', so it reads as an option here: join it to the option, "
                    f"{name}={after[-1]})"
                )
        if asks_for_json(words):
            print_json_error(message, f"{self.prog} --help lists its options", 2)
        super().error(message)


def asks_for_json(words: list[str]) -> bool:
    """Whether the command line asks for JSON output (``--json`` before any ``--``, after which verl's overrides
    come)."""
    return "--json" in (words[: words.index("--")] if "--" in words else words)


def print_json_error(message: str, fix: str | None, exit_status: int) -> None:
    """A refusal or failure as the one JSON object a ``--json`` reader parses from standard output:
    ``{"error": message, "fix": fix or null, "exit_status": n}`` (the text goes to standard error as always)."""
    print(json.dumps({"error": message, "fix": fix, "exit_status": exit_status}))


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every subcommand registered."""
    parser = VerlfitArgumentParser(
        prog="verlfit",
        description=(
            "Run verl 0.4.1 PPO/GRPO on 24 GB-class GPUs (Tesla P40: compute capability 6.1; A10/L4: 8.6/8.9)."
        ),
        epilog=(
            "examples:\n"
            "  $ verlfit prepare-gsm8k --output data/gsm8k\n"
            "  $ verlfit train --profile p40 --dry-run\n"
            "  $ verlfit train --emulate p40 --steps 50\n"
            "  $ verlfit doctor\n"
            "\n"
            "exit status:\n"
            "  0  done\n"
            "  1  the work failed, or this machine cannot do it: training crashed, no usable GPU, a package or the\n"
            "     hub missing, a full disk (also plan's verdicts other than fits and doctor's FAIL lines)\n"
            "  2  refused before anything ran: an option, or a path or file the command line names, is wrong\n"
            "     (missing, unreadable, not what the command takes); the message names it and the fix\n"
            "  130 interrupted (Ctrl-C); 141 the reader of standard output went away (| head)\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"verlfit {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).register(subparsers)
    parser.commands = subparsers.choices  # name -> the subcommand's parser, for its own error messages
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``verlfit`` with ``argv`` (default ``sys.argv[1:]``); return the exit status.

    A :class:`VerlfitError` is printed as ``verlfit: error: <message>`` with its fix and turns into its exit code: 2 for
    a refusal of what the command line names (an option, a path, a file in it: missing, unreadable, malformed), as
    argparse's own usage errors; 1 for a failure of the work or the machine (training crashed, no usable GPU, a missing
    package, the hub unreachable, a full disk); ``build_parser``'s epilog (``verlfit --help``) and the README say the
    same. With ``--json`` on the command line, a refusal or failure (a usage error too) is also one JSON object on
    standard output (:func:`print_json_error`). Other exceptions propagate with their traceback. Ctrl-C is one line
    and status 130, also while the subcommands' modules are imported and when it lands in a library object's
    ``__del__`` as the command finishes (then what it wrote is complete). Standard output that fails is one line too:
    a reader that closed the pipe (``verlfit profiles | head -2``) ends the command quietly with 141 (128 + SIGPIPE,
    what a shell reports for a program killed by SIGPIPE); one that cannot take the text (``verlfit plan >
    /dev/full``) is said on standard error with status 1.
    """
    interrupts_in_cleanup: list[BaseException] = []
    default_hook = sys.unraisablehook
    standard_output = sys.stdout

    def quiet_interrupt(unraisable):
        # Ctrl-C landing in a library object's __del__ (a datasets Dataset freed as the command returns): Python
        # cannot raise it there and would print "Exception ignored ... KeyboardInterrupt" with a traceback, then exit 0
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            interrupts_in_cleanup.append(unraisable.exc_value)
        else:
            default_hook(unraisable)

    sys.unraisablehook = quiet_interrupt
    sys.stdout = _GuardedOutput(standard_output)
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            status = _parse_and_run(words)
            gc.collect()  # the command's objects freed now, while a Ctrl-C in their __del__ is still heard
        except VerlfitError as error:
            print(f"verlfit: error: {error}", file=sys.stderr)
            if asks_for_json(words):  # a --json reader gets an object on standard output, not nothing
                print_json_error(error.message, error.fix, error.exit_code)
            status = error.exit_code
        sys.stdout.flush()  # what print left in the buffer fails here, not in the interpreter's exit
    except KeyboardInterrupt:
        print("verlfit: interrupted", file=sys.stderr)
        return 130
    except StandardOutputFailed as failed:
        sys.stdout = standard_output
        _silence_standard_output()
        if isinstance(failed.error, BrokenPipeError):
            return 141  # the reader has what it wanted (head): nothing to say
        print(f"verlfit: error: cannot write to standard output: {os_error_words(failed.error)}", file=sys.stderr)
        return 1
    finally:
        sys.unraisablehook = default_hook
        sys.stdout = standard_output
    if interrupts_in_cleanup:
        print("verlfit: interrupted as it finished: what it wrote is complete", file=sys.stderr)
        return 130
    return status


def _parse_and_run(words: list[str]) -> int:
    """Build the parser, parse ``words`` (the command line after ``verlfit``) and run the subcommand; its exit status
    (2 with help when none is given)."""
    parser = build_parser()
    for each in (parser, *parser.commands.values()):
        each.words = words
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # said by the subcommand's parser, so the usage shown is that command's (argparse's top parser
        # would print `usage: verlfit COMMAND ...`)
        command_at = words.index(args.command) if args.command in words else len(words)
        before_command = any(word in unknown for word in words[:command_at])
        owner = parser if before_command else parser.commands.get(args.command, parser)
        owner.error(f"unrecognized arguments: {' '.join(unknown)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
