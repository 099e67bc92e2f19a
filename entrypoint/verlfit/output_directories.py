"""The directories a command creates for its output, and taking them back when it fails.

``export``, ``eval`` and ``prepare-gsm8k`` create their output folders (and missing parents) before writing;
when the write fails they remove what they created, and never a directory that existed before or that someone
else has written into since.
"""

from __future__ import annotations

from pathlib import Path


def missing_parents(directory: Path) -> list[Path]:
    """The directories of ``directory`` and its parents that do not exist yet, outermost first."""
    missing = []
    for candidate in (directory, *directory.parents):
        if candidate.exists() or candidate.is_symlink():
            break
        missing.append(candidate)
    return missing[::-1]


def remove_created(created: list[Path]) -> None:
    """Remove the directories a command created (``missing_parents`` before it made them), innermost first, each
    only while empty."""
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:
            break  # not empty (someone else wrote there) or already gone: leave it and its parents
