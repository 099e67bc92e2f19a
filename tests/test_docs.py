"""The docs against the code: docs/architecture.md's profile table is the profiles' own (docs/profile_table.py, over
every entrypoint/verlfit/profiles/*.yaml found), and its table of the keys the patch series adds names every such key.
"""

import importlib.util
import re
import subprocess
from pathlib import Path

import yaml

from verlfit.model_shape import BUILTIN_SHAPES, shape_from_config
from verlfit.overrides import KNOWN_ADDED_KEYS, SWITCH_ADDED_KEYS
from verlfit.profiles import parse_profile

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
PLAN = ROOT / "docs" / "plan.md"
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
        assert (
            rows["dtype"][column] == profile.dtype
            and rows["rollout"][column] == profile.rollout
            and rows["attention"][column] == profile.attention
        )
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
            text = text.replace(
                "- +actor_rollout_ref.rollout.cuda_graph=True", "- +actor_rollout_ref.rollout.cuda_graph=False"
            )
        (tmp_path / path.name).write_text(text, encoding="utf-8")
    changed = table.table(table.load_all(tmp_path))
    assert "| `+actor_rollout_ref.rollout.cuda_graph` | `False` | `True` with `--rollout hf` |" in changed
    doc = tmp_path / "architecture.md"
    doc.write_text("intro\n" + table.table() + "outro\n", encoding="utf-8")
    assert table.main(["--profiles", str(tmp_path), "--check", str(doc)]) == 1
    assert "the profile table differs from the profiles'" in capsys.readouterr().err
    assert table.main(["--profiles", str(tmp_path), "--write", str(doc)]) == 0
    assert doc.read_text(encoding="utf-8") == "intro\n" + changed + "outro\n"


