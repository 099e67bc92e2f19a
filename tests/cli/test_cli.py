"""verlfit.cli: how every command's end is said."""

import pytest


def test_ctrl_c_in_a_librarys_destructor_as_a_command_finishes_is_one_line_and_130(monkeypatch, capsys):
    """New-user trial: Ctrl-C landing in datasets' Dataset.__del__ as prepare-data finished printed "Exception ignored
    ... KeyboardInterrupt" with a traceback, and verlfit exited 0."""
    from verlfit import cli

    class FreedLate:
        def __del__(self):
            raise KeyboardInterrupt

    def finishes_then_interrupted(args):
        holder = [FreedLate()]
        holder.append(holder)  # a cycle: freed by the garbage collector, not at return
        return 0

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.commands["doctor"].set_defaults(func=finishes_then_interrupted)
    assert cli.main(["doctor"]) == 130
    captured = capsys.readouterr()
    assert captured.err == "verlfit: interrupted as it finished: what it wrote is complete\n"


def _verlfit(argv, cwd, stdout):
    """``python -m verlfit ARGV`` from this checkout with ``stdout`` as its standard output; (exit status, stderr)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from verlfit import cli

    env = dict(os.environ, PYTHONPATH=str(Path(cli.__file__).resolve().parents[1]), HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [sys.executable, "-m", "verlfit", *argv],
        cwd=cwd,
        env=env,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stderr


def test_a_closed_pipe_ends_the_command_quietly_with_141(tmp_path):
    """New-user trial: `verlfit profiles p40 | head -2` printed a BrokenPipeError traceback. Here the reader has
    gone before the first line is written (the read end closed), as when head has read all it wanted."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        status, stderr = _verlfit(["profiles"], tmp_path, write_end)
    finally:
        os.close(write_end)
    assert (status, stderr) == (141, "")


def test_a_closed_pipe_does_not_stop_a_prepare_command_from_writing_its_output_whole(tmp_path):
    """New-user trial: `verlfit prepare-data ... | head -1` ended at the first line it could not print, before its
    output was written. The reader gone before the first line (the read end closed): the folder is still written
    whole, as without the pipe, and the command ends quietly with 141 once it is."""
    import json
    import os

    rows = [{"question": f"What is {n} + {n}?", "answer": f"#### {2 * n}"} for n in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "test"):
        (raw / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    commands = {
        "prepare-data": ["prepare-data", "--train", "rows.jsonl", "--test-fraction", "0.5", "--data-source", "my/x"],
        "prepare-gsm8k": ["prepare-gsm8k", "--input", "raw"],
    }
    for name, argv in commands.items():
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            status, stderr = _verlfit([*argv, "--output", f"{name}-piped"], tmp_path, write_end)
        finally:
            os.close(write_end)
        assert (status, stderr) == (141, "")
        with open(os.devnull, "w") as nowhere:
            assert _verlfit([*argv, "--output", f"{name}-plain"], tmp_path, nowhere) == (0, "")
        piped, plain = tmp_path / f"{name}-piped", tmp_path / f"{name}-plain"
        assert sorted(path.name for path in piped.iterdir()) == [
            ".verlfit-written.json",
            "test.parquet",
            "train.parquet",
        ]
        for split in ("train.parquet", "test.parquet"):
            assert (piped / split).read_bytes() == (plain / split).read_bytes()


def test_standard_output_that_takes_nothing_is_one_line_and_1(tmp_path):
    """New-user trial: `verlfit plan --profile p40 > /dev/full` printed rich's OSError traceback."""
    with open("/dev/full", "w") as full:
        status, stderr = _verlfit(["plan", "--profile", "p40"], tmp_path, full)
    assert (status, stderr) == (1, "verlfit: error: cannot write to standard output: no space left on the disk\n")


def test_a_broken_pipe_in_process_is_141_and_the_real_stdout_is_back(monkeypatch, capsys):
    import sys

    from verlfit import cli

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

    closed = ClosedPipe()
    monkeypatch.setattr(sys, "stdout", closed)
    assert cli.main(["profiles"]) == 141
    assert sys.stdout is closed
    assert capsys.readouterr().err == ""


def test_an_oserror_of_a_file_the_command_writes_keeps_its_traceback(monkeypatch):
    """Only standard output's failures are said in one line: another OSError is a bug and propagates."""
    import errno

    import pytest

    from verlfit import cli

    def fails(args):
        raise OSError(errno.ENOSPC, "No space left on device", "some/file")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser.commands["doctor"].set_defaults(func=fails)
    with pytest.raises(OSError, match="some/file"):
        cli.main(["doctor"])


def test_ctrl_c_while_the_subcommands_are_imported_is_one_line_and_130(monkeypatch, capsys):
    """New-user trial: Ctrl-C in the first half second, while build_parser imports the command modules (and torch
    behind some), printed a KeyboardInterrupt traceback."""
    from verlfit import cli

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.importlib, "import_module", interrupted)
    assert cli.main(["profiles"]) == 130
    assert capsys.readouterr().err == "verlfit: interrupted\n"


