"""The data folder rule: verlfit writes prepared data only into a folder that is absent, empty or holds data it wrote
(its marker, files unchanged); verl-made data (struct fields in pyarrow 20's order too) counts as prepared; anything
else is refused with the fix, and prepare-gsm8k never overwrites the user's files."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import cli, data_folder, gsm8k
from verlfit.data_folder import MARKER_NAME, DataKeys, FolderState, data_folder_state
from verlfit.errors import VerlfitError

from gsm8k_rows import TEST, TRAIN, run_prepare, write_jsonl


def _reordered(table: pa.Table) -> pa.Table:
    """The same rows with every struct's fields in reverse order (pyarrow 20 writes verl's script's
    reward_model/extra_info/prompt fields in another order than the test venv's pyarrow)."""

    def reverse(data_type):
        if pa.types.is_struct(data_type):
            return pa.struct([pa.field(f.name, reverse(f.type)) for f in reversed(list(data_type))])
        if pa.types.is_list(data_type):
            return pa.list_(reverse(data_type.value_type))
        return data_type

    schema = pa.schema([pa.field(f.name, reverse(f.type)) for f in table.schema])
    return pa.Table.from_pylist(table.to_pylist(), schema=schema)


def verl_made(tmp_path: Path, name="verl-made", reorder=True) -> Path:
    """A folder as verl's own script leaves it (no verlfit marker): our byte-identical output without the marker,
    with the struct fields reordered as pyarrow 20 writes them."""
    ours = tmp_path / "ours-for-verl"
    run_prepare(write_jsonl(tmp_path / "raw-for-verl"), ours)
    folder = tmp_path / name
    folder.mkdir()
    for split in ("train", "test"):
        table = pq.read_table(ours / f"{split}.parquet")
        pq.write_table(_reordered(table) if reorder else table, folder / f"{split}.parquet")
    return folder


def test_states(tmp_path):
    assert data_folder_state(tmp_path / "nothing").state is FolderState.ABSENT
    (tmp_path / "empty").mkdir()
    assert data_folder_state(tmp_path / "empty").state is FolderState.EMPTY
    (tmp_path / "file").write_text("x")
    assert data_folder_state(tmp_path / "file").state is FolderState.NOT_A_FOLDER
    ours = tmp_path / "ours"
    run_prepare(write_jsonl(tmp_path / "raw"), ours)
    report = data_folder_state(ours)
    assert (report.state, report.entries) == (FolderState.VERLFIT_PREPARED, ("test.parquet", "train.parquet"))
    assert data_folder_state(verl_made(tmp_path)).state is FolderState.VERL_FORMAT
    user = tmp_path / "user"
    user.mkdir()
    pq.write_table(pa.table({"question": ["q"], "answer": ["a"]}), user / "train.parquet")
    report = data_folder_state(user)
    assert (report.state, report.entries, report.reason) == (
        FolderState.FOREIGN,
        ("train.parquet",),
        "no verlfit marker",
    )


def test_marker_lists_each_file_with_size_and_sha256(tmp_path):
    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "raw"), out)
    marker = json.loads((out / MARKER_NAME).read_text())
    assert marker["format"] == 2 and marker["written_by"] == "verlfit prepare-gsm8k"
    assert marker["inputs"] == [str((tmp_path / "raw").resolve())]
    assert marker["files"] == {
        name: {"bytes": (out / name).stat().st_size, "sha256": data_folder.file_digest(out / name)}
        for name in ("test.parquet", "train.parquet")
    }
    assert sorted(path.name for path in out.iterdir()) == [MARKER_NAME, "test.parquet", "train.parquet"]


def test_a_file_changed_or_added_after_verlfit_wrote_makes_the_folder_the_users(tmp_path):
    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "raw"), out)
    (out / "notes.txt").write_text("mine")
    report = data_folder_state(out)
    assert (report.state, report.reason) == (
        FolderState.VERL_FORMAT,
        "it holds train.parquet and test.parquet in verl's format (notes.txt was not written by verlfit)",
    )
    (out / "notes.txt").unlink()
    pq.write_table(pa.table({"question": ["q"], "answer": ["a"]}), out / "test.parquet")
    report = data_folder_state(out)
    assert (report.state, report.reason) == (
        FolderState.FOREIGN,
        "test.parquet lacks data_source, prompt, reward_model",
    )


def test_verl_made_data_with_pyarrow_20_field_order_is_prepared(tmp_path):
    # issue 24 item 8: gsm8k.is_prepared compared schemas field by field in order, so verl's own output written by
    # pyarrow 20 looked unprepared and train would prepare GSM8K over it
    folder = verl_made(tmp_path)
    assert pq.read_schema(folder / "train.parquet").field("reward_model").type.names == ["style", "ground_truth"][::-1]
    assert gsm8k.is_prepared(folder)
    assert gsm8k.has_gsm8k_schema(folder / "train.parquet")


