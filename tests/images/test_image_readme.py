"""README.md against the records it summarises: the results paragraph says what docs/benchmarks.md
says (the machine, the torch, the weights, the learning check's model), it claims nothing of
docs/images.md that is not there, and the developer path names its prerequisites."""

from __future__ import annotations

import re

from image_helpers import REPO

README = (REPO / "README.md").read_text()
BENCHMARKS = (REPO / "docs" / "benchmarks.md").read_text()
IMAGES = (REPO / "docs" / "images.md").read_text()


def section(text: str, heading: str) -> str:
    start = text.index(heading)
    following = re.search(r"^#{1,3} ", text[start + len(heading):], re.MULTILINE)
    return text[start: start + len(heading) + (following.start() if following else len(text))]


def flat(text: str) -> str:
    return " ".join(text.split())


def test_results_paragraph_says_what_the_benchmarks_record():
    results = flat(section(README, "### What it does on a GPU"))
    machine = re.search(r"\*\*Machine:\*\* the lent GPU, one NVIDIA (H200) .*?, torch (\S+),", flat(BENCHMARKS))
    assert machine.groups() == ("H200", "2.11.0+cu130")
    assert "on one H200 standing in for a P40 (`--emulate p40`" in results
    assert "with torch 2.11.0+cu130 and verl 0.4.1 from PyPI with the patch series applied, not the image's torch 2.6.0+cu118" in results
    assert "text it generates is noise, so every GSM8K reward is 0" in flat(BENCHMARKS)
    assert "The 0.5B runs use **random weights** with the exact Qwen2.5-0.5B-Instruct shape" in results
    assert "**every GSM8K reward is 0**" in results
    assert "a small Qwen2 (4 layers, hidden 256" in flat(BENCHMARKS)
    assert "The learning check is a different, **4-layer Qwen2 (hidden 256)**, first warmed up" in results
    # every number the paragraph quotes from the learning check and section 1 is in the record
    for number in ("21x", "+0.148", "+0.199", "0.320 -> 0.469", "0.320 -> 0.520", "13.5 s", "50 of 50"):
        assert number in results, number
        assert number in flat(BENCHMARKS) or number.replace(" -> ", "") in BENCHMARKS or f"| {number.split()[0]}" in BENCHMARKS, number


def test_readme_claims_of_images_md_hold():
    images_line = flat(section(README, "## Images"))
    assert "the A10 wheels' checksums, the full pin list" not in images_line
    assert "how to get and check the A10 wheels' checksums (their projects publish none, so none ships here)" in images_line
    a10_wheels = section(IMAGES, "### A10 wheels")
    assert re.findall(r"\b[0-9a-f]{64}\b", a10_wheels) == []  # it tells how to get them; it has none
    assert "Take them once, from a machine you trust, and keep them" in a10_wheels
    assert "### Hashes" in IMAGES and "### A second source for the base images: NVIDIA's registry" in IMAGES


def test_developer_prerequisites_are_named():
    developing = flat(section(README, "## Developing"))
    for needed in ("Python 3.10–3.12 with its `venv` module", "`python3-venv`", "GNU `patch`", "`curl`", "`gcc`",
                   "PYTHON=python3.12 make test", "`TORCH_INDEX_URL` (default `https://download.pytorch.org/whl/cpu`)"):
        assert needed in developing, needed
