"""verl 0.4.1 console lines -> records; metrics.jsonl writing and reading.

The logs under tests/data/verl_logs are constructed from verl 0.4.1's formatter (see make_logs.py there).
"""

import math

import json
import os
from pathlib import Path

import pytest

from verlfit import metrics
from verlfit.metrics import (
    MetricsWriter,
    VerlConsoleParser,
    clean_line,
    consolidate,
    parse_log,
    parse_step_line,
    read_metrics,
)

LOGS = Path(__file__).parent / "data" / "verl_logs"
VAL = "val-core/openai/gsm8k/reward/mean@1"


def log_lines(name):
    # newline="" keeps tqdm's carriage returns inside their line, as a byte pipe delivers them
    with open(LOGS / name, encoding="utf-8", newline="") as handle:
        return handle.read().splitlines(keepends=True)


def step_line(name, step):
    return next(line for line in log_lines(name) if f" step:{step} - " in line and "/" in line)


def test_grpo_step_line_values_exactly_as_printed():
    record = parse_step_line(step_line("grpo_a10_interrupted.log", 1))
    assert len(record) == 58  # step + the 57 "name:value" fields of the line
    assert list(record)[:3] == ["step", "global_seqlen/min", "global_seqlen/max"]
    assert list(record)[-3:] == ["perf/total_num_tokens", "perf/time_per_step", "perf/throughput"]
    assert {
        k: record[k]
        for k in (
            "step",
            "global_seqlen/min",
            "actor/entropy",
            "actor/kl_loss",
            "actor/kl_coef",
            "actor/pg_loss",
            "actor/ppo_kl",
            "perf/max_memory_allocated_gb",
            "perf/max_memory_reserved_gb",
            "actor/lr",
            "training/global_step",
            "critic/score/mean",
            "critic/advantages/min",
            "response_length/mean",
            "response_length/clip_ratio",
            "timing_s/generate_sequences",
            "timing_s/reshard",
            "timing_s/gen",
            "timing_s/ref",
            "timing_s/update_actor",
            "timing_s/step",
            "perf/total_num_tokens",
            "perf/throughput",
        )
    } == {
        "step": 1,
        "global_seqlen/min": 20619.0,
        "actor/entropy": 0.409,
        "actor/kl_loss": 0.001,
        "actor/kl_coef": 0.001,
        "actor/pg_loss": -0.004,
        "actor/ppo_kl": -0.0,
        "perf/max_memory_allocated_gb": 18.752,
        "perf/max_memory_reserved_gb": 20.562,
        "actor/lr": 0.0,
        "training/global_step": 1.0,
        "critic/score/mean": 0.203,
        "critic/advantages/min": -1.789,
        "response_length/mean": 204.459,
        "response_length/clip_ratio": 0.016,
        "timing_s/generate_sequences": 6.319,
        "timing_s/reshard": 0.883,
        "timing_s/gen": 7.431,
        "timing_s/ref": 1.77,
        "timing_s/update_actor": 6.033,
        "timing_s/step": 17.567,
        "perf/total_num_tokens": 20619.0,
        "perf/throughput": 1173.762,
    }
    assert isinstance(record["step"], int)


def test_ppo_step_with_validation_and_checkpoint():
    record = parse_step_line(step_line("ppo_p40_finished.log", 4))
    assert record["step"] == 4
    assert record[VAL] == 0.105
    assert (record["timing_s/testing"], record["timing_s/save_checkpoint"], record["timing_s/step"]) == (
        64.119,
        18.604,
        125.667,
    )
    assert (record["critic/vf_loss"], record["critic/vf_explained_var"], record["actor/pg_loss"]) == (
        0.021,
        0.039,
        0.012,
    )


def test_validation_only_line():
    assert parse_step_line("(TaskRunner pid=2841) step:0 - val-core/openai/gsm8k/reward/mean@1:0.005\n") == {
        "step": 0,
        VAL: 0.005,
    }


@pytest.mark.parametrize(
    "decorate",
    [
        lambda s: s,
        lambda s: s + "\n",
        lambda s: s + "\r\n",
        lambda s: "(TaskRunner pid=2841) " + s,
        lambda s: "(WorkerDict pid=3102, ip=10.0.0.2) " + s,
        lambda s: "\x1b[36m(TaskRunner pid=5120)\x1b[0m " + s + "\n",
        lambda s: "(TaskRunner pid=1) " + s + " [repeated 2x across cluster]",
        lambda s: "(TaskRunner pid=1) \rTraining Progress:  25%|██▌       | 1/4 [00:44<02:13, 44.40s/it]\r" + s,
        lambda s: (s + "\n").encode(),
    ],
)
def test_prefixes_ansi_and_endings_do_not_change_the_record(decorate):
    bare = clean_line(step_line("ppo_p40_finished.log", 3))[1]
    assert bare.startswith("step:3 - ")
    assert parse_step_line(decorate(bare)) == parse_step_line(bare)
    assert parse_step_line(bare)["critic/score/mean"] == 0.188


