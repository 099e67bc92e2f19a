"""verlfit.checkpoints: --keep-checkpoints holds across resumes (issue 17: the 500-step soak of 2026-12-01 left ten
global_step folders with --keep-checkpoints 2, because verl prunes only its own session's saves)."""

import io
import json
import shutil
import sys
from pathlib import Path

import pytest

from stand_in_verl_saves import verl_alone
from verlfit.checkpoints import CheckpointKeeper, checkpoints_to_prune, latest_checkpoint, prune, remove_cut_short
from verlfit.run_settings import TrainSettings
from verlfit.train.launch_plan import LaunchPlan
from verlfit.train.supervise import launch

HERE = Path(__file__).parent
# The soak's sessions (benchmarks/results/2026-12-01-h200-p40-optimisations-alone-soak/soak-to-the-end/soak-ppo.events):
# Ctrl-C at step 150, a
# call deadline's Ctrl-C at 255 (resumed from 250), SIGKILL of the whole run at 301 (resumed from 300), then to 500.
SOAK_SESSIONS = [(0, 150), (150, 255), (250, 301), (300, 500)]


def layout(checkpoints: Path) -> dict[str, list[str]]:
    """global_step_N -> its entries, sorted (what is left of each checkpoint)."""
    return {
        p.name: sorted(c.name for c in p.iterdir())
        for p in sorted(checkpoints.iterdir(), key=lambda p: p.name)
        if p.is_dir()
    }


def steps_left(checkpoints: Path) -> list[int]:
    return sorted(int(p.name.rpartition("_")[2]) for p in checkpoints.glob("global_step_*"))


def test_verl_alone_leaves_what_the_soak_left(tmp_path):
    """The stand-in reproduces the device record: ten folders, whole checkpoints at 100-300 and 450-500, the rest
    holding only data.pt (verl removed their actor/ and critic/)."""
    checkpoints = verl_alone(SOAK_SESSIONS, save_freq=50, keep=2, root=tmp_path, last=500)
    assert steps_left(checkpoints) == [50, 100, 150, 200, 250, 300, 350, 400, 450, 500]
    whole = [s for s in steps_left(checkpoints) if (checkpoints / f"global_step_{s}" / "actor").is_dir()]
    assert whole == [100, 150, 200, 250, 300, 450, 500]
    assert layout(checkpoints)["global_step_50"] == ["data.pt"]
    assert checkpoints_to_prune(checkpoints, 2) == [50, 100, 150, 200, 250, 300, 350, 400]


def make(checkpoints: Path, whole: list[int], husks: list[int] = (), marker: int | None = None) -> None:
    for step in whole:
        (checkpoints / f"global_step_{step}" / "actor").mkdir(parents=True)
        (checkpoints / f"global_step_{step}" / "data.pt").write_bytes(b"d")
    for step in husks:
        (checkpoints / f"global_step_{step}").mkdir(parents=True)
        (checkpoints / f"global_step_{step}" / "data.pt").write_bytes(b"d")
    if marker is not None:
        (checkpoints / "latest_checkpointed_iteration.txt").write_text(f"{marker}\n")


def test_what_is_pruned(tmp_path):
    checkpoints = tmp_path / "run" / "checkpoints"
    make(checkpoints, whole=[10, 20, 30, 50], husks=[40], marker=30)
    (checkpoints / "global_step_x").mkdir()
    assert checkpoints_to_prune(checkpoints, 2) == [10]  # 40 and 50 are above the marker: a save in progress
    assert checkpoints_to_prune(checkpoints, 3) == []
    assert checkpoints_to_prune(checkpoints, 0) == []  # --keep-checkpoints 0: keep all
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("40")
    assert checkpoints_to_prune(checkpoints, 2) == [10]  # the marker's own step stays, whole or not
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("35")
    assert (
        checkpoints_to_prune(checkpoints, 2) == []
    )  # the marker's folder is gone: verl starts over, keep what is there
    (checkpoints / "latest_checkpointed_iteration.txt").unlink()
    assert checkpoints_to_prune(checkpoints, 2) == []  # no marker: nothing is settled


