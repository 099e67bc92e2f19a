"""The docs against the code: docs/architecture.md's profile table is the profiles' own (docs/profile_table.py, over
every entrypoint/verlfit/profiles/*.yaml found), and its table of the keys the patch series adds names every such key."""

import importlib.util
import re
from pathlib import Path

import yaml

from verlfit.overrides import KNOWN_ADDED_KEYS, SWITCH_ADDED_KEYS
from verlfit.profiles import parse_profile

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PROFILE_FILES = sorted((ROOT / "entrypoint" / "verlfit" / "profiles").glob("*.yaml"))


def _profile_table():
    spec = importlib.util.spec_from_file_location("profile_table", ROOT / "docs" / "profile_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc_rows(text: str) -> dict[str, list[str]]:
    """The generated table of a document: setting -> its cells, one per profile column (header row included as
    ``"setting"``)."""
    block = _profile_table().doc_table(text)
    assert block is not None, "docs/architecture.md has no profile table"
    rows = {}
    for line in block.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def test_the_architecture_table_is_the_profiles():
    table = _profile_table()
    assert table.doc_table(ARCHITECTURE.read_text(encoding="utf-8")) == table.table()
    assert table.main(["--check", str(ARCHITECTURE)]) == 0


def test_every_profile_and_every_override_it_sets_is_in_the_table():
    # read the YAML files directly (not through the generator), so a generator that skipped a profile or a key fails
    rows = _doc_rows(ARCHITECTURE.read_text(encoding="utf-8"))
    profiles = [parse_profile(yaml.safe_load(path.read_text(encoding="utf-8")), path.name) for path in PROFILE_FILES]
    assert len(profiles) >= 2 and sorted(rows["setting"]) == sorted(p.name for p in profiles)
    for profile in profiles:
        column = rows["setting"].index(profile.name)
        assert rows["dtype"][column] == profile.dtype and rows["rollout"][column] == profile.rollout and rows["attention"][column] == profile.attention
        for override in profile.overrides:
            key, _, value = override.partition("=")
            assert rows[f"`{key}`"][column] == f"`{value}`", (profile.name, override)
        for override in (*profile.hf_rollout_overrides, *profile.padded_training_overrides):
            key, _, value = override.partition("=")
            assert rows[f"`{key}`"][column].startswith(f"`{value}`"), (profile.name, override)


def test_a_changed_profile_fails_the_check(tmp_path, capsys):
    table = _profile_table()
    # the p40 profile before CUDA-graph decoding was turned on: the doc (which says True) no longer matches
    for path in PROFILE_FILES:
        text = path.read_text(encoding="utf-8")
        if path.name == "p40.yaml":
            text = text.replace("- +actor_rollout_ref.rollout.cuda_graph=True", "- +actor_rollout_ref.rollout.cuda_graph=False")
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    changed = table.table(table.load_all(tmp_path))
    assert "| `+actor_rollout_ref.rollout.cuda_graph` | `False` | - |" in changed
    doc = tmp_path / "architecture.md"
    doc.write_text("intro\n" + table.table() + "outro\n", encoding="utf-8")
    assert table.main(["--profiles", str(tmp_path), "--check", str(doc)]) == 1
    assert "the profile table differs from the profiles'" in capsys.readouterr().err
    assert table.main(["--profiles", str(tmp_path), "--write", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == "intro\n" + changed + "outro\n"

def test_the_patch_keys_table_names_every_key_the_series_adds():
    # the keys patches/verl-0.4.1 add (verl 0.4.1 itself reads the fsdp_config ones and rollout.micro_batch_size)
    stock = {key for key in KNOWN_ADDED_KEYS if ".fsdp_config." in key or key == "actor_rollout_ref.rollout.micro_batch_size"}
    added = set(KNOWN_ADDED_KEYS) - stock
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Keys added by patches/verl-0.4.1", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `\+([a-z_.]+)=", section, flags=re.M))
    assert documented == added
    assert set(SWITCH_ADDED_KEYS) <= documented
    # the stale statements of issue 28: CUDA-graph decoding is on in the p40 profile, patch 0023 has run on a GPU
    assert "opt-in in both profiles" not in text and "not yet measured on a GPU" not in text