@pytest.mark.parametrize(
    "line",
    [
        "",
        "(TaskRunner pid=2841) step:1 - eggs laid: 16",  # a model response echoed by the reward manager
        "(TaskRunner pid=2841) step:2 - eggs left: 16 - 3 - 4 = 9",
        "(TaskRunner pid=2841) Total training steps: 4",
        "(TaskRunner pid=2841) Setting global step to 20",
        "training/global_step:3.000 - perf/throughput:1.000",
        "(TaskRunner pid=2841) step:3",
        "(TaskRunner pid=2841) global step:3 - a:1.000 - perf/throughput:1.000",
    ],
)
def test_other_lines_are_not_steps(line):
    assert parse_step_line(line) is None


def test_every_cut_of_a_step_line_is_rejected():
    full = clean_line(step_line("grpo_a10_interrupted.log", 2))[1]
    assert parse_step_line(full) is not None
    assert [n for n in range(len(full)) if parse_step_line(full[:n]) is not None] == []


def test_partial_last_line_of_a_log_is_skipped():
    lines = log_lines("ppo_partial_step_line.log")
    assert not lines[-1].endswith("\n") and " step:3 - " in lines[-1]
    assert parse_step_line(lines[-1]) is None
    records, parser = parse_log(lines)
    assert [r["step"] for r in records] == [1, 2]
    assert (parser.total_steps, parser.last_step, parser.finished) == (6, 2, False)


def test_finished_run_records_with_full_precision_validation():
    records, parser = parse_log(log_lines("ppo_p40_finished.log"))
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 4]
    # pprint-ed "Initial validation metrics" replaces the 3-decimal value of the step:0 line
    assert records[0] == {"step": 0, VAL: 0.004548900682335102}
    # step 2's validation has only the console value
    assert records[2][VAL] == 0.066
    # "Final validation metrics" becomes a record at the last step
    assert records[-1] == {"step": 4, "finished": True, VAL: 0.10538286580742987}
    assert (parser.total_steps, parser.last_step, parser.finished) == (4, 4, True)


def test_run_cut_off_mid_step():
    records, parser = parse_log(log_lines("grpo_a10_interrupted.log"))
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert records[0] == {"step": 0, VAL: 0.2850644427596664}
    assert [r["critic/score/mean"] for r in records[1:]] == [0.203, 0.234, 0.266]
    assert (parser.total_steps, parser.last_step, parser.finished) == (10, 3, False)


def test_universal_newlines_read_gives_the_same_records():
    with open(LOGS / "ppo_p40_finished.log", encoding="utf-8") as handle:  # "\r" splits lines here
        assert parse_log(handle)[0] == parse_log(log_lines("ppo_p40_finished.log"))[0]


def test_final_validation_none_marks_finished():
    parser = VerlConsoleParser()
    parser.feed("(TaskRunner pid=1) step:1 - critic/score/mean:0.500 - timing_s/step:2.000 - perf/throughput:10.000")
    assert parser.feed("(TaskRunner pid=1) 'Final validation metrics: None'\n") == [{"step": 1, "finished": True}]
    assert parser.finished


def test_validation_dump_lines_from_another_process_do_not_break_it():
    parser = VerlConsoleParser()
    assert parser.feed("(TaskRunner pid=1) (\"Initial validation metrics: {'val-core/a/reward/mean@1': \"") == []
    assert parser.feed("(WorkerDict pid=2) 'unrelated quoted text'") == []
    assert parser.feed("(TaskRunner pid=1)  'np.float64(0.12345)}')") == []
    assert parser.feed("(TaskRunner pid=1) step:0 - val-core/a/reward/mean@1:0.123") == [
        {"step": 0, "val-core/a/reward/mean@1": 0.12345}
    ]


