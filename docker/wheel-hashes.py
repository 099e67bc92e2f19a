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
  wheel-hashes.py first-download LOCK INDEX_URL SCRATCH RECORD
      LOCK pins packages from INDEX_URL; the ones without a ``--hash`` (no published sha256 was found: the PyTorch
      index's torchvision, torchaudio and xformers builds, docs/images.md "Hashes") get one here. When RECORD exists and
      pins the same versions, its hashes are used: they are enforced. Otherwise each unhashed pin is downloaded once
      (``pip download --no-deps``: the only pip run without hashes, as nothing is known to check it against) into
      SCRATCH, its sha256 computed and RECORD written (a lock with every pin hashed), and the computed hashes printed
      to add to LOCK. Prints RECORD's path; the caller runs ``pip wheel --require-hashes -r RECORD``.

Errors: a lock line that is not ``NAME==VERSION [--hash=sha256:HEX]...``, a folder with no wheels, or a RECORD that pins
other versions than LOCK (rewritten from a new first download, said on stderr) stop with a message naming the file.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
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


def render(pins: list[tuple[str, str, list[str]]]) -> str:
    return "".join(" \\\n".join([f"{name}=={version}", *(f"    --hash=sha256:{digest}" for digest in hashes)]) + "\n"
                   for name, version, hashes in pins)


def first_download(lock: Path, index_url: str, scratch: Path, record: Path) -> Path:
    """RECORD: LOCK's pins, each with its published hash or, where LOCK has none, the one computed on first download."""
    pins = read_pins(lock)
    if all(hashes for _, _, hashes in pins):
        return lock
    if record.is_file():
        recorded = read_pins(record)
        if [(canonicalize_name(n), v) for n, v, _ in recorded] == [(canonicalize_name(n), v) for n, v, _ in pins]:
            print(f"verlfit-build: {lock.name}: hashes of the first download enforced ({record})", file=sys.stderr)
            return record
        print(f"verlfit-build: {record} pins other versions than {lock}: downloading again", file=sys.stderr)
    completed = []
    for name, version, hashes in pins:
        if not hashes:
            folder = scratch / canonicalize_name(name)
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-input", "--disable-pip-version-check",
                            "--no-deps", "--only-binary=:all:", "--index-url", index_url, "--dest", str(folder),
                            f"{name}=={version}"], check=True, stdout=sys.stderr)  # stdout: RECORD's path alone
            hashes = [sha256(wheel) for wheel in sorted(folder.glob("*.whl"))]
            if not hashes:
                raise SystemExit(f"wheel-hashes.py: {name}=={version}: pip download left no wheel in {folder}")
            print(f"verlfit-build: {name}=={version}: no published sha256 in {lock.name}; computed on first download: "
                  + " ".join(f"--hash=sha256:{digest}" for digest in hashes)
                  + f" (enforced from now on; add it to docker/{lock.name})", file=sys.stderr)
        completed.append((name, version, hashes))
    record.parent.mkdir(parents=True, exist_ok=True)
    partial = record.with_name(record.name + ".partial")
    partial.write_text(f"# {lock.name} with the hashes computed on first download from {index_url}\n" + render(completed))
    os.replace(partial, record)
    return record


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
    if len(argv) == 5 and argv[0] == "first-download":
        lock, index_url, scratch, record = Path(argv[1]), argv[2], Path(argv[3]), Path(argv[4])
        print(first_download(lock, index_url, scratch, record))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
