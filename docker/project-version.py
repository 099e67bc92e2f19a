"""Print verlfit's version, pyproject.toml's ``[project] version``, for the images' ``version`` label (make's
VERLFIT_VERSION, run with the host's ``python3``).

Usage: python3 docker/project-version.py [PYPROJECT]   (default: pyproject.toml)

Read with a TOML parser where the host has one: the standard library's ``tomllib`` (Python 3.11+), else ``tomli`` (the
same parser, packaged for older Pythons: python3-tomli on Ubuntu 22.04). Ubuntu 22.04's own python3 is 3.10 and has
neither by default, so as a last resort the ``[project]`` table's ``version = "..."`` line is read with a regular
expression: a plain basic string (PEP 440 versions need no escapes) on a line of its own, exactly once in that table.

Exit status 0 with the version on stdout; 1 with the reason on stderr when the file cannot be read or holds no such
version (make then leaves the label empty, as outside a checkout).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

try:
    import tomllib as toml_parser
except ImportError:  # Python 3.10
    try:
        import tomli as toml_parser
    except ImportError:  # neither: the regular expression below
        toml_parser = None

PROJECT_TABLE = re.compile(r"^\[project\][ \t]*(?:#.*)?$(?P<body>.*?)(?=^[ \t]*\[|\Z)", re.MULTILINE | re.DOTALL)
VERSION_LINE = re.compile(r"""^version[ \t]*=[ \t]*"(?P<version>[^"\\\n]+)"[ \t]*(?:#.*)?$""", re.MULTILINE)


def project_version(text: str) -> str:
    """``[project] version`` of pyproject.toml's ``text``. Raises ValueError (or the parser's TOMLDecodeError, a
    ValueError) naming what is missing."""
    if toml_parser is not None:
        version = toml_parser.loads(text).get("project", {}).get("version")
        if not isinstance(version, str):
            raise ValueError("no [project] version string")
        return version
    tables = PROJECT_TABLE.findall(text)
    if len(tables) != 1:
        raise ValueError(f"{len(tables)} [project] tables, expected one (read without a TOML parser: install tomli)")
    versions = VERSION_LINE.findall(tables[0])
    if len(versions) != 1:
        raise ValueError(f"{len(versions)} version = \"...\" lines in [project], expected one (install tomli)")
    return versions[0]


def main(argv: list[str]) -> int:
    path = Path(argv[0] if argv else "pyproject.toml")
    try:
        print(project_version(path.read_text(encoding="utf-8")))
    except (OSError, ValueError) as error:
        print(f"project-version.py: {path}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
