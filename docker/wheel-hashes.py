"""Hashed requirement files for the image's pip runs, so that every `pip install` and `pip wheel` of the build runs
with ``--require-hashes``.

Usage:
  wheel-hashes.py folder DIR
      print one ``NAME==VERSION --hash=sha256:...`` line for every wheel in DIR (name and version read from the wheel's
      file name, PEP 427, by packaging's ``parse_wheel_filename``; the sha256 of the file itself). The runtime stage
      installs a wheels folder from such a file with ``--no-index --require-hashes``: what it installs is exactly what
      the wheels stage downloaded and checked against the locks.
  wheel-hashes.py constraints LOCK...
      print ``NAME==VERSION`` for every pin of the LOCKs, without hashes: the image's PIP_CONSTRAINT file (a
      constraints file with hashes would put a user's every `pip install` into hash-checking mode).
  wheel-hashes.py index DIR
      move every wheel and sdist in DIR to DIR/simple/<project>/ (the project's normalized name, read from the file
      name by packaging's ``parse_wheel_filename`` / ``parse_sdist_filename``): a PEP 503 index any static web
      server serves (``python3 -m http.server``: its folder listings are the project pages pip reads).
  wheel-hashes.py hashed LOCK OUT
      write OUT: LOCK with every ``--hash=sha256:${NAME}`` (a pin of the PyTorch index whose sha256 is published
      nowhere: the A10 image's torchvision, torchaudio and xformers, docs/images.md "Hashes") replaced by the value of
      the environment variable NAME (the build argument of that name; a RUN sees its stage's ARGs as environment
      variables). Refuses a pin with no ``--hash`` and a NAME that is unset or not 64 lowercase hex digits, so no pip
      run of the build meets a pin it cannot check. OUT is written whole (a temporary file renamed) or not at all; the
      caller runs ``pip wheel --require-hashes -r OUT``. (pip expands ``${NAME}`` in requirement files itself, but
      leaves an unset one as it is and then reports a hash mismatch: this step says which build argument is missing.)

Errors: a lock line that is not ``NAME==VERSION [--hash=sha256:HEX]...``, a pin without a hash, a missing or malformed
build argument, or a folder with no wheels stop with a message naming the file, the pin and the fix.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import sys
from pathlib import Path

from pip._vendor.packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_requirements(folder: Path) -> list[str]:
    """``NAME==VERSION --hash=sha256:HEX`` for each wheel in ``folder``, sorted by file name."""
    wheels = sorted(folder.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"wheel-hashes.py: no wheels in {folder}")
    lines = []
    for wheel in wheels:
        name, version, _build, _tags = parse_wheel_filename(wheel.name)
        lines.append(f"{name}=={version} --hash=sha256:{sha256(wheel)}")
    return lines


def make_index(folder: Path) -> int:
    """Move each distribution file of ``folder`` into ``folder/simple/<project>/``; return how many were moved."""
    moved = 0
    for path in sorted(folder.iterdir()):
        if path.suffix == ".whl":
            name = parse_wheel_filename(path.name)[0]
        elif path.name.endswith((".tar.gz", ".zip")):
            name = parse_sdist_filename(path.name)[0]
        else:
            continue
        project = folder / "simple" / canonicalize_name(name)
        project.mkdir(parents=True, exist_ok=True)
        os.replace(path, project / path.name)
        moved += 1
    if not moved:
        raise SystemExit(f"wheel-hashes.py: no wheels or sdists in {folder}")
    return moved


def read_pins(lock: Path) -> list[tuple[str, str, list[str]]]:
    """The pins of a lock written by docker/lock.py: (name, version, sha256 digests) per ``NAME==VERSION`` line, its
    ``--hash`` continuation lines joined; comments and option lines (``--no-binary``) are skipped."""
    pins = []
    for logical in lock.read_text().replace("\\\n", " ").splitlines():
        words = shlex.split(logical, comments=True)
        if not words or words[0].startswith("-"):
            continue
        name, separator, version = words[0].partition("==")
        hashes = [word.removeprefix("--hash=sha256:") for word in words[1:] if word.startswith("--hash=sha256:")]
        if not separator or len(hashes) != len(words) - 1:
            raise SystemExit(f"wheel-hashes.py: {lock}: '{logical.strip()}' is not NAME==VERSION [--hash=sha256:HEX]...")
        pins.append((name, version, hashes))
    return pins


# a --hash value that names a build argument: pip's ${NAME} of requirement files (its pattern: capitals, digits, _)
BUILD_ARG_HASH = re.compile(r"--hash=sha256:\$\{([A-Z0-9_]+)\}")


def hashed_lock(lock: Path, environment: dict[str, str]) -> str:
    """LOCK's text with each ``--hash=sha256:${NAME}`` replaced by ``environment[NAME]``; every pin must carry a hash.

    Raises:
        SystemExit: a pin without ``--hash`` (naming the pin), or a NAME unset or not 64 lowercase hex digits (naming
            the pin, the build argument and how to give it).
    """
    text = lock.read_text()
    pins = read_pins(lock)
    hashless = [f"{name}=={version}" for name, version, hashes in pins if not hashes]
    if hashless:
        raise SystemExit(f"wheel-hashes.py: {lock}: {', '.join(hashless)} carries no --hash=sha256: no wheel is installed "
                         "without a hash written in the lock or given as a build argument (docs/images.md, 'Hashes')")
    owners = {digest: f"{name}=={version}" for name, version, hashes in pins for digest in hashes}
    problems = []
    for name in dict.fromkeys(BUILD_ARG_HASH.findall(text)):
        value = environment.get(name, "")
        if not re.fullmatch(r"[0-9a-f]{64}", value):
            given = f"got '{value}'" if value else "it is not set"
            problems.append(f"{owners.get('${' + name + '}', name)} takes its sha256 from the build argument {name}, and {given}")
    if problems:
        raise SystemExit(f"wheel-hashes.py: {lock}: " + "; ".join(problems) + ". No sha256 of these wheels is published: take it "
                         "once from a download you trust and pass it, 64 lowercase hex digits (make image-a10 "
                         + " ".join(f"{name}=<sha256>" for name in dict.fromkeys(BUILD_ARG_HASH.findall(text)))
                         + "; docs/images.md, 'A10 wheels')")
    return BUILD_ARG_HASH.sub(lambda match: f"--hash=sha256:{environment[match.group(1)]}", text)


def write_whole(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file in the same folder, renamed: whole or not at all."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "folder":
        print("\n".join(folder_requirements(Path(argv[1]))))
        return 0
    if len(argv) == 2 and argv[0] == "index":
        print(f"wheel-hashes.py: {make_index(Path(argv[1]))} files indexed under {argv[1]}/simple", file=sys.stderr)
        return 0
    if len(argv) >= 2 and argv[0] == "constraints":
        print("\n".join(f"{name}=={version}" for lock in argv[1:] for name, version, _ in read_pins(Path(lock))))
        return 0
    if len(argv) == 3 and argv[0] == "hashed":
        write_whole(Path(argv[2]), hashed_lock(Path(argv[1]), dict(os.environ)))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