def test_a_symbolic_link_loop_as_data_or_run_dir_is_one_line(tmp_path, monkeypatch, capsys):
    """New-user trial: `train --dry-run --data LOOP` printed pathlib's RuntimeError "Symlink loop" traceback."""
    from verlfit import cli

    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--data", "loop1"]) == 2
    assert (
        capsys.readouterr().err == "verlfit: error: --data loop1 is not reachable (Too many levels of symbolic links)\n"
        "  fix: pass a directory with train.parquet and test.parquet, or raw GSM8K files\n"
    )
    assert cli.main(["train", "--dry-run", "--profile", "p40", "--run-dir", "loop1"]) == 2
    assert (
        capsys.readouterr().err
        == "verlfit: error: --run-dir loop1 is not reachable (Too many levels of symbolic links)\n"
        "  fix: pass a directory that does not exist yet: verlfit creates it\n"
    )


def test_a_symbolic_link_loop_as_an_input_file_is_one_line(tmp_path, monkeypatch, capsys):
    """prepare-data --test LOOP and prepare-gsm8k --input LOOP compared resolved paths first, through Path.resolve."""
    from verlfit import cli

    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "rows.jsonl").write_text('{"q": "1+1?", "a": "2"}\n')
    monkeypatch.chdir(tmp_path)
    argv = [
        "prepare-data",
        "--train",
        "rows.jsonl",
        "--test",
        "loop1",
        "--data-source",
        "sums",
        "--output",
        "out",
        "--question-column",
        "q",
        "--answer-column",
        "a",
    ]
    assert cli.main(argv) == 2
    assert (
        capsys.readouterr().err == "verlfit: error: --test loop1 is not reachable (Too many levels of symbolic links)\n"
        "  fix: pass the file holding your questions and answers (.jsonl, .json, .csv or .parquet)\n"
    )
    assert cli.main(["prepare-gsm8k", "--input", "loop1", "--output", "out"]) == 2
    assert (
        capsys.readouterr().err == "verlfit: error: --input loop1 is not a directory\n"
        "  fix: pass the directory holding train/test files (e.g. train.jsonl and test.jsonl)\n"
    )
    assert not (tmp_path / "out").exists()


def test_a_learning_rate_above_1e_2_and_a_negative_export_lora_alpha_are_refused(capsys):
    """New-user trial: `train --actor-lr 10` and `export --lora-alpha -8` were accepted (train refuses a negative
    --lora-alpha)."""
    import pytest

    from verlfit import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--dry-run", "--profile", "p40", "--actor-lr", "10"])
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "verlfit train: error: argument --actor-lr: 10 is above 0.01: AdamW moves every weight by about the learning"
        " rate each step, so the pretrained model would be gone within a few steps (verl's defaults: actor 1e-6,"
        " critic 1e-5; LoRA runs use up to about 1e-4)"
    )
    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--dry-run", "--profile", "p40", "--critic-lr", "0.5"])
    assert exited.value.code == 2
    assert "argument --critic-lr: 0.5 is above 0.01" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        cli.main(["export", "runs/x", "--lora-alpha=-8"])
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "verlfit export: error: argument --lora-alpha: -8 must be a positive, finite number"
    )


