"""Command lines parsed as ``verlfit`` parses them, for tests that call a command's functions below
:func:`verlfit.cli.main`: :func:`parse_train` (the namespace of ``verlfit train ARGV``) and :func:`run_plan`
(``verlfit plan ARGV`` run with a given NVML, its exit status and printed text)."""

import argparse
import importlib
import io

from verlfit import cli


def parse_train(argv):
    """The namespace ``verlfit train ARGV`` parses into, by the parser of the module ``verlfit.cli`` registers for
    ``train``."""
    parser = argparse.ArgumentParser()
    importlib.import_module(cli.SUBCOMMANDS["train"]).register(parser.add_subparsers())
    return parser.parse_args(["train", *argv])


def run_plan(argv, nvml=None):
    """``verlfit plan ARGV`` with ``nvml`` answering for the GPUs (None: the real pynvml); (exit status, stdout)."""
    from verlfit.commands import plan as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    out = io.StringIO()
    status = command._run(parser.parse_args(["plan", *argv]), nvml=nvml, out=out)
    return status, out.getvalue()
