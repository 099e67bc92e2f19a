"""What a data folder holds, and whether verlfit may write prepared data into it.

verlfit writes ``train.parquet`` / ``test.parquet`` (``prepare-gsm8k``, ``prepare-data``, and ``train`` when it
prepares GSM8K) under the write policy of :mod:`verlfit.output_files`: the folder is built whole and switched in with
the marker (:data:`verlfit.output_files.MARKER_NAME`) listing each file it wrote with its size and SHA-256, so a file
the user replaced or added afterwards makes the folder the user's again. This module says what a data folder holds,
for train and doctor, and words train's refusal of a folder it may not prepare data into (:func:`data_folder_refusal`).

States (:class:`FolderState`), from :func:`data_folder_state`:

* ``absent``: nothing at the path;
* ``empty``: a folder with no entries (temporary files a killed write of an earlier verlfit left inside the folder,
  :data:`LEFTOVER_PATTERN`, do not count);
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
import os
import re
from dataclasses import dataclass
from pathlib import Path

from verlfit.errors import VerlfitError
from verlfit.input_files import kind_of
from verlfit.output_files import LEGACY_MARKER_NAME, MARKER_NAME, file_digest, read_marker, unchanged

__all__ = ["file_digest", "MARKER_NAME"]  # file_digest: the one SHA-256 of a file (verlfit.output_files), used here too

SPLIT_FILES = ("train.parquet", "test.parquet")
# temporary files an interrupted write of an earlier verlfit left inside the folder (it wrote file by file): not the
# user's
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
        """True where ``verlfit train`` may prepare GSM8K into the folder: absent, empty, or prepared by verlfit."""
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
    import pyarrow as pa  # lazy: only where parquet is read or written

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
    import pyarrow as pa  # lazy: only where parquet is read or written

    data_type = normalized_type(data_type)
    if not pa.types.is_list(data_type) or not pa.types.is_struct(data_type.value_type):
        return False
    message = data_type.value_type
    return all(
        message.get_field_index(name) >= 0 and pa.types.is_string(message.field(name).type)
        for name in ("role", "content")
    )


def missing_verl_columns(schema, keys: DataKeys = DataKeys()) -> list[str]:
    """What verl 0.4.1 needs and a parquet schema lacks: the columns of ``keys.required_columns``, the prompt column as
    chat messages (:func:`is_chat_messages`), and ``reward_model.ground_truth`` (the naive reward manager reads
    ``non_tensor_batch["reward_model"]["ground_truth"]``, ``verl/workers/reward_manager/naive.py``). Empty when verl
    can read it."""
    import pyarrow as pa  # lazy: only where parquet is read or written

    missing = [column for column in keys.required_columns if column not in schema.names]
    if keys.prompt_key in schema.names and not is_chat_messages(schema.field(keys.prompt_key).type):
        # verl applies the chat template to it: a plain string would be read as no message at all
        held = normalized_type(schema.field(keys.prompt_key).type)
        missing.append(
            f"{keys.prompt_key} as chat messages (a list of {{role, content}}; it holds "
            f"{'plain strings' if held == pa.string() else held})"
        )
    if "reward_model" in schema.names:
        reward_model = schema.field("reward_model").type
        if not pa.types.is_struct(reward_model) or reward_model.get_field_index("ground_truth") < 0:
            missing.append("reward_model.ground_truth")
    return missing


def _read_schema(path: Path):
    """The schema and row count of a parquet file, or None when it does not read as parquet."""
    import pyarrow  # lazy: only where parquet is read or written
    import pyarrow.parquet as pq  # lazy: only where parquet is read or written

    try:
        metadata = pq.read_metadata(path)
        return metadata.schema.to_arrow_schema(), metadata.num_rows
    except (OSError, pyarrow.ArrowException):
        return None


# --------------------------------------------------------------------------- marker


def written_by(folder: str | os.PathLike) -> str | None:
    """The command recorded in ``folder``'s verlfit marker (``"verlfit prepare-gsm8k"``, ``"verlfit prepare-data"``),
    or None without a readable marker. Says who wrote the folder, not whether its files are unchanged since
    (:func:`data_folder_state` checks that)."""
    marker, _ = read_marker(Path(folder))
    return marker.written_by if marker is not None else None


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
        # a file, a FIFO, a dangling link
        return FolderReport(path, FolderState.NOT_A_FOLDER, reason=f"it is {kind_of(path)}, not a folder")
    entries = tuple(
        sorted(
            name
            for name in os.listdir(path)
            if name not in (MARKER_NAME, LEGACY_MARKER_NAME) and not LEFTOVER_PATTERN.fullmatch(name)
        )
    )
    has_marker = (path / MARKER_NAME).exists() or (path / LEGACY_MARKER_NAME).exists()
    if not entries and not has_marker:
        return FolderReport(path, FolderState.EMPTY, reason="it is empty")
    marker, why_not = read_marker(path)
    listed = marker.files if marker is not None else None
    if listed is not None:
        unlisted = [name for name in entries if name not in listed]
        changed = [name for name in entries if name in listed and not unchanged(path / name, listed[name])]
        if not unlisted and not changed:
            return FolderReport(path, FolderState.VERLFIT_PREPARED, entries, "verlfit wrote every file in it")
        why_not = (
            f"{', '.join(unlisted)} {'was' if len(unlisted) == 1 else 'were'} not written by verlfit"
            if unlisted
            else f"{', '.join(changed)} {'was' if len(changed) == 1 else 'were'} changed after verlfit wrote "
            f"{'it' if len(changed) == 1 else 'them'}"
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
            return FolderReport(
                path,
                FolderState.VERL_FORMAT,
                entries,
                f"it holds train.parquet and test.parquet in verl's format ({why_not})",
            )
        return FolderReport(path, FolderState.FOREIGN, entries, "; ".join(problems))
    return FolderReport(path, FolderState.FOREIGN, entries, why_not)


def data_folder_refusal(report: FolderReport) -> VerlfitError:
    """``verlfit train``'s refusal of a ``--data`` folder that holds files verlfit did not write and is not verl's
    prepared data (a :class:`FolderReport` from :func:`data_folder_state` that is neither ``prepared`` nor
    ``writable``): it prepares nothing there (exit status 2). The fix names what is missing: a split file, or verl's
    columns. The doctor's ``data`` check words its FAIL the same (:func:`verlfit.checks.data_folder.check_data_folder`).
    """
    data = report.path
    if report.state is FolderState.NOT_A_FOLDER:
        return VerlfitError(
            f"--data {data} {report.reason.removeprefix('it ')}",
            fix="pass --data the folder holding train.parquet and test.parquet",
            exit_code=2,
        )
    missing = [name for name in SPLIT_FILES if name not in report.entries]
    shown = ", ".join(report.entries[:8]) + (f" and {len(report.entries) - 8} more" if len(report.entries) > 8 else "")
    if missing and len(missing) < len(SPLIT_FILES):
        have = next(name for name in SPLIT_FILES if name not in missing)
        fix = (
            f"add {missing[0]} (verl {'validates on' if missing[0] == 'test.parquet' else 'trains on'} it) next to "
            f"{have} in {data}, or point --data at a folder holding both train.parquet and test.parquet (verlfit "
            "prepare-data --output NEW_FOLDER makes them from your own files)"
        )
    elif missing:
        fix = (
            "point --data at a folder holding train.parquet and test.parquet (verlfit prepare-data --output "
            "NEW_FOLDER makes them from your own files), or at a new folder for verlfit to prepare GSM8K into"
        )
    elif "lacks" not in report.reason and "does not read as parquet" in report.reason:
        fix = (
            "write them again (verlfit prepare-data --output NEW_FOLDER makes them from your own files), or replace "
            "the file that does not read with a whole copy"
        )
    else:
        fix = (
            "give them the columns verl reads (verlfit prepare-data --output NEW_FOLDER makes them from your own "
            "files), or set data.prompt_key / data.reward_fn_key after -- to your columns"
        )
    return VerlfitError(
        f"--data {data} holds files verlfit did not write ({shown}; {report.reason}) and no train.parquet and "
        "test.parquet in verl's format: "
        "verlfit train prepares GSM8K only into a folder that is absent, empty or holds data it prepared, so it "
        "writes nothing there",
        fix=fix,
        exit_code=2,
    )
