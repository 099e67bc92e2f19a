"""argparse ``type=`` functions for verlfit's numeric options: each returns the value or raises
``argparse.ArgumentTypeError``, which argparse prints as ``argument --OPTION: MESSAGE`` with exit status 2."""

from __future__ import annotations

import argparse
import math
from typing import Callable, TypeVar

Number = TypeVar("Number", int, float)


def parse_number(text: str, convert: Callable[[str], Number], what: str) -> Number:
    """``convert(text)``, or ArgumentTypeError ``'TEXT' is not WHAT`` (e.g. "a whole number")."""
    try:
        return convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def whole_number(text: str) -> int:
    """A whole number >= 1 (counts: steps, GPUs, prompts, tokens)."""
    value = parse_number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_number(text: str) -> float:
    """A finite number > 0 (learning rates, GiB)."""
    value = parse_number(text, float, "a number")
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text} must be a positive, finite number")
    return value


def memory_gib(text: str) -> float:
    """GPU memory in GiB, at least 1 (the CUDA context and any model need more; a P40 leaves 22.5)."""
    value = positive_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} GiB is less than 1 GiB: no verl worker runs in that (a P40 leaves 22.5)")
    return value


def timeout_seconds(text: str) -> float:
    """Seconds for a network check: more than 0 and at most 300."""
    value = parse_number(text, float, "a number of seconds")
    if not 0 < value <= 300:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"{text} must be more than 0 and at most 300 seconds")
    return value