def test_a_value_starting_with_a_dash_gets_the_joined_form_as_its_fix(capsys):
    """New-user trial: `--actor-lr -1e-6` and `--output -dash` got argparse's "expected one argument" and no hint."""
    import pytest

    from verlfit import cli

    with pytest.raises(SystemExit) as exited:
        cli.main(["train", "--dry-run", "--profile", "p40", "--actor-lr", "-1e-6"])
    assert exited.value.code == 2
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "verlfit train: error: argument --actor-lr: expected one argument (-1e-6 starts with '-', so it reads as an"
        " option here: join it to the option, --actor-lr=-1e-6)"
    )
    with pytest.raises(SystemExit):
        cli.main(["prepare-gsm8k", "--output", "-dash"])
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "verlfit prepare-gsm8k: error: argument --output: expected one argument (-dash starts with '-', so it reads"
        " as an option here: join it to the option, --output=-dash)"
    )
    with pytest.raises(SystemExit):
        cli.main(["prepare-gsm8k", "--output"])  # no value at all: nothing to join
    assert (
        capsys.readouterr().err.splitlines()[-1]
        == "verlfit prepare-gsm8k: error: argument --output: expected one argument"
    )


def test_an_output_below_a_symbolic_link_loop_names_the_loop_not_file_exists(tmp_path, monkeypatch, capsys):
    """New-user trial: an output through a symbolic link loop said "File exists"."""
    from verlfit import cli

    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "rows.jsonl").write_text('{"q": "1+1?", "a": "2"}\n{"q": "2+2?", "a": "4"}\n')
    monkeypatch.chdir(tmp_path)
    argv = [
        "prepare-data",
        "--train",
        "rows.jsonl",
        "--test-fraction",
        "0.5",
        "--data-source",
        "sums",
        "--output",
        "loop1/out",
        "--question-column",
        "q",
        "--answer-column",
        "a",
    ]
    # refused up front, before any data is read, as refused input (exit 2; new-user trial, finding 14: it read the
    # data, then exited 1)
    assert cli.main(argv) == 2
    assert capsys.readouterr() == (
        "",
        f"verlfit: error: --output loop1/out: {tmp_path / 'loop1'} is a symbolic link loop (Too many levels of"
        " symbolic links), not a folder\n  fix: pass --output a path that does not go through"
        f" {tmp_path / 'loop1'}, or point that link at a folder\n",
    )


# (command line, its exit status, the first line it says): every refusal of what the command line names exits 2,
# argparse's status for a usage error; a problem of the machine keeps 1. {tmp} is the test's folder, the working one.
EXIT_STATUSES = [
    (
        ["prepare-gsm8k", "--tokenizer", "{tmp}/no-tokenizer", "--output", "out"],
        2,
        "verlfit: error: --tokenizer {tmp}/no-tokenizer: no such directory (and not a hub name, which is owner/name)",
    ),
    (
        ["prepare-gsm8k", "--input", "{tmp}/no-input", "--output", "out"],
        2,
        "verlfit: error: --input {tmp}/no-input is not a directory",
    ),
    (
        ["prepare-gsm8k", "--input", "{tmp}/empty-train", "--output", "out"],
        2,
        "verlfit: error: {tmp}/empty-train/train.jsonl: the file is empty",
    ),
    (
        ["prepare-gsm8k", "--input", "{tmp}/binary-train", "--output", "out"],
        2,
        "verlfit: error: cannot read {tmp}/binary-train/train.jsonl line 1: not JSON (Expecting value at character 1)",
    ),
    (
        ["train", "--dry-run", "--resume", "{tmp}/no-run"],
        2,
        "verlfit: error: {tmp}/no-run is not a verlfit run directory (no run.json)",
    ),
    (
        ["report", "{tmp}/no-run"],
        2,
        (
            "verlfit: error: {tmp}/no-run is not a directory; a run directory (made by verlfit train) holds"
            " metrics.jsonl (metrics per step), train.log (verl's output) and run.json"
        ),
    ),
    (
        ["export", "{tmp}/no-run"],
        2,
        "verlfit: error: {tmp}/no-run is not a directory; pass a run directory made by verlfit train",
    ),
    (
        ["eval", "{tmp}/no-model", "--data", "{tmp}/no-data"],
        2,
        "verlfit: error: --data {tmp}/no-data is not there, not a folder of prepared data",
    ),
    (
        ["plan", "--profile", "p40", "--model", "{tmp}/no-model"],
        2,
        "verlfit: error: model '{tmp}/no-model': no such file or directory",
    ),
    (
        ["train", "--dry-run", "--profile", "p40", "--plan", "off", "--", "a.b=${"],
        2,
        "verlfit: error: override 'a.b=${' does not parse: Error parsing override 'a.b=${'",
    ),
    # not the command line's fault: this machine has no GPU to choose a profile by
    (["plan", "--profile", "auto"], 1, "verlfit: error: --profile auto needs a visible GPU"),
]