def test_schemas_match_by_content_not_order():
    a = pa.schema(
        [
            ("x", pa.struct([("p", pa.string()), ("q", pa.int64())])),
            ("y", pa.list_(pa.struct([("r", pa.string()), ("s", pa.string())]))),
        ]
    )
    b = pa.schema(
        [
            ("y", pa.large_list(pa.struct([("s", pa.large_string()), ("r", pa.string())]))),
            ("x", pa.struct([("q", pa.int64()), ("p", pa.string())])),
        ]
    )
    c = pa.schema([("x", pa.struct([("p", pa.string()), ("q", pa.int32())])), ("y", a.field("y").type)])
    assert data_folder.schemas_match(a, b)
    assert not data_folder.schemas_match(a, c)


def test_data_keys_are_honoured(tmp_path):
    folder = tmp_path / "question-key"
    folder.mkdir()
    table = pa.table(
        {
            "data_source": ["mine"],
            "question": [[{"role": "user", "content": "2+2?"}]],
            "reward_model": [{"style": "rule", "ground_truth": "4"}],
        }
    )
    for split in ("train", "test"):
        pq.write_table(table, folder / f"{split}.parquet")
    assert data_folder_state(folder).state is FolderState.FOREIGN  # data.prompt_key=prompt: no prompt column
    assert data_folder_state(folder, DataKeys(prompt_key="question")).state is FolderState.VERL_FORMAT
    assert gsm8k.is_prepared(folder, DataKeys(prompt_key="question"))
    assert data_folder.missing_verl_columns(table.schema, DataKeys(prompt_key="question", reward_fn_key="task")) == [
        "task"
    ]
    messages = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    no_truth = pa.schema(
        [("data_source", pa.string()), ("prompt", messages), ("reward_model", pa.struct([("style", pa.string())]))]
    )
    assert data_folder.missing_verl_columns(no_truth) == ["reward_model.ground_truth"]


def test_a_prompt_column_of_plain_strings_is_not_verls_format(tmp_path):
    """new-user trial: a train.parquet whose prompt column held strings passed doctor and train, and verl's
    RLHFDataset then applied the chat template to no message at all: every prompt trained on was empty."""
    folder = tmp_path / "strings"
    folder.mkdir()
    table = pa.table(
        {
            "data_source": ["mine"],
            "prompt": ["What is 2 + 2?"],
            "reward_model": [{"style": "rule", "ground_truth": "4"}],
        }
    )
    for split in ("train", "test"):
        pq.write_table(table, folder / f"{split}.parquet")
    assert data_folder.missing_verl_columns(table.schema) == [
        "prompt as chat messages (a list of {role, content}; it holds plain strings)"
    ]
    report = data_folder_state(folder)
    assert (
        report.state is FolderState.FOREIGN
        and report.reason
        == "train.parquet lacks prompt as chat messages (a list of {role, content}; it holds plain strings); "
        "test.parquet lacks prompt as chat messages (a list of {role, content}; it holds plain strings)"
    )
    for wrong in (
        pa.list_(pa.string()),
        pa.list_(pa.struct([("role", pa.string())])),
        pa.list_(pa.struct([("role", pa.string()), ("content", pa.int64())])),
    ):
        assert not data_folder.is_chat_messages(wrong)
    assert data_folder.is_chat_messages(
        pa.large_list(pa.struct([("role", pa.large_string()), ("content", pa.string()), ("name", pa.string())]))
    )


def test_prepare_gsm8k_refuses_a_folder_with_the_users_verl_data_and_says_how(tmp_path):
    # issue 26 finding 1: doctor's fix `verlfit prepare-gsm8k --output DIR` silently overwrote the user's parquet
    user = tmp_path / "user"
    user.mkdir()
    table = pa.table(
        {
            "data_source": ["mine"],
            "question": [[{"role": "user", "content": "2+2?"}]],
            "reward_model": [{"style": "rule", "ground_truth": "4"}],
        }
    )
    for split in ("train", "test"):
        pq.write_table(table, user / f"{split}.parquet")
    before = {path.name: path.read_bytes() for path in user.iterdir()}
    with pytest.raises(VerlfitError) as caught:
        run_prepare(write_jsonl(tmp_path / "raw"), user)
    assert caught.value.exit_code == 2
    assert (
        str(caught.value)
        == f"--output {user} holds files verlfit did not write (no verlfit marker: verlfit did not write test.parquet,"
        " train.parquet): verlfit never replaces or deletes them, even with --force\n  fix: pass --output a new"
        f" folder (it is created), or move your files out of {user}"
    )
    assert {path.name: path.read_bytes() for path in user.iterdir()} == before