def test_prune_removes_and_an_interrupted_removal_is_finished_next_time(tmp_path, monkeypatch):
    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    make(checkpoints, whole=[1, 2, 3, 4], marker=4)
    real_rmtree = shutil.rmtree
    calls = []

    def cut(path, *args, **kwargs):  # the removal is cut off after the rename (a Ctrl-C, a power cut)
        calls.append(Path(path).name)
        raise KeyboardInterrupt

    monkeypatch.setattr(shutil, "rmtree", cut)
    with pytest.raises(KeyboardInterrupt):
        prune(run, 2)
    assert calls == [".removing-global_step_1"]
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        ".removing-global_step_1",
        "global_step_2",
        "global_step_3",
        "global_step_4",
        "latest_checkpointed_iteration.txt",
    ]
    assert latest_checkpoint(run) == 4
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    assert prune(run, 2) == [checkpoints / "global_step_2"]
    assert sorted(p.name for p in checkpoints.iterdir()) == [
        "global_step_3",
        "global_step_4",
        "latest_checkpointed_iteration.txt",
    ]


def test_remove_cut_short(tmp_path):
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[2, 4], husks=[6], marker=2)
    assert remove_cut_short(run) == [run / "checkpoints" / "global_step_4", run / "checkpoints" / "global_step_6"]
    assert steps_left(run / "checkpoints") == [2]


def test_keeper_prunes_when_the_marker_moves_and_says_so(tmp_path):
    run = tmp_path / "run"
    checkpoints = run / "checkpoints"
    make(checkpoints, whole=[5, 10], marker=10)
    said, now = [], [0.0]
    keeper = CheckpointKeeper(run, 2, said.append, interval=1.0, clock=lambda: now[0])
    assert keeper.check(force=True) == [] and said == []
    make(checkpoints, whole=[15], marker=15)
    now[0] = 0.5
    assert keeper.check() == []  # within the interval: not looked at
    now[0] = 1.5
    assert keeper.check() == [checkpoints / "global_step_5"]
    assert said == ["verlfit: removed global_step_5 (--keep-checkpoints 2; kept: global_step_10, global_step_15)"]
    now[0] = 3.0
    assert keeper.check() == []  # the marker did not move


def test_keeper_says_a_failed_removal_once_and_stops(tmp_path, monkeypatch):
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[5, 10, 15], marker=15)
    said = []
    keeper = CheckpointKeeper(run, 2, said.append)

    def refuse(self, target):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "rename", refuse)
    assert keeper.check(force=True) == []
    make(run / "checkpoints", whole=[20], marker=20)
    assert keeper.check(force=True) == []
    assert said == [
        f"verlfit: could not remove old checkpoints of {run} for --keep-checkpoints 2: [Errno 13] Permission denied:"
        f" '{run / 'checkpoints' / 'global_step_5'}'; they stay on disk (nothing is lost) and verlfit stops pruning for"
        " this session: delete the global_step_N folders you do not need"
    ]
    assert steps_left(run / "checkpoints") == [5, 10, 15, 20]


def stand_in_plan(run_dir: Path, start: int, end: int, keep: int, kill: bool = False) -> LaunchPlan:
    settings = TrainSettings(run_dir=str(run_dir), steps=500, save_freq=50, keep_checkpoints=keep, resume=start > 0)
    command = [
        sys.executable,
        str(HERE / "stand_in_verl_saves.py"),
        str(run_dir),
        "--start",
        str(start),
        "--end",
        str(end),
        "--last",
        "500",
        "--save-freq",
        "50",
        "--keep",
        str(keep),
    ] + (["--kill"] if kill else [])
    return LaunchPlan(
        settings,
        "p40",
        "fake",
        {},
        [],
        command,
        [],
        total_steps=settings.steps,
        resume_step=start if start > 0 else None,
    )