@pytest.mark.parametrize(
    ("argv", "status", "first_line"), EXIT_STATUSES, ids=[" ".join(case[0]) for case in EXIT_STATUSES]
)
def test_a_refused_input_exits_2_and_a_machine_problem_1(argv, status, first_line, tmp_path, monkeypatch, capsys):
    """New-user trial: most refusals of bad input exited 2, but a missing --tokenizer, missing paths given to
    --resume, report, export and eval, missing or unreadable prepare-gsm8k inputs, plan --model at nothing and an
    override Hydra's lexer refuses exited 1, the status of a run that failed."""
    from verlfit import cli

    (tmp_path / "empty-train").mkdir()
    (tmp_path / "empty-train" / "train.jsonl").write_text("")
    (tmp_path / "binary-train").mkdir()
    (tmp_path / "binary-train" / "train.jsonl").write_bytes(b"\xff\xfe\x00binary")
    for folder in ("empty-train", "binary-train"):
        (tmp_path / folder / "test.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    monkeypatch.chdir(tmp_path)
    assert cli.main([word.replace("{tmp}", str(tmp_path)) for word in argv]) == status
    assert capsys.readouterr().err.splitlines()[0] == first_line.replace("{tmp}", str(tmp_path))


def test_a_standard_output_that_cannot_encode_a_path_prints_it_escaped_after_the_work(tmp_path, monkeypatch, capsys):
    """New-user trial (finding 6): `PYTHONIOENCODING=ascii verlfit prepare-data ... --output ünï` wrote the data, then
    ended with a UnicodeEncodeError traceback, exit 1, printing the path. Characters standard output cannot encode are
    written as backslash escapes, as Python writes them on standard error (the error messages)."""
    import io
    import json
    import sys

    from verlfit import cli

    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"q": f"{n}+{n}?", "a": str(2 * n)}) + "\n" for n in range(4))
    )
    monkeypatch.chdir(tmp_path)
    ascii_only = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", ascii_only)
    argv = ["prepare-data", "--train", "rows.jsonl", "--test-fraction", "0.5", "--data-source", "sums"]
    assert cli.main([*argv, "--question-column", "q", "--answer-column", "a", "--output", "ünï"]) == 0
    ascii_only.flush()
    printed = ascii_only.buffer.getvalue().decode("ascii").splitlines()
    assert printed[-2:] == [
        "train: 2 rows written -> \\xfcn\\xef/train.parquet",
        "test: 2 rows written -> \\xfcn\\xef/test.parquet",
    ]
    assert capsys.readouterr().err == ""
    assert (tmp_path / "ünï" / "train.parquet").is_file()