def test_writer_fsyncs_every_line(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(metrics.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with MetricsWriter(tmp_path) as writer:
        writer.write({"step": 1, "a/b": 0.5})
        assert (tmp_path / "metrics.jsonl").read_text() == '{"step":1,"a/b":0.5}\n'  # on disk before close
        writer.write({"step": 2, "a/b": 0.25})
    assert len(synced) == 2
    assert read_metrics(tmp_path) == [{"step": 1, "a/b": 0.5}, {"step": 2, "a/b": 0.25}]


def test_truncated_last_line_is_skipped_and_the_next_append_starts_clean(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step":1,"x/y":1.0}\n{"step":2,"x/y":2.0}\n{"step":3,"x/')
    assert read_metrics(tmp_path) == [{"step": 1, "x/y": 1.0}, {"step": 2, "x/y": 2.0}]
    with MetricsWriter(tmp_path) as writer:  # a resumed run appends
        writer.write({"step": 3, "x/y": 3.0})
    assert (tmp_path / "metrics.jsonl").read_text().splitlines()[-2:] == ['{"step":3,"x/', '{"step":3,"x/y":3.0}']
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]


def test_read_metrics_without_file(tmp_path):
    assert read_metrics(tmp_path) == []


def test_nan_survives_the_file(tmp_path):
    with MetricsWriter(tmp_path) as writer:
        writer.write(parse_step_line("step:1 - actor/pg_loss:nan - perf/throughput:3.000"))
    record = read_metrics(tmp_path)[0]
    assert record["actor/pg_loss"] != record["actor/pg_loss"]


def train(step, score):
    return {"step": step, "critic/score/mean": score, "timing_s/step": 1.0, "perf/throughput": 1.0}


def test_consolidate_resume_redoes_steps_after_the_checkpoint():
    first_session = [{"step": 0, VAL: 0.1}, train(1, 0.1), train(2, 0.2), train(3, 0.3), train(4, 0.4)]
    resumed = [{"step": 2, VAL: 0.25}, train(3, 0.35)]  # checkpoint at 2, killed during step 4
    merged = consolidate(first_session + resumed)
    assert [(r["step"], r.get("critic/score/mean"), r.get(VAL)) for r in merged] == [
        (0, None, 0.1),
        (1, 0.1, None),
        (2, 0.2, 0.25),
        (3, 0.35, None),
    ]


def test_consolidate_merges_final_marker():
    merged = consolidate([train(1, 0.5), {"step": 1, "finished": True, VAL: 0.123456}])
    assert merged == [{**train(1, 0.5), "finished": True, VAL: 0.123456}]


def test_full_precision_values_from_patch_0008_on_complete_lines():
    line = (
        "(TaskRunner pid=1) step:3 - actor/ppo_kl:2.5e-05 - critic/score/mean:nan - actor/pg_loss:-0.012345678901234 -"
        " perf/throughput:540.1\n"
    )
    record = parse_step_line(line)
    assert record["step"] == 3 and record["actor/ppo_kl"] == 2.5e-05 and record["actor/pg_loss"] == -0.012345678901234
    assert record["perf/throughput"] == 540.1 and math.isnan(record["critic/score/mean"])
    assert parse_step_line(line.rstrip("\n")) is None  # without its newline it may have been cut


def test_consolidate_forgets_a_finished_marker_once_training_goes_on():
    # finished at step 2, then resumed with more --steps: step 3 trained
    merged = consolidate([train(1, 0.1), train(2, 0.2), {"step": 2, "finished": True, VAL: 0.3}, train(3, 0.35)])
    assert [(r["step"], "finished" in r) for r in merged] == [(1, False), (2, False), (3, False)]
    assert merged[1][VAL] == 0.3


def test_drop_after_checkpoint_keeps_what_the_resumed_run_continues(tmp_path):
    lines = [
        json.dumps(r)
        for r in (
            {"step": 0, VAL: 0.1},
            train(1, 0.1),
            train(2, 0.2),
            {"step": 2, "finished": True, VAL: 0.2},
            train(3, 0.3),
        )
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": 4, "critic/sc')  # a kill cut the last record
    assert metrics.drop_after_checkpoint(tmp_path, 2) == 1  # step 3 (the cut line is not a record)
    assert read_metrics(tmp_path) == [{"step": 0, VAL: 0.1}, train(1, 0.1), train(2, 0.2), {"step": 2, VAL: 0.2}]
    assert (tmp_path / "metrics.jsonl").read_text().endswith("}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]  # the temporary file was renamed
    before = (tmp_path / "metrics.jsonl").stat().st_mtime_ns
    assert (
        metrics.drop_after_checkpoint(tmp_path, 2) == 0 and (tmp_path / "metrics.jsonl").stat().st_mtime_ns == before
    )  # nothing to drop: untouched
    assert metrics.drop_after_checkpoint(tmp_path / "absent", 2) == 0 and not (tmp_path / "absent").exists()


def test_a_writer_for_a_resumed_run_continues_from_its_checkpoint(tmp_path):
    """MetricsWriter(resume_step=C) first drops the records after C (verl trains them again), then appends."""
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(train(n, 0.1 * n)) + "\n" for n in (1, 2, 3)))
    with MetricsWriter(tmp_path, resume_step=2) as writer:
        writer.write(train(3, 0.5))
    assert read_metrics(tmp_path) == [train(1, 0.1), train(2, 0.2), train(3, 0.5)]


def test_lines_that_are_not_utf8_are_unreadable_and_named_apart_from_cut_ones(tmp_path):
    """read_metrics' ``not_text``: the lines whose bytes are not UTF-8 (verlfit report refuses a metrics.jsonl of
    nothing else); a line of NUL bytes, what a crash can leave of a cut write, is UTF-8: only unreadable."""
    (tmp_path / "metrics.jsonl").write_bytes(b'{"step": 1, "a": 1.0}\n\xff\xfe\n\x00\x00\x00\n{"step": 2\n')
    unreadable, not_text = [], []
    records = read_metrics(tmp_path, unreadable, not_text=not_text)
    assert [record["step"] for record in records] == [1]
    assert (unreadable, not_text) == ([2, 3, 4], [2])
