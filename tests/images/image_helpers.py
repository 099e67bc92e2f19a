"""Readers for the image recipes, shared by tests/images: Dockerfiles (through dockerfile-parse),
lock files, .dockerignore matching and shell-style expansion of ARG values.

Nothing here needs a Docker engine.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = {"p40": REPO / "Dockerfile.p40", "a10": REPO / "Dockerfile.a10"}
LOCKS = ("python.lock", "torch-cu118.lock", "torch-deps.lock", "common.lock", "a10-cu118.lock", "a10-extra.lock")
P40_LOCKS = LOCKS[:4]
VERL_COMMIT = "8d9e350ea58c7ad4b50dd14d9dcb50577242c55f"


def load_lock_tool():
    """docker/lock.py as a module (it is a script, not a package): the project's one lock-file reader."""
    spec = importlib.util.spec_from_file_location("verlfit_lock_tool", REPO / "docker" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK_TOOL = load_lock_tool()
canonical = LOCK_TOOL.canonical


@dataclass
class Instruction:
    """One Dockerfile instruction: ``keyword`` upper-case, ``value`` with line continuations joined."""

    keyword: str
    value: str
    line: int

    def mounts(self) -> list[dict[str, str]]:
        """The ``--mount=`` options of a RUN, each as a dict (``{"type": "cache", "target": ...}``)."""
        found = []
        for word in shlex.split(self.value):
            if not word.startswith("--mount="):
                if not word.startswith("--"):
                    break
                continue
            found.append(
                dict(part.split("=", 1) if "=" in part else (part, "") for part in word[len("--mount=") :].split(","))
            )
        return found

    def command(self) -> str:
        """A RUN's shell command without its ``--mount`` (and other ``--``) options."""
        words = self.value.split()
        while words and words[0].startswith("--"):
            words.pop(0)
        return " ".join(words)

    def pairs(self) -> dict[str, str]:
        """``KEY=value`` pairs of an ENV or LABEL instruction, quotes removed."""
        return dict(word.split("=", 1) for word in shlex.split(self.value))


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [instruction for instruction in self.instructions if instruction.keyword == keyword]

    def args(self) -> list[str]:
        return [instruction.value.split("=", 1)[0] for instruction in self.all("ARG")]


@dataclass
class Dockerfile:
    path: Path
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        return next(stage for stage in self.stages if stage.name == name)

    def instructions(self, keyword: str) -> list[Instruction]:
        return [instruction for stage in self.stages for instruction in stage.all(keyword)]


def parse_dockerfile(path: Path) -> Dockerfile:
    """Split a Dockerfile into its global ARGs (name -> default, as written) and its stages."""
    with open(path, "rb") as handle:
        structure = DockerfileParser(fileobj=handle, env_replace=False).structure
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in structure:
        if item["instruction"] == "COMMENT":
            continue
        instruction = Instruction(item["instruction"], item["value"], item["startline"] + 1)
        if instruction.keyword == "FROM":
            base, _, name = instruction.value.partition(" AS ")
            stages.append(Stage(name.strip(), base.strip()))
        elif not stages:
            assert instruction.keyword == "ARG", f"{path}:{instruction.line}: only ARG may come before the first FROM"
            name, _, default = instruction.value.partition("=")
            global_args[name] = default
        else:
            stages[-1].instructions.append(instruction)
    return Dockerfile(path, global_args, stages)


def shell_expand(text: str, variables: dict[str, str]) -> str:
    """Expand ``${NAME}``, ``${NAME:+word}`` and the like in ``text`` the way bash does (BuildKit's
    expansion of ARGs follows the same rules for these forms)."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **variables}
    result = subprocess.run(
        ["bash", "-c", 'printf %s "' + text.replace('"', '\\"') + '"'],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def resolved_args(dockerfile: Dockerfile, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Global ARG values after expansion (defaults may use earlier ARGs), with build-arg overrides."""
    values: dict[str, str] = {}
    for name, default in dockerfile.global_args.items():
        values[name] = (overrides or {}).get(name, shell_expand(default, values))
    return values


def read_lock(path: Path) -> dict[str, str]:
    """Pins of a lock file: {name as written: version}, read by docker/lock.py's parser."""
    return dict(LOCK_TOOL.parse_pins(Path(path).read_text()).values())


def lock_pins(*names: str) -> dict[str, str]:
    """Union of the named locks as {canonical name: version}."""
    pins: dict[str, str] = {}
    for name in names:
        pins.update(
            {
                package: version
                for package, (_, version) in LOCK_TOOL.parse_pins((REPO / "docker" / name).read_text()).items()
            }
        )
    return pins


def _pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as an anchored regex."""
    regex = ""
    index = 0
    while index < len(pattern):
        if pattern.startswith("**/", index):
            regex += "(?:.*/)?"
            index += 3
        elif pattern.startswith("**", index):
            regex += ".*"
            index += 2
        elif pattern[index] == "*":
            regex += "[^/]*"
            index += 1
        elif pattern[index] == "?":
            regex += "[^/]"
            index += 1
        else:
            regex += re.escape(pattern[index])
            index += 1
    return re.compile(regex + r"\Z")


def dockerignore_excludes(path: str, patterns: list[str]) -> bool:
    """Whether Docker leaves ``path`` (relative, with /) out of the build context: the last pattern
    that matches the path or one of its parent directories decides; ``!`` patterns re-include."""
    parts = path.split("/")
    candidates = ["/".join(parts[: index + 1]) for index in range(len(parts))]
    excluded = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        cleaned = os.path.normpath(pattern[1:] if negate else pattern).lstrip("/")
        regex = _pattern_regex(cleaned)
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not negate
    return excluded


def dockerignore_patterns() -> list[str]:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