def test_train_folder_with_only_the_users_train_parquet_is_never_filled_with_gsm8k(tmp_path):
    # issue 26 finding 2: train.ensure_data called gsm8k.prepare(output_dir=DIR) over a DIR holding the user's
    # train.parquet and no test.parquet; prepare itself now refuses before reading anything
    user = tmp_path / "user"
    user.mkdir()
    pq.write_table(
        pa.table(
            {
                "data_source": ["mine"],
                "prompt": [[{"role": "user", "content": "2+2?"}]],
                "reward_model": [{"style": "rule", "ground_truth": "4"}],
            }
        ),
        user / "train.parquet",
    )
    before = (user / "train.parquet").read_bytes()
    assert not gsm8k.is_prepared(user)
    with pytest.raises(
        VerlfitError,
        match=r"holds files verlfit did not write \(no verlfit marker: verlfit did not write train\.parquet\)",
    ):
        gsm8k.prepare(source=None, output_dir=user, log=lambda line: None)  # the hub is never asked: refused first
    assert sorted(path.name for path in user.iterdir()) == ["train.parquet"]
    assert (user / "train.parquet").read_bytes() == before


def test_verl_made_data_is_refused_even_with_force_and_kept(tmp_path, capsys):
    # issue 32: --force used to replace the user's train.parquet/test.parquet (keeping the rest); --force now replaces
    # only what verlfit wrote, so a folder of the user's is refused with it too
    folder = verl_made(tmp_path)
    (folder / "README.md").write_text("my notes")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    raw = write_jsonl(tmp_path / "raw")
    for force in ([], ["--force"]):
        assert cli.main(["prepare-gsm8k", "--input", str(raw), "--output", str(folder), *force]) == 2
        err = capsys.readouterr().err
        assert (
            f"verlfit: error: --output {folder} holds files verlfit did not write (no verlfit marker: verlfit did not"
            " write README.md, test.parquet, train.parquet): verlfit never replaces or deletes them, even with"
            " --force\n" in err
        )
        assert f"  fix: pass --output a new folder (it is created), or move your files out of {folder}\n" in err
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    assert data_folder_state(folder).state is FolderState.VERL_FORMAT


def test_a_folder_verlfit_wrote_is_replaced_by_a_rerun_and_by_force_only(tmp_path):
    out = tmp_path / "out"
    run_prepare(write_jsonl(tmp_path / "a", TRAIN[:3], TEST[:1]), out)
    result, _ = run_prepare(tmp_path / "a", out)  # a re-run on the same input
    assert result.rows == {"train": 3, "test": 1}
    with pytest.raises(VerlfitError) as caught:  # another input: verlfit's earlier output is replaced only with --force
        run_prepare(write_jsonl(tmp_path / "b"), out)
    assert (
        str(caught.value)
        == f"--output {out} holds what verlfit prepare-gsm8k from {(tmp_path / 'a').resolve()} wrote (test.parquet,"
        " train.parquet); verlfit prepare-gsm8k replaces it without --force only when re-run on the same inputs\n "
        " fix: pass --force to replace those files (only those), or pass --output a new folder"
    )
    result, _ = run_prepare(tmp_path / "b", out, force=True)
    assert result.rows == {"train": 5, "test": 2}
    assert data_folder_state(out).state is FolderState.VERLFIT_PREPARED


def test_refusal_for_a_file_in_the_folders_place_even_with_force(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(VerlfitError) as caught:
        run_prepare(write_jsonl(tmp_path / "raw"), tmp_path / "file", force=True)
    assert (
        str(caught.value)
        == f"--output {tmp_path / 'file'} is a file, not a folder: verlfit prepare-gsm8k writes a folder and never"
        " replaces a file\n  fix: pass --output a folder path (it is created if missing)"
    )
    assert (tmp_path / "file").read_text() == "x"


def test_a_link_to_a_missing_folder_is_refused_naming_its_target_and_a_fifo_as_the_output_folder_is_said_as_such(
    tmp_path,
):
    """issue 32 item 18: a dangling symbolic link was "a file". Since the second new-user trial (its finding 13: such
    a link made /nonexistent/dir, parents included, without a word) it is refused up front, naming where it points."""
    import os

    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    with pytest.raises(VerlfitError, match=r"is a symbolic link to .*gone, which does not exist") as refused:
        run_prepare(write_jsonl(tmp_path / "raw"), tmp_path / "dangling")
    assert refused.value.exit_code == 2 and not (tmp_path / "gone").exists()
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(VerlfitError, match=r"is a named pipe \(FIFO\)"):
        run_prepare(write_jsonl(tmp_path / "raw2"), tmp_path / "pipe")
