"""What a data folder holds, and whether verlfit may write prepared data into it.

verlfit writes ``train.parquet`` / ``test.parquet`` (``prepare-gsm8k``, ``prepare-data``, and ``train`` when it
prepares GSM8K) only into a folder that is absent, empty, or holds data verlfit wrote itself. It proves the last with
a marker file, :data:`MARKER_NAME`, written (atomically: a temporary file, then a rename) next to the parquet files
once they are in place; the marker lists each file it wrote with its size and SHA-256, so a file the user replaced or
added afterwards makes the folder the user's again. Anything else is refused with :func:`refuse_to_overwrite`'s error:
pass another output folder, or ``--force``, whose message names exactly the files it replaces and the ones it keeps.

States (:class:`FolderState`), from :func:`data_folder_state`:

* ``absent``: nothing at the path;
* ``empty``: a folder with no entries (temporary files a killed verlfit write left, :data:`LEFTOVER_PATTERN`, do not
  count);
* ``verlfit-prepared``: the marker is there, and every other entry is a file it lists, unchanged;
* ``verl-format``: ``train.parquet`` and ``test.parquet`` with the columns verl 0.4.1 reads (the data keys given:
  ``data.prompt_key``, ``data.reward_fn_key``, and ``reward_model`` with a ``ground_truth`` field, which the naive
  reward manager reads, ``verl/workers/reward_manager/naive.py``), written by someone else (verl's own
  ``examples/data_preprocess`` scripts, the user): used as prepared, never overwritten;
* ``foreign``: anything else (the user's files, half of verl's pair, a parquet that does not read);
* ``not-a-folder``: a file (or a link to one) at the path.

Parquet schemas are compared by content (:func:`normalized_type`): the same columns with the same types, struct
fields in any order. pyarrow 20 (the image's version) writes verl's script's struct fields in another order than the
test venv's pyarrow does (issue 24 item 8), and verl reads both the same (by field name).
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from verlfit.errors import VerlfitError

MARKER_NAME = ".verlfit-prepared.json"
MARKER_FORMAT = 1
SPLIT_FILES = ("train.parquet", "test.parquet")
# temporary files of an interrupted verlfit write (verlfit.gsm8k._write_tables names them so): not the user's
LEFTOVER_PATTERN = re.compile(r"\.(train|test)\.parquet\.[0-9a-f]{12}\.tmp|\.verlfit-prepared\.json\.[0-9a-f]{12}\.tmp")


class FolderState(str, enum.Enum):
    """What a data folder holds (see the module docstring)."""

    ABSENT = "absent"
    EMPTY = "empty"
    VERLFIT_PREPARED = "verlfit-prepared"
    VERL_FORMAT = "verl-format"
    FOREIGN = "foreign"
    NOT_A_FOLDER = "not-a-folder"


@dataclass(frozen=True)
class DataKeys:
    """The verl 0.4.1 data keys a check honours (``ppo_trainer.yaml``'s defaults).

    Attributes:
        prompt_key: ``data.prompt_key``: the column holding the chat messages.
        reward_fn_key: ``data.reward_fn_key``: the column the reward manager dispatches on (``data_source``).
    """

    prompt_key: str = "prompt"
    reward_fn_key: str = "data_source"

    @property
    def required_columns(self) -> tuple[str, ...]:
        """The columns verl's ``RLHFDataset`` and the naive reward manager read, in that order."""
        return (self.reward_fn_key, self.prompt_key, "reward_model")


@dataclass(frozen=True)
class FolderReport:
    """The state of one folder and the entries that decided it.

    Attributes:
        path: the folder.
        state: see :class:`FolderState`.
        entries: the names in the folder (sorted; markers and leftovers of a killed verlfit write excluded).
        reason: one sentence on why the state is what it is (for messages), e.g. ``"train.parquet was changed after
            verlfit wrote it"``.
    """

    path: Path
    state: FolderState
    entries: tuple[str, ...] = ()
    reason: str = ""

    @property
    def writable(self) -> bool:
        """True where verlfit may write prepared data without ``--force``."""
        return self.state in (FolderState.ABSENT, FolderState.EMPTY, FolderState.VERLFIT_PREPARED)

    @property
    def prepared(self) -> bool:
        """True where the folder holds train and test data verl reads (verlfit's or verl-made)."""
        return self.state in (FolderState.VERLFIT_PREPARED, FolderState.VERL_FORMAT)


# --------------------------------------------------------------------------- schemas


def normalized_type(data_type):
    """``data_type`` (a ``pyarrow.DataType``) with struct fields sorted by name, at every depth; ``large_string`` read
    as ``string`` and ``large_list`` as ``list`` (same content, 64-bit offsets). Two schemas whose columns have equal
    normalized types hold the same data for verl, which reads struct fields by name."""
    import pyarrow as pa

    if pa.types.is_struct(data_type):
        fields = sorted((data_type.field(index) for index in range(data_type.num_fields)), key=lambda f: f.name)
        return pa.struct([pa.field(f.name, normalized_type(f.type)) for f in fields])
    if pa.types.is_large_list(data_type) or pa.types.is_list(data_type):
        return pa.list_(normalized_type(data_type.value_type))
    if pa.types.is_large_string(data_type):
        return pa.string()
    return data_type


def schema_content(schema) -> dict:
    """column name -> normalized type (:func:`normalized_type`) of a ``pyarrow.Schema``; metadata and order ignored."""
    return {name: normalized_type(schema.field(name).type) for name in schema.names}


def schemas_match(schema, expected) -> bool:
    """True when two ``pyarrow.Schema`` hold the same columns with the same types, in any column or struct-field
    order (:func:`normalized_type`)."""
    return schema_content(schema) == schema_content(expected)


def is_chat_messages(data_type) -> bool:
    """True when a parquet column of ``data_type`` (a ``pyarrow.DataType``) holds chat messages as verl's
    ``RLHFDataset`` reads its prompt column: a list of structs with string ``role`` and ``content`` fields, the
    messages ``tokenizer.apply_chat_template`` takes (``rl_dataset.py`` ``_build_messages``)."""
    import pyarrow as pa

    data_type = normalized_type(data_type)
    if not pa.types.is_list(data_type) or not pa.types.is_struct(data_type.value_type):
        return False
    message = data_type.value_type
    return all(message.get_field_index(name) >= 0 and pa.types.is_string(message.field(name).type) for name in ("role", "content"))


def missing_verl_columns(schema, keys: DataKeys = DataKeys()) -> list[str]:
    """What verl 0.4.1 needs and a parquet schema lacks: the columns of ``keys.required_columns``, the prompt column as
    chat messages (:func:`is_chat_messages`), and ``reward_model.ground_truth`` (the naive reward manager reads
    ``non_tensor_batch["reward_model"]["ground_truth"]``, ``verl/workers/reward_manager/naive.py``). Empty when verl
    can read it."""
    import pyarrow as pa

    missing = [column for column in keys.required_columns if column not in schema.names]
    if keys.prompt_key in schema.names and not is_chat_messages(schema.field(keys.prompt_key).type):
        # verl applies the chat template to it: a plain string would be read as no message at all
        held = normalized_type(schema.field(keys.prompt_key).type)
        missing.append(f"{keys.prompt_key} as chat messages (a list of {{role, content}}; it holds {'plain strings' if held == pa.string() else held})")
    if "reward_model" in schema.names:
        reward_model = schema.field("reward_model").type
        if not pa.types.is_struct(reward_model) or reward_model.get_field_index("ground_truth") < 0:
            missing.append("reward_model.ground_truth")
    return missing


def _read_schema(path: Path):
    """The schema and row count of a parquet file, or None when it does not read as parquet."""
    import pyarrow
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
        return metadata.schema.to_arrow_schema(), metadata.num_rows
    except (OSError, pyarrow.ArrowException):
        return None


# --------------------------------------------------------------------------- marker


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def marker_content(folder: Path, names: Iterable[str], written_by: str) -> dict:
    """The marker's JSON object for the files ``names`` of ``folder`` (each: size in bytes and SHA-256)."""
    return {
        "format": MARKER_FORMAT,
        "written_by": written_by,
        "files": {name: {"bytes": (folder / name).stat().st_size, "sha256": file_digest(folder / name)} for name in sorted(names)},
    }


def write_marker(folder: str | os.PathLike, names: Iterable[str], written_by: str) -> Path:
    """Write :data:`MARKER_NAME` into ``folder`` listing the files ``names`` verlfit has just written there: to a
    temporary file in ``folder``, then renamed over any previous marker, so a reader sees the old marker or the new
    one, never half of one.

    Args:
        folder: the data folder.
        names: file names in ``folder`` (e.g. ``train.parquet``, ``test.parquet``).
        written_by: the command that wrote them, recorded for the user (e.g. ``"verlfit prepare-data"``).

    Returns:
        The marker's path.

    Raises:
        OSError: the folder cannot be written (the caller names the folder and the fix).
    """
    folder = Path(folder)
    text = json.dumps(marker_content(folder, names, written_by), indent=2, sort_keys=True) + "\n"
    temporary = folder / f"{MARKER_NAME}.{secrets.token_hex(6)}.tmp"
    try:
        with open(temporary, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, folder / MARKER_NAME)
    finally:
        temporary.unlink(missing_ok=True)
    return folder / MARKER_NAME


def _marker_files(folder: Path) -> tuple[dict | None, str]:
    """(name -> {"bytes", "sha256"} from the marker, "") or (None, why it is not usable)."""
    path = folder / MARKER_NAME
    if not path.is_file():
        return None, "no verlfit marker"
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, f"its verlfit marker does not read ({error})"
    files = content.get("files") if isinstance(content, dict) else None
    if not isinstance(files, dict) or not all(isinstance(entry, dict) for entry in files.values()):
        return None, "its verlfit marker lists no files"
    return files, ""


def written_by(folder: str | os.PathLike) -> str | None:
    """The command recorded in ``folder``'s verlfit marker (``"verlfit prepare-gsm8k"``, ``"verlfit prepare-data"``),
    or None without a readable marker. Says who wrote the folder, not whether its files are unchanged since
    (:func:`data_folder_state` checks that)."""
    try:
        content = json.loads((Path(folder) / MARKER_NAME).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    command = content.get("written_by") if isinstance(content, dict) else None
    return command if isinstance(command, str) else None


# --------------------------------------------------------------------------- state


def data_folder_state(path: str | os.PathLike, keys: DataKeys = DataKeys()) -> FolderReport:
    """Say what ``path`` holds (see :class:`FolderState`); reads names, sizes, parquet footers and, for a folder with a
    verlfit marker, the SHA-256 of the files it lists (a few MB for GSM8K). Writes nothing.

    Args:
        path: the data folder (``--output`` of a prepare command, ``--data`` of train).
        keys: the data keys verl is run with (``data.prompt_key``, ``data.reward_fn_key``).
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return FolderReport(path, FolderState.ABSENT, reason="it does not exist")
    if not path.is_dir():
        from verlfit.input_files import kind_of

        # a file, a FIFO, a dangling link
        return FolderReport(path, FolderState.NOT_A_FOLDER, reason=f"it is {kind_of(path)}, not a folder")
    entries = tuple(sorted(name for name in os.listdir(path) if name != MARKER_NAME and not LEFTOVER_PATTERN.fullmatch(name)))
    has_marker = (path / MARKER_NAME).exists()
    if not entries and not has_marker:
        return FolderReport(path, FolderState.EMPTY, reason="it is empty")
    listed, why_not = _marker_files(path)
    if listed is not None:
        unlisted = [name for name in entries if name not in listed]
        changed = [
            name for name in entries if name in listed and not _unchanged(path / name, listed[name])
        ]
        if not unlisted and not changed:
            return FolderReport(path, FolderState.VERLFIT_PREPARED, entries, "verlfit wrote every file in it")
        why_not = (
            f"{', '.join(unlisted)} {'was' if len(unlisted) == 1 else 'were'} not written by verlfit"
            if unlisted
            else f"{', '.join(changed)} {'was' if len(changed) == 1 else 'were'} changed after verlfit wrote {'it' if len(changed) == 1 else 'them'}"
        )
    if all(name in entries for name in SPLIT_FILES):
        problems = []
        for name in SPLIT_FILES:
            read = _read_schema(path / name)
            if read is None:
                problems.append(f"{name} does not read as parquet")
                continue
            missing = missing_verl_columns(read[0], keys)
            if missing:
                problems.append(f"{name} lacks {', '.join(missing)}")
        if not problems:
            return FolderReport(path, FolderState.VERL_FORMAT, entries, f"it holds train.parquet and test.parquet in verl's format ({why_not})")
        return FolderReport(path, FolderState.FOREIGN, entries, "; ".join(problems))
    return FolderReport(path, FolderState.FOREIGN, entries, why_not)


def _unchanged(path: Path, recorded: dict) -> bool:
    try:
        if not path.is_file() or path.stat().st_size != recorded.get("bytes"):
            return False
        return file_digest(path) == recorded.get("sha256")
    except OSError:
        return False


# --------------------------------------------------------------------------- refusing


def refuse_to_overwrite(report: FolderReport, output_flag: str = "--output", force_flag: str = "--force", writes: tuple[str, ...] = SPLIT_FILES) -> VerlfitError:
    """The error for writing prepared data into ``report.path`` when it is not :attr:`FolderReport.writable`
    (exit status 2): what the folder holds, and the fix: another ``output_flag``, or ``force_flag`` naming exactly the
    files it would replace and those it would keep.

    Args:
        report: from :func:`data_folder_state`.
        output_flag: the option naming the folder in the command the user ran.
        force_flag: the option that allows the write.
        writes: the file names the write puts in the folder.
    """
    path = report.path
    if report.state is FolderState.NOT_A_FOLDER:
        return VerlfitError(
            f"{output_flag} {path} {report.reason.removeprefix('it ')}",
            fix=f"pass {output_flag} a folder (it is created if missing)",
            exit_code=2,
        )
    shown = ", ".join(report.entries[:8]) + (f" and {len(report.entries) - 8} more" if len(report.entries) > 8 else "")
    kind = "data in verl's format that verlfit did not write" if report.state is FolderState.VERL_FORMAT else "files verlfit did not write"
    replaced = [name for name in writes if name in report.entries]
    kept = [name for name in report.entries if name not in writes]
    kept_text = f"{', '.join(kept[:8])}{' and more' if len(kept) > 8 else ''} as they are"
    if replaced:
        force = f"{force_flag} to write there anyway: it replaces {', '.join(replaced)}" + (f" and keeps {kept_text}" if kept else "")
    else:
        force = f"{force_flag} to write {', '.join(writes)} there anyway" + (f"; it keeps {kept_text}" if kept else "")
    return VerlfitError(
        f"{output_flag} {path} holds {kind} ({shown}; {report.reason}): verlfit writes prepared data only into a folder "
        "that is absent, empty, or holds data it prepared itself",
        fix=f"pass {output_flag} a new folder, or {force}",
        exit_code=2,
    )


def check_writable(path: str | os.PathLike, force: bool = False, keys: DataKeys = DataKeys(), output_flag: str = "--output") -> FolderReport:
    """The folder's :class:`FolderReport` when verlfit may write prepared data there (``force`` allows any folder);
    raises :func:`refuse_to_overwrite`'s error otherwise (a file in the folder's place is refused even with
    ``force``)."""
    report = data_folder_state(path, keys)
    if report.state is FolderState.NOT_A_FOLDER or not (report.writable or force):
        raise refuse_to_overwrite(report, output_flag=output_flag)
    return report