def test_every_named_choice_takes_any_case():
    """New-user trial: `--emulate P40` and `--algo GRPO` were refused as invalid choices while `--frozen-base-dtype
    NF4` was taken. Every option of every command that picks from names (all lower case) now takes them in any
    case and holds the lower-case name."""
    from verlfit import cli

    parser = cli.build_parser()
    named = [
        (command, action)
        for command, subparser in parser.commands.items()
        for action in subparser._actions
        if action.choices and all(isinstance(choice, str) for choice in action.choices)
    ]
    assert len(named) >= 30
    for command, action in named:
        for choice in action.choices:
            given = choice.upper()
            assert action.type is not None, (command, action.dest)
            assert action.type(given) == choice, (command, action.dest, given)
    plan = parser.parse_args(["plan", "--emulate", "P40", "--algo", "GRPO", "--rollout", "HF", "--dtype", "Float32"])
    assert (plan.emulate, plan.algo, plan.rollout, plan.dtype) == ("p40", "grpo", "hf", "float32")
    # the short dtype names the README and verl's keys write (new-user trial: "bf16 base" in the README, refused)
    for command in ("plan", "train", "doctor"):
        for given, taken in (("bf16", "bfloat16"), ("FP16", "float16"), ("fp32", "float32"), ("nf4", "nf4")):
            assert parser.parse_args([command, "--frozen-base-dtype", given]).frozen_base_dtype == taken
    assert parser.parse_args(["plan", "--dtype", "BF16"]).dtype == "bfloat16"
    assert parser.parse_args(["export", "run", "--dtype", "fp16"]).dtype == "float16"


def test_a_margin_outside_zero_to_one_says_what_it_is_and_the_fix(capsys):
    """New-user trial: `plan --margin 2` said only "--margin 2.0 must be in (0, 1]"."""
    from verlfit import cli

    assert cli.main(["plan", "--emulate", "p40", "--margin", "2"]) == 2
    assert capsys.readouterr().err.splitlines()[-2:] == [
        "verlfit: error: --margin 2 must be in (0, 1]: it is the fraction of the usable memory a plan may fill",
        "  fix: pass a fraction such as --margin 0.9 (the default) or leave it out",
    ]


def test_with_json_a_refusal_and_a_usage_error_are_one_json_object_on_standard_output(capsys):
    """New-user trial: with --json a refusal printed text to standard error and nothing to standard output, which a
    JSON reader cannot parse. The text stays on standard error; the object names the error, the fix, the status."""
    import json

    from verlfit import cli

    assert cli.main(["plan", "--model", "nobody/nothing", "--emulate", "p40", "--json"]) == 2
    out, err = capsys.readouterr()
    refusal = json.loads(out)
    assert refusal["exit_status"] == 2
    assert (
        refusal["error"] == "no config.json for model 'nobody/nothing': not a file, not a directory, not in the "
        "local hub cache"
    )
    assert refusal["fix"].startswith("download it first (huggingface-cli download nobody/nothing")
    assert err == f"verlfit: error: {refusal['error']}\n  fix: {refusal['fix']}\n"
    # argparse's usage error (exit status 2 as SystemExit), after the subcommand's usage on standard error
    with pytest.raises(SystemExit) as usage:
        cli.main(["doctor", "--json", "--lora-rank", "many"])
    out, err = capsys.readouterr()
    assert usage.value.code == 2
    assert json.loads(out) == {
        "error": "argument --lora-rank: 'many' is not a whole number",
        "fix": "verlfit doctor --help lists its options",
        "exit_status": 2,
    }
    assert err.endswith("verlfit doctor: error: argument --lora-rank: 'many' is not a whole number\n")
    # without --json, or with it only among verl's overrides after --, standard output stays empty
    assert cli.main(["plan", "--model", "nobody/nothing", "--emulate", "p40"]) == 2
    assert capsys.readouterr().out == ""
    assert not cli.asks_for_json(["train", "--dry-run", "--", "+trainer.note=--json"])
    assert not cli.asks_for_json(["train", "--", "--json"]) and cli.asks_for_json(["plan", "--json", "--"])
