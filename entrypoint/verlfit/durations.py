"""Durations as verlfit prints them: one short form for every progress line, ETA and report.

A ground-floor module (it imports nothing of verlfit): the training progress (:mod:`verlfit.progress`), the report
(:mod:`verlfit.report`) and the reward check's progress (:class:`verlfit.reward_function.CheckProgress`) all say how
long something took or has left in the same words.
"""

from __future__ import annotations


def format_duration(seconds: float) -> str:
    """``34`` -> ``"34s"``, ``301`` -> ``"5m01s"``, ``7500`` -> ``"2h05m"``: whole seconds (rounded) under a minute,
    minutes and seconds under an hour, hours and minutes beyond; a negative number of seconds is ``"0s"``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