def test_the_soak_through_launch_keeps_the_newest_two(tmp_path):
    """The soak's four sessions through verlfit train's launch: after each, only the newest two whole checkpoints."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"verlfit_run": 1}))
    after, said = [], []
    for start, end in SOAK_SESSIONS:
        display = io.StringIO()
        status = launch(
            stand_in_plan(run, start, end, keep=2, kill=(end == 301)), run, stream=display, poll_seconds=0.05
        )
        after.append((status, steps_left(run / "checkpoints")))
        said += [line for line in display.getvalue().splitlines() if line.startswith("verlfit: removed")]
    assert after == [(0, [100, 150]), (0, [200, 250]), (-9, [250, 300]), (0, [450, 500])]
    assert layout(run / "checkpoints") == {
        "global_step_450": ["actor", "critic", "data.pt"],
        "global_step_500": ["actor", "critic", "data.pt"],
    }
    assert said == [
        # verl's own husk
        "verlfit: removed global_step_50 (--keep-checkpoints 2; kept: global_step_100, global_step_150)",
        (
            "verlfit: removed global_step_100, global_step_150 (--keep-checkpoints 2; kept: global_step_200,"
            " global_step_250)"
        ),
        # verl killed: as verl exits
        "verlfit: removed global_step_200 (--keep-checkpoints 2; kept: global_step_250, global_step_300)",
        (
            "verlfit: removed global_step_250, global_step_300, global_step_350, global_step_400"
            " (--keep-checkpoints 2; kept: global_step_450, global_step_500)"
        ),
    ]


def test_a_resume_after_a_power_cut_prunes_before_verl_starts(tmp_path):
    """verlfit itself was killed too (no check as verl exited): the resumed launch's first check prunes."""
    run = tmp_path / "run"
    verl_alone(SOAK_SESSIONS[:2], save_freq=50, keep=2, root=run, last=500)
    display = io.StringIO()
    assert launch(stand_in_plan(run, 250, 252, keep=2), run, stream=display, poll_seconds=0.05) == 0
    assert (
        display.getvalue().splitlines()[0]
        == "verlfit: removed global_step_50, global_step_100, global_step_150 (--keep-checkpoints 2; kept:"
        " global_step_200, global_step_250)"
    )
    assert steps_left(run / "checkpoints") == [200, 250]


def test_keep_all_removes_nothing(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for start, end in SOAK_SESSIONS[:2]:
        launch(stand_in_plan(run, start, end, keep=0), run, poll_seconds=0.05)
    assert steps_left(run / "checkpoints") == [50, 100, 150, 200, 250]


# new-user trial 4: odd run directories, made by hand or by other tools


@pytest.mark.parametrize("content", ["²".encode(), b"\xff\xfe\x00", "١٢".encode()])
def test_a_marker_that_is_not_an_ascii_whole_number_names_no_step(tmp_path, content):
    """'²' passed str.isdigit and then failed int() (a ValueError traceback from resume, export and the keeper);
    bytes that are not UTF-8 failed decoding (UnicodeDecodeError); verl itself writes str(step) in ASCII."""
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[2, 4, 6])
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_bytes(content)
    assert latest_checkpoint(run) is None
    assert checkpoints_to_prune(run / "checkpoints", 2) == []
    assert CheckpointKeeper(run, 2, print).check(force=True) == []
    assert steps_left(run / "checkpoints") == [2, 4, 6]


def test_only_the_names_verl_writes_are_steps(tmp_path):
    """global_step_² made int() fail; global_step_007 was read as step 7 and its removal then failed on the missing
    global_step_7, which stopped pruning for the session. verl writes global_step_{step} (ray_trainer.py:806)."""
    from verlfit.checkpoints import saved_steps

    run = tmp_path / "run"
    make(run / "checkpoints", whole=[2, 4, 6], marker=6)
    for name in ("global_step_²", "global_step_007", "global_step_١"):
        (run / "checkpoints" / name / "actor").mkdir(parents=True)
    assert saved_steps(run / "checkpoints") == [2, 4, 6]
    assert prune(run, 2) == [run / "checkpoints" / "global_step_2"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "global_step_007",
        "global_step_4",
        "global_step_6",
        "global_step_²",
        "global_step_١",
        "latest_checkpointed_iteration.txt",
    ]