def test_the_patch_keys_table_names_every_key_the_series_adds():
    # the keys patches/verl-0.4.1 add (verl 0.4.1 itself reads the fsdp_config ones and rollout.micro_batch_size)
    stock = {
        key for key in KNOWN_ADDED_KEYS if ".fsdp_config." in key or key == "actor_rollout_ref.rollout.micro_batch_size"
    }
    added = set(KNOWN_ADDED_KEYS) - stock
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text.split("## Keys added by patches/verl-0.4.1", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `\+([a-z_.]+)=", section, flags=re.M))
    assert documented == added
    assert set(SWITCH_ADDED_KEYS) <= documented
    # the stale statements of issue 28: CUDA-graph decoding is on in the p40 profile, patch 0023 has run on a GPU
    assert "opt-in in both profiles" not in text and "not yet measured on a GPU" not in text


# How the work was organised (numbered rounds, numbered device calls, sessions, machine time left) belongs in commit
# messages, not in what users read. The patterns name those accounts and leave the words' ordinary uses alone: "a
# function call", "generate calls", "round-robin", "rounds its base to bf16", "the time model" do not match.
ORGANISATION_PATTERNS = {
    "a numbered round": (
        r"\b(?:first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|next|this|that|each"
        r"|previous|last)\s+round\b|\bround\s+\d|\brounds of work\b"
    ),
    "a numbered call": (
        r"\bcalls?\s+\d|\bcall-(?:\d+|N)\b|\bdevice calls?\b"
        r"|\b(?:this|that|the next|each|the)\s+call's\s+(?:deadline|time|pack)\b"
    ),
    "a session": (
        r"\b(?:first|second|third|fourth|fifth|sixth|seventh|next|this|that|previous|last|same|each|per|device"
        r"|one)\s+(?:device\s+)?sessions?\b|\bsession\d|\bsessions\b|\bsession's\b"
    ),
    "machine time left": r"\b(?:device|machine)[- ]time\b|\btime (?:was )?left\b|\b\d+\s*s held\b|\bbudget_left\b",
    "a lent machine": r"\blent\b|\bon loan\b|\b(?:machine|GPU) was held\b",
    "the work's tracker": r"\bissue \d+|\bissue's\b|\bof the issue\b|\bthe issue asks\b",
    "a deadline of the work": r"\b(?:by|before) the deadline\b|\bthe deadline (?:came|cut|stopped)\b|\bdeadlines\b",
    "a try": r"\b(?:first|second|earlier) (?:try|attempt)\b",
}


def organisation_accounts(text: str) -> list[tuple[int, str, str]]:
    """(line number, pattern name, the words matched) for each account of how the work was organised in ``text``."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for name, pattern in ORGANISATION_PATTERNS.items():
            found += [(number, name, match.group(0)) for match in re.finditer(pattern, line, flags=re.IGNORECASE)]
    return found


def test_the_organisation_patterns_catch_the_accounts_and_spare_ordinary_words():
    accounts = (
        "## 9. Third round (2026-12-01, second session)",
        "main-ppo (calls 7 + 8)",
        "`call-4/soak-ppo.events`",
        "cut by the call's deadline",
        "1607 s held of the 1800",
        "no device time was left",
        "the fourth session's runs",
        "benchmarks/results/2026-12-01-h200-session3",
        "Rounds of work",
        "four sessions",
        "the lent GPU",
        "outlast the time the machine was held",
        "the 1.8x target of issue 13",
        "the +0.10 of the issue",
        "stopped by the deadline",
        "the deadline came first",
        "First try, from",
        "the same, an earlier attempt",
    )
    for text in accounts:
        assert organisation_accounts(text), text
    ordinary = (
        "a function call returns",
        "after each of the 8 generate calls",
        "torch hands out streams round-robin",
        "the 16-bit run rounds its frozen base to bf16",
        "the time model's estimate",
        "each call to generate",
        "pytest's session-scoped fixture",
        "SIGINT at the deadline",
        "stopped by `DEADLINE`",
        "verl issues #985",
        "a deadline stop",
        "the prevalent case",
        "an excellent fit",
        "the checkpoint was held in memory",
    )
    for text in ordinary:
        assert organisation_accounts(text) == [], text


def test_docs_readme_and_records_speak_of_the_project_not_of_how_the_work_was_organised():
    records = ROOT / "benchmarks" / "results"
    paths = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted(records.glob("*/README.md"))]
    assert len(paths) >= 10
    found = [
        f"{path.relative_to(ROOT)}:{number}: {name}: {words!r}"
        for path in paths
        for number, name, words in organisation_accounts(path.read_text(encoding="utf-8"))
    ]
    assert found == []


def test_results_folders_are_named_by_date_machine_and_what_ran():
    records = ROOT / "benchmarks" / "results"
    folders = sorted(path.name for path in records.iterdir() if path.is_dir())
    named = re.compile(r"\d{4}-\d{2}-\d{2}-(?:h100|h200)-[a-z0-9-]+")  # date, the GPU it ran on, what ran
    assert folders and all(named.fullmatch(name) for name in folders), folders
    inner = [
        path.relative_to(records).as_posix()
        for path in records.glob("*/*")
        if path.is_dir() and re.fullmatch(r"(?:call|machine|session)-?\d+|session\d*", path.name)
    ]
    assert inner == []


def test_the_built_in_shapes_table_is_model_shape_s():
    section = PLAN.read_text(encoding="utf-8").split("## 9. Built-in model shapes", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip() for cell in line.strip("|").split(" | ")]
        for line in section.splitlines()
        if line.startswith("| `")
    ]
    documented = {}
    for ids, *numbers in rows:
        for hub_id in re.findall(r"`([^`]+)`", ids):
            documented[hub_id] = numbers
    expected = {}
    for hub_id, config in BUILTIN_SHAPES.items():
        shape = shape_from_config(config, name=hub_id)
        expected[hub_id] = [
            shape.model_type,
            str(shape.num_layers),
            str(shape.hidden_size),
            str(shape.num_attention_heads),
            str(shape.num_key_value_heads),
            str(shape.head_dim),
            str(shape.intermediate_size),
            str(shape.vocab_size),
            "yes" if shape.tie_word_embeddings else "no",
            f"{shape.actor_parameters:,}",
        ]
    assert documented == expected
    assert documented["Qwen/Qwen2.5-0.5B-Instruct"][-1] == "494,032,768"  # the model card's total


def _readme_section(title: str) -> str:
    """The README's text from the heading ``## title`` to the next ``## `` heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def test_the_no_gpu_section_answers_what_a_newcomer_meets_there():
    """New-user trial of the README: the first dry run's "a real run would refuse its data" note
    had its fix only in the next section; the CPU eval used data/shelf before the section that makes it; models/tiny
    was left untracked; "never writes into the current directory" stood beside eval's default eval/ there."""
    section = _readme_section("Try it without a GPU or Docker")
    note = section.index("a real run would refuse its data")
    assert "verlfit prepare-gsm8k --input DIR --output data/gsm8k" in section[note : note + 600]
    eval_example = section.index("verlfit eval models/tiny --data data/shelf")
    assert "[Your own task](#your-own-task) made first" in section[:eval_example]
    assert "## Your own task" in (ROOT / "README.md").read_text(encoding="utf-8")
    ignored = subprocess.run(["git", "check-ignore", "-q", "models/tiny"], cwd=ROOT)
    assert ignored.returncode == 0, "models/ (the README's CPU-eval model) is not in .gitignore"
    outputs = _readme_section("The path: prepare, train, watch, export, eval, report")
    assert "never writes into the\ncurrent directory" not in outputs
    assert (
        "In the current directory\nitself verlfit writes only folders (the defaults `data/`, `runs/`, `eval/`)"
        in outputs
    )
