"""verl's console output -> one metrics record per step; ``metrics.jsonl`` in the run directory.

What verl 0.4.1 prints (``trainer.logger=['console']``): ``RayPPOTrainer.fit`` calls
``Tracking.log(data=metrics, step=global_steps)`` (``verl/utils/tracking.py``), whose console backend
is ``LocalLogger`` (``verl/utils/logger/aggregate_logger.py``)::

    print(" - ".join([f"step:{step}"] + [f"{k}:{v:.3f}" for k, v in data.items() if isinstance(v, numbers.Number)]))

so one line per step, every number **rounded to 3 decimals** (``actor/ppo_kl`` of 4e-5 prints as
``0.000``; ints such as ``perf/total_num_tokens`` print as ``12288.000``; NaN as ``nan``). The trainer
runs inside the Ray actor ``TaskRunner``, so the driver shows the line as
``(TaskRunner pid=1234) step:3 - global_seqlen/min:... - perf/throughput:552.137`` (worker lines carry
``(WorkerDict pid=..., ip=...)``; a terminal may add ANSI colours; Ray's dedup appends
``[repeated 2x across cluster]``).

Lines of one run, in order (``ray_trainer.py``):

* ``Total training steps: N`` once the dataloaders exist;
* with validation: ``pprint(f"Initial validation metrics: {val_metrics}")`` -- the only place verl prints
  **full precision** (numpy reprs, wrapped over several lines by ``pprint``) -- then ``step:0 - val-core/...``
  (``step:N`` with N the checkpoint's step after a resume);
* per training step: ``step:N - `` then, in insertion order, ``global_seqlen/*``, ``actor/entropy``,
  ``critic/*`` updates, ``actor/*`` updates, ``val-core/*``/``val-aux/*`` on test_freq steps,
  ``training/global_step``, ``training/epoch``, ``critic/score|rewards|advantages|returns|values/*``,
  ``response_length/*``, ``prompt_length/*``, ``timing_s/*``, ``timing_per_token_ms/*`` and last
  ``perf/total_num_tokens``, ``perf/time_per_step``, ``perf/throughput`` (``compute_throughout_metrics``);
  ``perf/max_memory_allocated_gb`` etc. come from the actor update (GiB: bytes / 1024**3);
* after the last step: ``pprint(f"Final validation metrics: {last_val_metrics}")`` (``None`` without validation).

A record is ``{"step": int, <verl metric name>: float, ...}``. Keys without a ``/`` are verlfit's:
``step``; ``time`` (Unix seconds when the line was seen, added by :class:`MetricsWriter` users);
``finished`` (``True`` on the record made from verl's "Final validation metrics" line).
Several records may share a step (the step-0 validation line after a resume, the final line);
:func:`consolidate` merges them.

After resumes, each training step is recorded exactly once. A resumed verl run restarts from its newest complete
checkpoint (step C: ``latest_checkpointed_iteration.txt``) and trains steps C+1, C+2, ... again, so the steps an
interrupted session finished after C are retrained and would be recorded twice. Two rules keep one record a step:

* at the resume, before verl starts, :func:`drop_after_checkpoint` rewrites ``metrics.jsonl`` (temp file and rename)
  without the records of steps after C and without an earlier ``finished`` marker, so the file never holds a step
  from the discarded segment (``verlfit train`` does this through the ``resume_step`` of the
  :class:`MetricsWriter` it opens for its :class:`verlfit.progress.StepWatcher`, :func:`verlfit.train.supervise.launch`;
  ``train.log`` keeps every line of every segment, so nothing read is lost);
* readers take :func:`consolidate`: a training record for step S replaces any earlier records of steps >= S (a
  file written before the first rule, or a log parsed whole, ``verlfit report`` on ``train.log``).

The validation line verl prints at the resume step (``step:C - val-core/...``) and the final marker stay separate
lines of their step; :func:`consolidate` merges them into that step's record.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from pathlib import Path
from typing import Callable, Iterable

from verlfit.output_files import write_file
from verlfit.run_files import METRICS_FILE

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# "(TaskRunner pid=1234) ", "(WorkerDict pid=99, ip=10.0.0.2) ", "(pid=5) ", "(raylet) "
_RAY_PREFIX = re.compile(r"^\((?:[\w.\-]+)?(?: ?pid=\d+)?(?:, ip=[^)]*)?\) ?")
_RAY_DEDUP = re.compile(r"\s*\[repeated \d+x across cluster\].*$")
_STEP_HEAD = re.compile(r"^step:(\d+)(?: - (.*))?$")
# LocalLogger writes f"{v:.3f}": exactly three decimals, or nan / inf / -inf.
_VALUE = re.compile(r"^-?(?:\d+\.\d{3}|nan|inf)$")
# With VERLFIT_CONSOLE_FULL_PRECISION=1 (patch 0008) values are Python float reprs: 2.5e-05, -0.0123, 540.1.
# A repr cannot show that it was cut, so such values are accepted only on a line that ended with its newline.
_EXACT_VALUE = re.compile(r"^-?(?:\d+(?:\.\d+)?(?:e[-+]?\d+)?|nan|inf)$")
_TOTAL_STEPS = re.compile(r"^Total training steps: (\d+)\s*$")
_VAL_DUMP_START = re.compile(r"""^\(?['"](Initial|Final) validation metrics: """)
_VAL_DUMP_ITEM = re.compile(r"""['"]([^'"]+)['"]: (?:np\.\w+\()?(-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf))\)?""")
# verl 0.4.1 puts compute_throughout_metrics last: a training line without it was cut short.
_LAST_TRAINING_KEY = "perf/throughput"


def clean_line(line: str | bytes) -> tuple[str, str]:
    """Split one line of verl's combined output into (Ray prefix, text).

    Strips ANSI escapes, the trailing newline, Ray's dedup suffix and what a carriage return overwrote
    (tqdm's ``\\r`` redraws): ``"(TaskRunner pid=7) step:1 - a:1.000\\n"`` ->
    ``("(TaskRunner pid=7)", "step:1 - a:1.000")``.
    """
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    text = _ANSI.sub("", line).rstrip("\r\n")
    prefix = ""
    match = _RAY_PREFIX.match(text)
    if match and match.end() > 2:
        prefix, text = match.group(0).strip(), text[match.end() :]
    if "\r" in text:
        parts = [part for part in text.split("\r") if part.strip()]
        text = parts[-1] if parts else ""
    return prefix, _RAY_DEDUP.sub("", text).rstrip()


def parse_step_line(line: str | bytes) -> dict | None:
    """Parse one ``step:N - name:value - ...`` line of verl's console logger.

    Args:
        line: one line as printed, with or without its newline, Ray prefix or ANSI colours.

    Returns:
        ``{"step": N, name: float, ...}`` with verl's metric names and values, or ``None``
        for any other line and for a line cut short: a malformed field, a last value without verl's
        three decimals (exact float reprs, from patch 0008, only on a line that ends with its newline), or a training
        line (any key outside ``val-*``) lacking ``perf/throughput``, which verl 0.4.1 prints last.
    """
    complete = line.endswith(b"\n" if isinstance(line, bytes) else "\n")
    value_pattern = _EXACT_VALUE if complete else _VALUE
    _, text = clean_line(line)
    head = _STEP_HEAD.match(text)
    if not head or not head.group(2):
        return None
    record: dict = {"step": int(head.group(1))}
    for field in head.group(2).split(" - "):
        name, sep, value = field.rpartition(":")
        if not sep or not name or not value_pattern.match(value):
            return None
        record[name] = float(value)
    training = any(not name.startswith("val-") for name in record if name != "step")
    if training and _LAST_TRAINING_KEY not in record:
        return None
    return record


def _parse_validation_dump(text: str) -> tuple[str, dict] | None:
    """``"Initial validation metrics: {'k': np.float64(0.1)}"`` -> ``("Initial", {"k": 0.1})``."""
    match = re.match(r"^(Initial|Final) validation metrics: (.*)$", text, re.DOTALL)
    if not match:
        return None
    values = {key: float(value) for key, value in _VAL_DUMP_ITEM.findall(match.group(2))}
    return match.group(1), values


class VerlConsoleParser:
    """Turn verl's combined output, fed line by line in order, into step records.

    On top of :func:`parse_step_line` it reads verl's pprint-ed validation dumps: the "Initial" dump's
    full-precision values replace the rounded ones of the ``step:N`` line that follows it, and the "Final"
    dump becomes a record ``{"step": last step, "finished": True, <full-precision val metrics>}``.

    Attributes:
        total_steps: from ``Total training steps: N``, or ``None`` until verl printed it.
        last_step: the step of the last record returned, or ``None``.
        finished: ``True`` once verl printed its final line (the last step finished).
    """

    _MAX_DUMP_LINES = 64

    def __init__(self) -> None:
        self.total_steps: int | None = None
        self.last_step: int | None = None
        self.finished = False
        self._dump: list[str] | None = None
        self._dump_prefix = ""
        self._initial: dict | None = None

    def feed(self, line: str | bytes) -> list[dict]:
        """Feed one line; return the records it completes (usually none, one for a step line)."""
        prefix, text = clean_line(line)
        if self._dump is not None and prefix == self._dump_prefix and text.strip()[:1] in ("'", '"'):
            self._dump.append(text.strip())
            return self._try_finish_dump()
        total = _TOTAL_STEPS.match(text)
        if total:
            self.total_steps = int(total.group(1))
            return []
        if _VAL_DUMP_START.match(text):
            self._dump, self._dump_prefix = [text.strip()], prefix
            return self._try_finish_dump()
        complete = line.endswith(b"\n" if isinstance(line, bytes) else "\n")
        record = parse_step_line(text + "\n" if complete else text)
        if record is None:
            return []
        if self._initial:
            for name, full in self._initial.items():
                if name in record and _same_at_3_decimals(full, record[name]):
                    record[name] = full
            self._initial = None
        self.last_step = record["step"]
        return [record]

    def _try_finish_dump(self) -> list[dict]:
        joined = "".join(self._dump)
        try:
            value = ast.literal_eval(joined)
        except (SyntaxError, ValueError):
            if len(self._dump) >= self._MAX_DUMP_LINES:
                self._dump = None
            return []
        self._dump = None
        parsed = _parse_validation_dump(value) if isinstance(value, str) else None
        if parsed is None:
            return []
        kind, values = parsed
        if kind == "Initial":
            self._initial = values
            return []
        self.finished = True
        return [{"step": self.last_step if self.last_step is not None else 0, "finished": True, **values}]


def _same_at_3_decimals(full: float, shown: float) -> bool:
    if math.isnan(full) or math.isnan(shown):
        return math.isnan(full) and math.isnan(shown)
    if math.isinf(full) or math.isinf(shown):
        return full == shown
    return abs(full - shown) <= 0.0005 + 1e-9


def parse_log(lines: Iterable[str | bytes]) -> tuple[list[dict], VerlConsoleParser]:
    """Parse a whole verl log (e.g. ``train.log``); return its records and the parser (total steps, finished)."""
    parser = VerlConsoleParser()
    records: list[dict] = []
    for line in lines:
        records.extend(parser.feed(line))
    return records, parser


class MetricsWriter:
    """Append records to ``run_dir/metrics.jsonl``, one JSON object a line, fsync-ed line by line.

    Every finished step survives a kill: each :meth:`write` is flushed and ``os.fsync``-ed before it
    returns. Appending to a file whose last line was cut (an earlier run killed mid-write) first ends that
    line, so the new record starts on a line of its own.

    ``resume_step``: the checkpoint step a resumed run continues from; the file is first made what that run continues
    (:func:`drop_after_checkpoint`: the records of later steps, which verl trains again, are dropped). None: a new run
    (or a session that appends to the file as it is).

    Raises:
        OSError: the file cannot be rewritten (a resume) or opened.
    """

    def __init__(self, run_dir: str | os.PathLike, resume_step: int | None = None) -> None:
        self.path = Path(run_dir) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            drop_after_checkpoint(run_dir, resume_step)
        self._file = open(self.path, "ab")
        if self._file.tell() > 0:
            with open(self.path, "rb") as existing:
                existing.seek(-1, os.SEEK_END)
                if existing.read(1) != b"\n":
                    self._file.write(b"\n")

    def write(self, record: dict) -> None:
        """Append ``record`` as one line and fsync it."""
        self._file.write(json.dumps(record, separators=(",", ":")).encode() + b"\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> "MetricsWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# keys of a record that verlfit writes itself and that are not verl metrics (module docstring)
OWN_KEYS = ("step", "time", "finished")


def _is_utf8(raw: bytes) -> bool:
    """Whether ``raw`` decodes as UTF-8."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_metrics(
    run_dir: str | os.PathLike,
    unreadable: list[int] | None = None,
    not_numbers: list[tuple[int, str]] | None = None,
    keep: Callable[[str], bool] | None = None,
    not_text: list[int] | None = None,
) -> list[dict]:
    """Read ``run_dir/metrics.jsonl`` in file order; ``[]`` when it does not exist.

    Lines that are not a complete JSON object with an integer ``step`` are skipped: the last line of a
    run being written or killed mid-write, and a line an earlier killed run left cut. Their line numbers
    (from 1; blank lines aside) are appended to ``unreadable`` when it is given, so a caller can say so; those
    whose bytes are not UTF-8 (a binary file, not lines verlfit wrote: it writes JSON, UTF-8) to ``not_text`` too,
    when that is given. A line of NUL bytes (what a crash can leave where a write was cut) is UTF-8: only unreadable.

    A metric whose value is not a number (``null``, text, a list: a file edited by hand or written by another
    tool; verl logs only numbers) is read as NaN, as verl's console prints a missing value, so that every reader
    can compute with the record; ``(line, metric)`` of each is appended to ``not_numbers`` when it is given.

    ``keep``: a record holds only the keys it accepts, once every key was checked as above (``verlfit report`` keeps
    what it shows: a 100,000-step run's 70 metrics a step took 1.3 GB held whole).
    """
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return []
    records = []
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                record = json.loads(raw)
            except ValueError:
                record = None
            if (
                isinstance(record, dict)
                and isinstance(record.get("step"), int)
                and not isinstance(record["step"], bool)
                and record["step"] >= 0
            ):
                for key, value in record.items():
                    if key not in OWN_KEYS and not isinstance(value, (int, float)):
                        record[key] = math.nan
                        if not_numbers is not None:
                            not_numbers.append((number, key))
                if keep is not None:
                    record = {key: value for key, value in record.items() if key in OWN_KEYS or keep(key)}
                records.append(record)
            elif raw.strip():
                if unreadable is not None:
                    unreadable.append(number)
                if not_text is not None and not _is_utf8(raw):
                    not_text.append(number)
    return records


def is_training_record(record: dict) -> bool:
    """A record from a training step (not only validation or the final marker): it has ``timing_s/step``."""
    return "timing_s/step" in record


def consolidate(records: Iterable[dict]) -> list[dict]:
    """One record per step, sorted by step, as the run now stands.

    A training record for step S replaces any earlier records of steps >= S (a resumed run redoes the
    steps after its checkpoint); other records (the validation line at step 0 or at the resume step, the
    final marker) are merged into the record of their step, later values winning.
    """
    # Linear in the records (a 100,000-step run): the steps above a training record are looked for only when there
    # are any (the highest step held is kept), and "finished" is popped only from the records holding it.
    by_step: dict[int, dict] = {}
    highest = -1  # the highest step in by_step (steps are >= 0)
    finished: set[int] = set()  # the steps whose record in by_step holds "finished"
    for record in records:
        step = record["step"]
        previous = by_step.get(step, {})
        if is_training_record(record):
            if highest > step:  # a resumed run redoing the steps after its checkpoint
                for later in [s for s in by_step if s > step]:
                    del by_step[later]
                    finished.discard(later)
                highest = step
            if is_training_record(previous):
                previous = {}
            for earlier in finished:  # a run trained on after a "finished" marker (resumed with more --steps)
                by_step[earlier].pop("finished", None)
            finished.clear()
        merged = by_step[step] = {**previous, **record}
        if "finished" in merged:
            finished.add(step)
        highest = max(highest, step)
    return [by_step[step] for step in sorted(by_step)]


def drop_after_checkpoint(run_dir: str | os.PathLike, checkpoint_step: int) -> int:
    """Make ``run_dir/metrics.jsonl`` what a run resumed from the checkpoint of ``checkpoint_step`` continues.

    Keeps, in file order, the records of steps <= ``checkpoint_step`` without their ``finished`` key (the run goes
    on); drops the records of later steps (verl trains those steps again and they are recorded again) and unreadable
    lines (a record cut by a kill). Written by :func:`verlfit.output_files.write_file` (a temporary file in the same
    folder, fsync-ed, renamed over the old one), so a kill during the rewrite leaves either file whole. Nothing to
    drop: the file is left untouched.

    Returns:
        the number of records dropped (cut lines not counted).
    """
    path = Path(run_dir) / METRICS_FILE
    unreadable: list[int] = []
    records = read_metrics(run_dir, unreadable)
    kept = [{k: v for k, v in r.items() if k != "finished"} for r in records if r["step"] <= checkpoint_step]
    dropped = len(records) - len(kept)
    if not dropped and not unreadable and not any("finished" in r for r in records):
        return 0

    write_file(path, b"".join(json.dumps(record, separators=(",", ":")).encode() + b"\n" for record in kept))
    return dropped
