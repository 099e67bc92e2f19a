"""The one write policy (verlfit.output_files): the data-loss findings of issue 32, each as the user met it, and the
module's rules on their own (refusals, replacing, switching a folder in whole)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import cli, output_files
from verlfit.data_folder import FolderState, data_folder_state
from verlfit.errors import VerlfitError


def checksums(folder: Path) -> dict[str, str]:
    """relative path -> sha256 of every file under ``folder`` (hidden ones too)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def user_rows(folder: Path, count: int = 4, offset: int = 0) -> Path:
    """The user's own question/answer parquet files ``train.parquet`` and ``test.parquet`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        rows = [
            {"question": f"{split} {offset + i} km in m?", "answer": str(1000 * (offset + i))} for i in range(count)
        ]
        pq.write_table(pa.Table.from_pylist(rows), folder / f"{split}.parquet")
    return folder


def prepare(folder: Path, output: Path, *flags: str) -> int:
    return cli.main(
        [
            "prepare-data",
            "--train",
            str(folder / "train.parquet"),
            "--test",
            str(folder / "test.parquet"),
            "--data-source",
            "my/units",
            "--output",
            str(output),
            *flags,
        ]
    )


# --------------------------------------------------------------------------- issue 32, data loss items


def test_item6_prepare_data_into_its_inputs_folder_with_force_loses_nothing(tmp_path, capsys):
    data = user_rows(tmp_path / "D")
    before = checksums(data)
    assert prepare(data, data, "--force") == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: --output {data} holds the input {data / 'train.parquet'} of this command: writing there "
        "would replace what it reads\n" in err
    )
    assert f"  fix: pass --output a new folder outside {data / 'train.parquet'}\n" in err
    assert checksums(data) == before


@pytest.mark.parametrize("interrupt_at", [0, 1, 2])
def test_item7_a_ctrl_c_at_any_rename_leaves_the_old_folder_or_the_new_one(tmp_path, monkeypatch, interrupt_at, capsys):
    old_input, new_input = user_rows(tmp_path / "old", 3), user_rows(tmp_path / "new", 5, offset=10)
    out, reference = tmp_path / "out", tmp_path / "reference"
    assert prepare(old_input, out) == 0
    assert prepare(new_input, reference) == 0
    old = {name: (out / name).read_bytes() for name in ("train.parquet", "test.parquet")}
    new = {name: (reference / name).read_bytes() for name in ("train.parquet", "test.parquet")}
    calls = []

    def interrupting(real):
        def call(*args, **kwargs):
            result = real(*args, **kwargs)
            calls.append(args)
            if len(calls) == interrupt_at + 1:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right after this rename
            return result

        return call

    monkeypatch.setattr(os, "replace", interrupting(os.replace))
    monkeypatch.setattr(os, "rename", interrupting(os.rename))
    monkeypatch.setattr(output_files, "exchange", interrupting(output_files.exchange), raising=False)
    status = prepare(new_input, out, "--force")
    monkeypatch.undo()
    assert status in (0, 130)
    now = {name: (out / name).read_bytes() for name in ("train.parquet", "test.parquet")}
    assert now in (old, new)  # never a new train.parquet beside an old test.parquet
    assert data_folder_state(out).state is FolderState.VERLFIT_PREPARED  # the marker matches what is there
    # nothing half-built or replaced left beside it
    assert sorted(path.name for path in tmp_path.iterdir()) == ["new", "old", "out", "reference"]


def test_item7_the_new_folder_is_switched_in_with_one_exchange(tmp_path, monkeypatch):
    old_input, new_input = user_rows(tmp_path / "old", 3), user_rows(tmp_path / "new", 5, offset=10)
    out = tmp_path / "out"
    assert prepare(old_input, out) == 0
    renames = []
    real_rename = os.rename

    def rename(source, target):
        renames.append((Path(source).name, Path(target).name))
        return real_rename(source, target)

    monkeypatch.setattr(os, "rename", rename)
    assert prepare(new_input, out, "--force") == 0
    if output_files.exchange.__module__ == "verlfit.output_files" and len(renames) == 1:
        # renameat2(RENAME_EXCHANGE) swapped the folders; the one rename moves the old one aside to be removed
        assert renames[0][0].startswith(".out.verlfit-building-") and renames[0][1].startswith(".out.verlfit-replaced-")
    assert pq.read_table(out / "train.parquet").num_rows == 5


# --------------------------------------------------------------------------- the module's rules


def test_a_rerun_on_the_same_inputs_replaces_without_force_and_another_input_needs_it(tmp_path, capsys):
    first, second = user_rows(tmp_path / "a", 3), user_rows(tmp_path / "b", 5)
    out = tmp_path / "out"
    assert prepare(first, out) == 0
    assert prepare(first, out) == 0
    assert prepare(second, out) == 2
    err = capsys.readouterr().err
    inputs = f"{first.resolve() / 'train.parquet'}, {first.resolve() / 'test.parquet'}"
    assert f"--output {out} holds what verlfit prepare-data from {inputs} wrote " in err
    assert "fix: pass --force to replace those files (only those), or pass --output a new folder" in err
    assert prepare(second, out, "--force") == 0
    assert f"replaced what verlfit wrote in {out} before: test.parquet, train.parquet\n" in capsys.readouterr().out
    marker = json.loads((out / output_files.MARKER_NAME).read_text())
    assert marker["inputs"] == [str(second.resolve() / "train.parquet"), str(second.resolve() / "test.parquet")]
    assert sorted(marker["files"]) == ["test.parquet", "train.parquet"]


def test_the_current_directory_and_a_folder_above_it_are_refused(tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    for given, words in ((".", "is the current directory"), ("..", "is a folder holding the current directory")):
        with pytest.raises(VerlfitError) as caught:
            output_files.check_output(given, "verlfit export")
        assert caught.value.message.startswith(f"--output {given} ({work if given == '.' else tmp_path}) {words}: ")
        assert caught.value.fix == "pass --output a new folder, e.g. --output ./export-output"
        assert caught.value.exit_code == 2


def test_a_symlink_is_judged_as_the_folder_it_names(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(run)
    with pytest.raises(VerlfitError) as caught:
        output_files.check_output(link, "verlfit report", own_place=("report",))
    assert (
        caught.value.message == f"--output {link} ({run}) is a run directory (it holds checkpoints/): "
        "its checkpoints and records are never replaced"
    )
    assert (
        caught.value.fix == "pass --output a new folder outside the run, or leave it out for this command's own "
        f"place in the run, {run / 'report'}"
    )
    allowed = output_files.check_output(tmp_path / "link" / "report", "verlfit report", own_place=("report",))
    assert allowed.path == run / "report"
    with pytest.raises(VerlfitError, match=r"lies inside the run directory .*/run, outside this command's own place"):
        output_files.check_output(link / "checkpoints" / "x", "verlfit report", own_place=("report",))


def test_a_replaced_folder_keeps_a_file_someone_added_after_the_check(tmp_path, capsys):
    out = tmp_path / "out"
    first = output_files.check_output(out, "verlfit test")
    output_files.write_folder(first, lambda folder: (folder / "a.txt").write_text("1"))
    second = output_files.check_output(out, "verlfit test")
    assert second.replaces == ("a.txt",)

    def build(folder):
        (folder / "a.txt").write_text("2")
        (out / "late.txt").write_text("the user's")  # written into the old folder while the new one is built

    with pytest.raises(
        VerlfitError, match="changed while verlfit was writing: it now holds files verlfit did not"
    ) as caught:
        output_files.write_folder(second, build)
    assert caught.value.exit_code == 1  # a collision with another writer, not a refused input (new-user trial, 20)
    assert (out / "a.txt").read_text() == "1" and (out / "late.txt").read_text() == "the user's"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


def test_remove_listed_removes_only_unchanged_listed_files(tmp_path, capsys):
    folder = tmp_path / "old"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "ours.txt").write_text("ours")
    (folder / "changed.txt").write_text("before")
    marker = output_files.Marker("verlfit test", (), output_files.marker_content(folder, "verlfit test")["files"])
    (folder / "changed.txt").write_text("after, by the user")
    (folder / "added.txt").write_text("the user's")
    assert output_files.remove_listed(folder, marker) == ["added.txt", "changed.txt"]
    assert not (folder / "sub").exists()
    err = capsys.readouterr().err
    assert f"verlfit: warning: kept {folder}: it holds added.txt, changed.txt, not written by verlfit" in err


def test_where_the_file_system_cannot_exchange_two_renames_switch_the_folder(tmp_path, monkeypatch):
    out = tmp_path / "out"
    first = output_files.check_output(out, "verlfit test")
    output_files.write_folder(first, lambda folder: (folder / "a.txt").write_text("1"))
    monkeypatch.setattr(output_files, "exchange", lambda first, second: False)  # renameat2 refused (NFS, an old kernel)
    renames = []
    real_rename = os.rename

    def rename(source, target):
        renames.append((Path(source).name[:22], Path(target).name[:22]))
        return real_rename(source, target)

    monkeypatch.setattr(os, "rename", rename)
    second = output_files.check_output(out, "verlfit test")
    output_files.write_folder(second, lambda folder: (folder / "a.txt").write_text("2"))
    assert renames == [("out", ".out.verlfit-replaced-"), (".out.verlfit-building-", "out")]
    assert (out / "a.txt").read_text() == "2" and sorted(path.name for path in tmp_path.iterdir()) == ["out"]


# --------------------------------------------------------------------------- issue 44: races, leftovers, long names


def write_marked(output: output_files.Output, text: str) -> None:
    output_files.write_folder(output, lambda folder: (folder / "result.txt").write_text(text))


@pytest.mark.parametrize("before", ["absent", "an earlier output"])
def test_issue44_item5_a_write_racing_another_into_one_output_is_refused_and_keeps_the_others(tmp_path, capsys, before):
    """Both used to report "written" and one output was gone."""
    out = tmp_path / "out"
    if before != "absent":
        write_marked(output_files.check_output(out, "verlfit eval", inputs=["m1"]), "first")
    mine = output_files.check_output(out, "verlfit eval", inputs=["m2"], force=True)  # checked, then works a while
    assert prepare(user_rows(tmp_path / "data"), out, "--force") == 0  # another command lands there meanwhile
    theirs = checksums(out)
    with pytest.raises(VerlfitError) as caught:
        write_marked(mine, "mine")
    inputs = f"{tmp_path / 'data' / 'train.parquet'}, {tmp_path / 'data' / 'test.parquet'}"
    assert (str(caught.value), caught.value.exit_code) == (
        (
            f"--output {out} changed while verlfit eval was writing it (verlfit prepare-data from {inputs} wrote it"
            " meanwhile); nothing was replaced and this output is discarded\n  fix: run verlfit eval again (it checks"
            " --output anew), or pass --output a new folder"
        ),
        1,  # another process wrote there: no input of this command is wrong (new-user trial, finding 20: it was 2)
    )
    assert checksums(out) == theirs and sorted(p.name for p in tmp_path.iterdir()) == ["data", "out"]
    # unchanged since the check: written
    write_marked(output_files.check_output(out, "verlfit eval", inputs=["m2"], force=True), "mine")
    assert (out / "result.txt").read_text() == "mine"


def dead_pid() -> int:
    import subprocess
    import sys

    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_issue44_item6_leftovers_of_killed_writes_are_removed_when_their_process_is_gone_and_said(tmp_path, capsys):
    """SIGKILL during export or report left hidden .NAME.verlfit-building-* folders (6 over 10 tries)."""
    host, dead = output_files.HOST_TAG, dead_pid()
    out = tmp_path / "out"
    stale = [
        tmp_path / f".out.verlfit-building-{host}-{dead}-0badf00d",
        tmp_path / f".other.verlfit-building-{host}-{dead}-1badf00d",
    ]
    for folder in stale:
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"partial")
    (tmp_path / f".report.json.verlfit-writing-{host}-{dead}-2badf00d").write_text("{")
    kept = [
        tmp_path / f".out.verlfit-building-{host}-{os.getpid()}-3badf00d",  # a live process's: still writing
        tmp_path / f".out.verlfit-building-{'0000' if host != '0000' else '0001'}-{dead}-4badf00d",  # another host's
        tmp_path / ".out.verlfit-building-5e6f7a8b9c0d",  # before pids were recorded: no proof it is dead
    ]
    for folder in kept:
        folder.mkdir()
    assert prepare(user_rows(tmp_path / "data"), out) == 0
    err = capsys.readouterr().err
    for path in stale + [tmp_path / f".report.json.verlfit-writing-{host}-{dead}-2badf00d"]:
        assert f"verlfit: removed {path}, left by an interrupted verlfit write (process {dead} is gone)\n" in err
        assert not path.exists()
    assert err.count("verlfit: removed") == 3
    assert all(folder.is_dir() for folder in kept)


def test_issue44_item6_a_replaced_output_left_by_a_killed_exchange_is_removed_only_beside_its_successor(
    tmp_path, capsys
):
    host, dead = output_files.HOST_TAG, dead_pid()
    write_marked(output_files.check_output(tmp_path / "out", "verlfit eval"), "old")
    replaced = tmp_path / f".out.verlfit-replaced-{host}-{dead}-0badf00d"
    (tmp_path / "out").rename(replaced)  # killed between the two renames of a file system without exchange
    output_files.remove_stale(tmp_path)
    assert replaced.is_dir() and capsys.readouterr().err == ""  # the output it held is the only one: kept
    write_marked(output_files.check_output(tmp_path / "out", "verlfit eval"), "new")
    assert not replaced.exists() and (tmp_path / "out" / "result.txt").read_text() == "new"
    assert (
        capsys.readouterr().err
        == f"verlfit: removed {replaced}, left by an interrupted verlfit write (process {dead} is gone)\n"
    )


def test_issue44_item7_long_output_names_are_written_and_too_long_ones_are_a_one_line_refusal(tmp_path, capsys):
    """Names of 223-255 bytes were refused as "File name too long (.NAME.verlfit-building-check-...)"; 300 was an
    OSError traceback."""
    data = user_rows(tmp_path / "data")
    long = tmp_path / ("n" * 255)
    assert prepare(data, long) == 0
    assert sorted(p.name for p in long.iterdir()) == [output_files.MARKER_NAME, "test.parquet", "train.parquet"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data", "n" * 255]  # nothing hidden left beside it
    assert len(output_files.hidden_name("é" * 200, output_files.BUILDING).encode()) < 100
    capsys.readouterr()
    assert prepare(data, tmp_path / ("x" * 300) / "inner") == 2
    assert (
        capsys.readouterr().err
        == f"verlfit: error: --output: the name {'x' * 40}... is 300 bytes, longer than the 255 bytes a file name may"
        f" have on {tmp_path}'s file system\n  fix: pass --output a path whose every name is at most 255 bytes\n"
    )


def test_issue44_item7_a_too_long_run_directory_name_is_refused_before_any_stat(tmp_path, capsys):
    assert (
        cli.main(["train", "--profile", "p40", "--plan", "off", "--dry-run", "--run-dir", str(tmp_path / ("r" * 300))])
        == 2
    )
    assert (
        capsys.readouterr().err
        == f"verlfit: error: --run-dir: the name {'r' * 40}... is 300 bytes, longer than the 255 bytes a file name may"
        f" have on {tmp_path}'s file system\n  fix: pass --run-dir a path whose every name is at most 255 bytes\n"
    )


def test_issue44_item6_a_write_killed_with_sigkill_mid_build_is_cleaned_by_the_next_write_beside_it(tmp_path, capsys):
    import subprocess
    import sys

    script = (
        "import time\nfrom pathlib import Path\nfrom verlfit import output_files\nout ="
        f" output_files.check_output({str(tmp_path / 'export')!r}, 'verlfit export')\ndef build(folder):\n    (folder /"
        " 'model.safetensors').write_bytes(b'partial')\n    print('building', flush=True)\n   "
        " time.sleep(600)\noutput_files.write_folder(out, build)\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline() == "building\n"
    writer.kill()
    writer.wait()
    (left,) = [path for path in tmp_path.iterdir() if path.name.startswith(".export.verlfit-building-")]
    assert (left / "model.safetensors").read_bytes() == b"partial"
    assert prepare(user_rows(tmp_path / "data"), tmp_path / "out") == 0
    assert (
        f"verlfit: removed {left}, left by an interrupted verlfit write (process {writer.pid} is gone)\n"
        in capsys.readouterr().err
    )
    assert sorted(path.name for path in tmp_path.iterdir()) == ["data", "out"]


def test_an_output_through_a_dangling_link_is_refused_naming_the_link_and_its_target(tmp_path):
    """New-user trial (finding 13): `--output LINK` with LINK -> /nonexistent/dir exited 0 and created /nonexistent/dir,
    its parent included, wherever the link pointed; so did a path below such a link."""
    (tmp_path / "sl").mkdir()
    gone = tmp_path / "nonexistent" / "dir"
    dangling = tmp_path / "sl" / "dangling"
    dangling.symlink_to(gone)
    for given, words in (
        (dangling, f"--output {dangling} is"),
        (dangling / "sub", f"--output {dangling / 'sub'}: {dangling} is"),
    ):
        with pytest.raises(VerlfitError) as caught:
            output_files.check_output(given, "verlfit prepare-data")
        assert (str(caught.value), caught.value.exit_code) == (
            f"{words} a symbolic link to {gone}, which does not exist: verlfit would create {gone} (and the folders"
            f" missing above it) wherever the link points\n  fix: pass --output the folder you mean (not through the"
            f" link), or create {gone} first if the link is meant",
            2,
        )
    assert not (tmp_path / "nonexistent").exists()
    # a link to an existing folder is followed, as before
    gone.mkdir(parents=True)
    assert output_files.check_output(dangling / "sub", "verlfit prepare-data").path == gone / "sub"


def test_an_output_through_a_symbolic_link_loop_is_refused_up_front(tmp_path):
    """New-user trial (finding 14): `--output LOOP/sub` read all the data, then exited 1 ("cannot write to --output
    ... Too many levels of symbolic links"); `--output LOOP` was refused up front (exit 2), saying it "never replaces a
    file"."""
    (tmp_path / "loopB").symlink_to("loopA")
    (tmp_path / "loopA").symlink_to("loopB")
    loop = tmp_path / "loopA"
    for given, words in ((loop, f"--output {loop} is"), (loop / "sub", f"--output {loop / 'sub'}: {loop} is")):
        with pytest.raises(VerlfitError) as caught:
            output_files.check_output(given, "verlfit prepare-data")
        assert (str(caught.value), caught.value.exit_code) == (
            f"{words} a symbolic link loop (Too many levels of symbolic links), not a folder\n  fix: pass --output a"
            f" path that does not go through {loop}, or point that link at a folder",
            2,
        )


def test_an_output_inside_a_folder_the_command_reads_is_refused_naming_both(tmp_path):
    """New-user trial (finding 12): `eval --output DATA/ev` and `train --run-dir MODEL/run` wrote into the command's own
    input folders. A hub id and a folder in a run directory (the run rule places outputs there) are not refused."""
    data, model = tmp_path / "data", tmp_path / "model"
    data.mkdir()
    model.mkdir()
    reads = [("MODEL", str(model)), ("--data", str(data)), ("--compare", "Qwen/Qwen2.5-0.5B-Instruct")]
    for read_flag, folder, given in (("--data", data, data / "ev"), ("MODEL", model, model / "a" / "b")):
        with pytest.raises(VerlfitError) as caught:
            output_files.check_output(given, "verlfit eval", reads=reads)
        assert (str(caught.value), caught.value.exit_code) == (
            f"--output {given} lies inside {read_flag} {folder}, which this command reads: verlfit never writes into"
            f" its own input (the output would be taken for part of {folder}, and go with it when it is moved, copied"
            f" or cleaned)\n  fix: pass --output a folder outside {folder}",
            2,
        )
    with pytest.raises(VerlfitError, match=f"^--run-dir {data / 'run'} lies inside --data {data}, which"):
        output_files.check_output(data / "run", "verlfit train", flag="--run-dir", kind="new-folder", reads=reads)
    assert output_files.check_output(tmp_path / "ev", "verlfit eval", reads=reads).path == tmp_path / "ev"
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "export" / "global_step_1").mkdir(parents=True)
    allowed = output_files.check_output(
        run / "eval" / "x", "verlfit eval", own_place=("eval", "*"), reads=[("MODEL", run / "export" / "global_step_1")]
    )
    assert allowed.path == run / "eval" / "x"


def test_a_folder_appearing_while_a_new_folder_is_built_is_a_failure_not_a_refused_input(tmp_path):
    """New-user trial (finding 20): a collision with another process exited 2, the status of refused input."""
    output = output_files.check_output(tmp_path / "run", "verlfit train", flag="--run-dir", kind="new-folder")

    def build(folder):
        (tmp_path / "run").mkdir()  # another run lands there meanwhile

    with pytest.raises(VerlfitError) as caught:
        output_files.build_new_folder(output, build)
    assert (str(caught.value), caught.value.exit_code) == (
        f"--run-dir {tmp_path / 'run'} appeared while verlfit was building it\n  fix: pass --run-dir a new path",
        1,
    )