def test_a_marker_naming_no_folder_settles_nothing(tmp_path):
    """A marker whose global_step_N is gone (deleted by hand, or a number verl never wrote) is not a checkpoint verl
    resumes from (find_latest_ckpt_path returns None, checkpoint_manager.py:189): nothing is pruned against it."""
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[2, 4, 6], marker=99999999999999999999999)
    assert checkpoints_to_prune(run / "checkpoints", 2) == []
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("8")
    assert prune(run, 2) == []
    assert steps_left(run / "checkpoints") == [2, 4, 6]


def test_a_leftover_that_is_a_file_or_a_link_is_removed_and_pruning_goes_on(tmp_path):
    """A .removing-global_step_N file made shutil.rmtree raise NotADirectoryError on every call: no run of that
    directory could prune again."""
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[2, 4, 6], marker=6)
    (run / "checkpoints" / ".removing-global_step_1").write_text("x")
    target = tmp_path / "elsewhere"
    target.mkdir()
    (run / "checkpoints" / ".removing-global_step_0").symlink_to(target)
    assert prune(run, 2) == [run / "checkpoints" / "global_step_2"]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "global_step_4",
        "global_step_6",
        "latest_checkpointed_iteration.txt",
    ]
    assert target.is_dir()  # a link is removed, not what it points to


def test_a_linked_checkpoint_is_not_removed_and_the_message_names_it(tmp_path):
    """A global_step_N that is a symbolic link (a checkpoint moved to another disk): shutil.rmtree refuses links, after
    prune had already renamed the link to .removing-global_step_N, which then failed every later prune too. Now it
    is refused before anything is renamed, naming the link and what to do."""
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[4, 6], marker=6)
    target = tmp_path / "disk2" / "global_step_2"
    (target / "actor").mkdir(parents=True)
    (run / "checkpoints" / "global_step_2").symlink_to(target)
    said = []
    assert CheckpointKeeper(run, 2, said.append).check(force=True) == []
    assert said == [
        f"verlfit: could not remove old checkpoints of {run} for --keep-checkpoints 2:"
        f" {run / 'checkpoints' / 'global_step_2'} is a symbolic link to {target}, and verlfit does not delete through"
        f" links: remove the link (and {target} if you no longer need it); they stay on disk (nothing is lost) and"
        " verlfit stops pruning for this session: delete the global_step_N folders you do not need"
    ]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [
        "global_step_2",
        "global_step_4",
        "global_step_6",
        "latest_checkpointed_iteration.txt",
    ]
    assert (target / "actor").is_dir()


def test_a_resume_dry_run_says_what_the_resume_would_remove(tmp_path, capsys):
    from command_lines import parse_train as parse
    from fakes import P40
    from verlfit import cli
    from verlfit.train.run_directory import create_run_directory
    from verlfit.commands.train import prepare_launch

    plan = prepare_launch(
        parse(["--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "r"), "--steps", "500"]),
        environ={},
        gpu=P40,
    )
    run = create_run_directory(plan, "data: {}\n")
    verl_alone(SOAK_SESSIONS[:2], save_freq=50, keep=2, root=run, last=500)
    assert cli.main(["train", "--resume", str(run), "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the dry run wraps its notes
    assert (
        "note: the resume would first remove global_step_50, global_step_100, global_step_150 (--keep-checkpoints 2; "
        "verl keeps only its own session's saves, so verlfit prunes the rest)" in out
    )
    assert steps_left(run / "checkpoints") == [50, 100, 150, 200, 250]  # a rehearsal removes nothing
    assert cli.main(["train", "--resume", str(run), "--dry-run", "--keep-checkpoints", "0"]) == 0
    assert "would first remove" not in capsys.readouterr().out


def test_remove_cut_short_removes_a_link_not_its_target(tmp_path):
    run = tmp_path / "run"
    make(run / "checkpoints", whole=[2], marker=2)
    target = tmp_path / "elsewhere"
    (target / "actor").mkdir(parents=True)
    (run / "checkpoints" / "global_step_4").symlink_to(target)
    assert remove_cut_short(run) == [run / "checkpoints" / "global_step_4"]
    assert steps_left(run / "checkpoints") == [2] and (target / "actor").is_dir()
