"""A run directory's files: their names (spelled here and nowhere else in the package), how to tell a run directory,
and the reader of its record ``run.json`` (:func:`load_run`; docs/architecture.md names the functions that still
read it directly).

``verlfit train`` builds a run directory whole and switches it in (:func:`verlfit.train.run_directory.
create_run_directory`, through :func:`verlfit.output_files.build_new_folder`); verl and verlfit then write into it::

    RUN_DIR/
      run.json        RUN_FILE: verlfit train's record (settings, overrides, environment, total steps, pid, outcome)
      command.sh      COMMAND_FILE: the exact verl launch
      config.yaml     CONFIG_FILE: verl's resolved config, when train wrote one
      checkpoints/    CHECKPOINTS_DIR: verl's trainer.default_local_dir (:mod:`verlfit.checkpoints`)
      train.log       LOG_FILE: verl's full output (:mod:`verlfit.progress`)
      metrics.jsonl   METRICS_FILE: one record per step (:mod:`verlfit.metrics`)
      tensorboard/    TENSORBOARD_DIR: verl's TensorBoard logger, with ``--tensorboard``

and the commands' own places in it: ``report/``, ``export/NAME``, ``eval/NAME``. This module reads only: every write
of ``run.json`` (and of any file here) goes through :mod:`verlfit.output_files`, which imports these names to refuse
writing over a run directory; so this module imports nothing of verlfit but its error type.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from verlfit.errors import VerlfitError

RUN_FILE = "run.json"
COMMAND_FILE = "command.sh"
CONFIG_FILE = "config.yaml"
CHECKPOINTS_DIR = "checkpoints"
LOG_FILE = "train.log"
METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"

# what to do about a run.json that cannot be read: report and `train --resume` give the same fix
DAMAGED_RECORD_FIX = (
    f"{RUN_FILE} is verlfit train's record of the run (settings, overrides, total steps), written whole through a "
    "temporary file: a damaged one was edited or copied in part; restore it from a copy, or start a new run with the "
    "same options (the run's command.sh holds its verl command)"
)
# what to do about a folder whose run.json is not verlfit train's
NOT_A_RECORD_FIX = "resume only directories created by `verlfit train`"


class NoRunRecord(VerlfitError):
    """The folder has no ``run.json`` (not a verlfit run directory, or a copied verl log without one): an error for
    ``train --resume``, nothing to warn about for ``report``."""


def is_run_directory(path: Path) -> bool:
    """Whether ``path`` is a run directory: a folder holding ``run.json`` (``verlfit train``) or ``checkpoints/``
    (verl's ``trainer.default_local_dir`` as verlfit sets it)."""
    return (path / RUN_FILE).is_file() or (path / CHECKPOINTS_DIR).is_dir()


def load_run(run_dir: str | os.PathLike) -> dict:
    """``run_dir/run.json``: the record ``verlfit train`` wrote, a JSON object.

    Raises:
        NoRunRecord: there is no ``run.json`` ("... is not a verlfit run directory (no run.json)").
        VerlfitError: ``run_dir`` is a file; ``run.json`` is not valid JSON (fix: :data:`DAMAGED_RECORD_FIX`); it
            cannot be read or decoded as UTF-8, is a folder, or holds JSON that is not an object ("... is not a
            verlfit run record (...)").
    """
    path = Path(run_dir) / RUN_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NoRunRecord(
            f"{run_dir} is not a verlfit run directory (no {RUN_FILE})",
            fix="pass a directory created by `verlfit train`",
            exit_code=2,
        ) from None
    except NotADirectoryError:
        raise VerlfitError(
            f"{run_dir} is a file, not a verlfit run directory",
            fix="pass the directory created by `verlfit train`",
            exit_code=2,
        ) from None
    except json.JSONDecodeError as error:
        raise VerlfitError(f"{path} is not valid JSON ({error})", fix=DAMAGED_RECORD_FIX, exit_code=2) from None
    except (UnicodeDecodeError, OSError) as error:
        raise VerlfitError(
            f"{path} is not a verlfit run record ({type(error).__name__})", fix=NOT_A_RECORD_FIX, exit_code=2
        ) from None
    if not isinstance(record, dict):
        raise VerlfitError(
            f"{path} is not a verlfit run record (a JSON {type(record).__name__}, not an object)",
            fix=NOT_A_RECORD_FIX,
            exit_code=2,
        )
    return record


def record_text(record: dict) -> str:
    """The text of ``run.json`` holding ``record`` (indented JSON, a final newline), what every write of it saves."""
    return json.dumps(record, indent=2) + "\n"


def process_alive(pid, command_fragment: str | None = None) -> bool:
    """True when process ``pid`` (run.json's ``pid``: the ``verlfit train`` process watching verl) exists and, with
    ``command_fragment``, its /proc command line holds it, so that a pid reused after a restart (a container's pid 1)
    does not count."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if command_fragment is None:
        return True
    try:
        return command_fragment.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc: cannot tell, assume it is the run
