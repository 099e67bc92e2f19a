"""What a check finds: :class:`CheckResult` (its name, PASS/WARN/FAIL/SKIP, one line of what was found, one line of
what to do). The checks return it; ``verlfit doctor`` lays every result out as its table (``PASS name: message``),
``verlfit train`` words a blocking FAIL as its error and the disk WARN as a note (:mod:`verlfit.train.preflight`).
"""

from __future__ import annotations

from dataclasses import dataclass

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome.

    Attributes:
        name: the check's name (one of :data:`verlfit.readiness.CHECK_NAMES`).
        status: ``"PASS"``, ``"WARN"``, ``"FAIL"`` or ``"SKIP"``.
        message: one line: what was found.
        fix: one line: what to do (None for PASS and most SKIPs).
        details: further lines under the message (e.g. one per GPU pair); usually empty.
    """

    name: str
    status: str
    message: str
    fix: str | None = None
    details: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
            "details": list(self.details),
        }
