"""Issue 26 phase B: ``verlfit train`` with the user's own task: ``--reward-function FILE[:NAME]`` (and verl's
``custom_reward_function`` keys after ``--``) checked on every training and test row before launch, copied into the run
directory and recorded in run.json; data verl cannot score refused with the fix; the user's data folder never
filled with GSM8K; a config.json ``--model`` and a garbage train.parquet refused cleanly."""

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from verlfit import cli
from verlfit.errors import VerlfitError

REWARD = """
def score(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str.strip() == ground_truth else 0.0


def helper(text):
    return text
"""


def own_data(folder: Path, data_source="arith", prompt_key="prompt", rows=40, test=True) -> Path:
    """train.parquet (and test.parquet) in verl's format with the user's own data_source: ground truth str(2 * i)."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "data_source": [data_source] * rows,
            prompt_key: [[{"role": "user", "content": f"{i} + {i}?"}] for i in range(rows)],
            "ability": ["math"] * rows,
            "reward_model": [{"style": "rule", "ground_truth": str(2 * i)} for i in range(rows)],
            "extra_info": [{"index": i} for i in range(rows)],
        }
    )
    pq.write_table(table, folder / "train.parquet")
    if test:
        pq.write_table(table.slice(0, 8), folder / "test.parquet")
    return folder


def reward_file(folder: Path, text=REWARD, name="my_reward.py") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def dry_run(tmp_path, *argv):
    return cli.main(
        ["train", "--profile", "p40", "--plan", "off", "--dry-run", "--run-dir", str(tmp_path / "run"), *argv]
    )


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def test_dry_run_checks_and_prints_the_reward_function_and_points_verl_at_the_run_directorys_copy(tmp_path, capsys):
    data, reward = own_data(tmp_path / "data"), reward_file(tmp_path / "task")
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", f"{reward}:score") == 0
    out = unwrapped(capsys.readouterr().out)
    # every row (40 training, 8 test), twice each: the ground truth (1.0), an empty response (0.0)
    assert (
        f"note: reward function: score in {reward} (called on every row as the ground truth, then as an empty response,"
        " in a scratch directory: 40 training and 8 test rows; the ground truth scored 1 x48; an empty response scored"
        " 0 x48)" in out
    )
    assert (
        f"custom_reward_function.path={tmp_path.resolve() / 'run' / 'reward' / 'my_reward.py'} \\"
        " custom_reward_function.name=score \\" in out
    )


def test_a_reward_printing_on_every_call_is_summarised_in_the_dry_run_not_poured_out(tmp_path, capfd):
    data = own_data(tmp_path / "data")
    reward = reward_file(
        tmp_path / "task",
        REWARD.replace("def score(", "def quiet(")
        + "\n\ndef score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    print('scored', ground_truth)\n    return quiet(data_source, solution_str, ground_truth)\n",
    )
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", f"{reward}:score") == 0
    out, err = capfd.readouterr()
    assert "scored" not in err  # 96 calls, none of their prints on the terminal
    assert (
        "the ground truth scored 1 x48; an empty response scored 0 x48; it printed 96 lines while checked (first"
        " 'scored 0', 'scored 0', 'scored 2'), which verl's workers print too, at every call of every step)"
        in unwrapped(out)
    )


def test_a_wrong_function_name_exits_2_naming_the_file_and_its_functions(tmp_path, capsys):
    data, reward = own_data(tmp_path / "data"), reward_file(tmp_path / "task")
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", f"{reward}:compute_score") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err == f"verlfit: error: reward function file {reward} has no function 'compute_score' (its functions: helper,"
        f" score)\n  fix: pass --reward-function {reward}:NAME with one of them, or rename the function\n"
    )


def test_a_reward_that_raises_on_a_row_exits_2_naming_the_row(tmp_path, capsys):
    data = own_data(tmp_path / "data")
    reward = reward_file(
        tmp_path / "task",
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return int(solution_str) =="
        " int(ground_truth)\n",
    )
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", str(reward)) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: compute_score in {reward} raised ValueError: invalid literal for int() with base 10: '' on"
        f" training row 0 of {data / 'train.parquet'} (data_source 'arith', ground truth '0') with an empty response as"
        " the response\n" in err
    )


def test_the_keys_after_the_separator_go_through_the_same_check_and_are_made_absolute(tmp_path, capsys, monkeypatch):
    from verlfit.commands.train import prepare_launch

    data = own_data(tmp_path / "data")
    reward_file(tmp_path / "task")
    monkeypatch.chdir(tmp_path / "task")
    argv = ["--data", str(data), "--", "custom_reward_function.path=my_reward.py", "custom_reward_function.name=score"]
    plan = prepare_launch(
        cli.build_parser().parse_args(
            ["train", "--profile", "p40", "--plan", "off", "--dry-run", "--run-dir", str(tmp_path / "run"), *argv]
        ),
        environ={},
        gpu=None,
        detect_gpu=False,
    )
    assert str(plan.reward_function) == f"{tmp_path / 'task' / 'my_reward.py'}:score"
    assert [o for o in plan.overrides if o.startswith("custom_reward_function.")] == [
        f"custom_reward_function.path={tmp_path.resolve() / 'run' / 'reward' / 'my_reward.py'}",
        "custom_reward_function.name=score",
    ]
    assert plan.settings.extra_overrides == []  # verlfit sets them, to the copy
    assert (
        dry_run(
            tmp_path,
            "--data",
            str(data),
            "--",
            "custom_reward_function.path=my_reward.py",
            "custom_reward_function.name=nope",
        )
        == 2
    )
    assert (
        f"reward function file {tmp_path / 'task' / 'my_reward.py'} has no function 'nope' (its functions: helper,"
        " score)" in capsys.readouterr().err
    )
    assert (
        dry_run(
            tmp_path,
            "--data",
            str(data),
            "--reward-function",
            "my_reward.py:score",
            "--",
            "custom_reward_function.path=my_reward.py",
        )
        == 2
    )
    assert (
        "--reward-function my_reward.py:score and custom_reward_function.path/custom_reward_function.name after -- both"
        " name a reward function" in capsys.readouterr().err
    )


def test_a_data_source_verl_cannot_score_is_refused_before_launch_with_the_fix(tmp_path, capsys):
    data = own_data(tmp_path / "data", data_source="arith")
    assert dry_run(tmp_path, "--data", str(data)) == 2
    err = capsys.readouterr().err
    assert (
        "verlfit: error: verl 0.4.1 has no scorer for data_source 'arith' (in train.parquet, test.parquet) of"
        f" {data / 'train.parquet'}, {data / 'test.parquet'}" in err
    )
    assert "  fix: pass a reward function: --reward-function FILE.py:FUNCTION" in err


def test_gsm8k_data_without_a_reward_function_says_verls_scorer_is_used(tmp_path, capsys):
    data = own_data(tmp_path / "data", data_source="openai/gsm8k")
    assert dry_run(tmp_path, "--data", str(data)) == 0
    assert (
        "note: reward function: verl's default_compute_score for the data's data_source (called on every row: 40"
        " training and 8 test rows; the ground truth scored 0 x48; an empty response scored 0 x48; 0 for the ground"
        " truth is expected: verl's scorers read the answer in a response's own form (GSM8K's the number after"
        " '####'), which the bare ground truth lacks)" in unwrapped(capsys.readouterr().out)
    )


def test_the_run_directory_holds_a_copy_recorded_in_run_json_and_resume_reuses_it(tmp_path):
    from verlfit.data_folder import file_digest
    from verlfit.commands.train import prepare_launch
    from verlfit.train.run_directory import create_run_directory, resume_plan

    data, reward = own_data(tmp_path / "data"), reward_file(tmp_path / "task")
    plan = prepare_launch(
        cli.build_parser().parse_args(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--run-dir",
                str(tmp_path / "run"),
                "--data",
                str(data),
                "--reward-function",
                f"{reward}:score",
                "--save-freq",
                "1",
                "--steps",
                "3",
            ]
        ),
        environ={},
        gpu=None,
        detect_gpu=False,
    )
    run_dir = create_run_directory(plan, None)
    copy = run_dir.resolve() / "reward" / "my_reward.py"
    assert copy.read_text() == REWARD
    record = json.loads((run_dir / "run.json").read_text())
    assert record["reward_function"] == {
        "path": str(copy),
        "name": "score",
        "source": str(reward),
        "sha256": file_digest(reward),
    }
    reward.write_text("def score(**kwargs):\n    return 0.0\n")  # the user edits the file after the run started
    (run_dir / "checkpoints" / "global_step_1").mkdir()
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("1")
    resumed = resume_plan(run_dir)
    assert f"custom_reward_function.path={copy}" in resumed.overrides
    assert "custom_reward_function.name=score" in resumed.overrides


def test_a_reward_exiting_or_hanging_at_import_fails_the_dry_run_with_exit_2_and_the_users_files_stay(
    tmp_path, capsys, monkeypatch
):
    """issue 44 items 1-3: sys.exit(0) at import made the dry run exit 0 printing nothing; a reward writing notes.txt
    overwrote the user's."""
    data = own_data(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    reward = reward_file(
        tmp_path / "task", "open('notes.txt', 'w').write('reward')\nimport sys\nsys.exit(0)\n" + REWARD
    )
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", f"{reward}:score") == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err == f"verlfit: error: the reward function exited the process while {reward} was imported (SystemExit(0):"
        " sys.exit()"
        " or exit()): verl would lose the worker that imports it\n  fix: remove the exit call from the file (raise an"
        " exception for an error)\n"
    )
    assert (tmp_path / "notes.txt").read_text() == "mine\n" and not (tmp_path / "task" / "notes.txt").exists()


def test_a_reward_importing_a_module_beside_it_trains_with_a_copy_verl_finds_on_pythonpath(
    tmp_path, capsys, monkeypatch
):
    """issue 44 item 4: the run directory's reward folder carries what the reward imports from its own folder, and
    verl's processes get that folder first on PYTHONPATH (verl loads the file by path and adds no folder to
    sys.path)."""
    from verlfit.commands.train import prepare_launch
    from verlfit.train.preflight import start_run

    data = own_data(tmp_path / "data")
    reward = reward_file(
        tmp_path / "task",
        "from helper import same\n\n\ndef score(data_source, solution_str, ground_truth, extra_info=None):\n    return"
        " same(solution_str, ground_truth)\n",
    )
    (tmp_path / "task" / "helper.py").write_text("def same(a, b):\n    return float(a.strip() == b)\n")
    (tmp_path / "task" / "notes.py").write_text("not imported\n")
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", f"{reward}:score") == 0
    assert (
        "it imports helper.py from its folder: copied with it into RUN_DIR/reward, which verl's workers get on"
        " PYTHONPATH)" in unwrapped(capsys.readouterr().out)
    )
    monkeypatch.setattr("verlfit.checks.stack.require", lambda command: None)  # the Python stack is not what is tested
    monkeypatch.setenv("PYTHONPATH", "/opt/mine")
    plan = prepare_launch(
        cli.build_parser().parse_args(
            [
                "train",
                "--profile",
                "p40",
                "--plan",
                "off",
                "--run-dir",
                str(tmp_path / "run"),
                "--data",
                str(data),
                "--reward-function",
                f"{reward}:score",
            ]
        ),
        environ={},
        gpu=None,
        detect_gpu=False,
    )
    run_dir = start_run(plan, skip_checks=True)
    folder = run_dir.resolve() / "reward"
    assert sorted(path.name for path in folder.iterdir()) == ["helper.py", "my_reward.py"]
    assert (folder / "helper.py").read_text() == (tmp_path / "task" / "helper.py").read_text()
    assert plan.environment["PYTHONPATH"] == f"{folder}:/opt/mine"
    assert json.loads((run_dir / "run.json").read_text())["reward_function"]["modules"] == ["helper.py"]
    assert f"export PYTHONPATH={folder}:/opt/mine\n" in (run_dir / "command.sh").read_text()
    # the copy loads from the run directory alone, as verl's workers (and eval of the run) load it
    from verlfit import reward_function as rewards

    (tmp_path / "task" / "helper.py").unlink()
    with rewards.load_reward_function(rewards.RewardFunction(folder / "my_reward.py", "score")) as copy:
        assert copy(data_source="arith", solution_str=" 4", ground_truth="4", extra_info=None) == 1.0


# --------------------------------------------------------------------------- never the user's files


def test_train_refuses_a_data_folder_with_only_the_users_train_parquet_and_writes_nothing(tmp_path, capsys):
    from verlfit.commands.train import prepare_launch
    from verlfit.train.inputs import data_ready

    data = own_data(tmp_path / "data", test=False)
    before = {path.name: path.read_bytes() for path in data.iterdir()}
    plan = prepare_launch(
        cli.build_parser().parse_args(
            ["train", "--profile", "p40", "--plan", "off", "--run-dir", str(tmp_path / "run"), "--data", str(data)]
        ),
        environ={},
        gpu=None,
        detect_gpu=False,
    )
    with pytest.raises(VerlfitError) as caught:
        data_ready(plan.settings, plan.data_keys, prepare=True)
    assert caught.value.exit_code == 2
    assert (
        str(caught.value)
        == f"--data {data.resolve()} holds files verlfit did not write (train.parquet; no verlfit marker) and no"
        " train.parquet and test.parquet in verl's format: verlfit train prepares GSM8K only into a folder that is"
        " absent, empty or holds data it prepared, so it writes nothing there\n  fix: add test.parquet (verl"
        f" validates on it) next to train.parquet in {data.resolve()}, or point --data at a folder holding both"
        " train.parquet and test.parquet (verlfit prepare-data --output NEW_FOLDER makes them from your own files)"
    )
    assert capsys.readouterr().out == ""  # no "preparing GSM8K first"
    assert {path.name: path.read_bytes() for path in data.iterdir()} == before


def test_train_refuses_a_folder_of_other_files_and_uses_verl_data_with_its_own_prompt_key(tmp_path, capsys):
    from verlfit.data_folder import DataKeys
    from verlfit.run_settings import TrainSettings
    from verlfit.train.inputs import data_ready

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "questions.jsonl").write_text('{"q": "2+2?"}\n')
    with pytest.raises(
        VerlfitError,
        match=(
            r"holds files verlfit did not write \(questions\.jsonl; no verlfit marker\).*\n  fix: point --data at a"
            r" folder holding train\.parquet and test\.parquet"
        ),
    ):
        data_ready(TrainSettings(data_dir=str(notes)), DataKeys(), prepare=True)
    assert sorted(path.name for path in notes.iterdir()) == ["questions.jsonl"]
    question = own_data(tmp_path / "question", prompt_key="question")
    before = {path.name: path.read_bytes() for path in question.iterdir()}
    with pytest.raises(
        VerlfitError,
        match=r"train\.parquet lacks prompt; test\.parquet lacks prompt\) .*\n  fix: give them the columns verl reads",
    ):
        data_ready(TrainSettings(data_dir=str(question)), DataKeys(), prepare=True)
    data_ready(
        TrainSettings(data_dir=str(question)), DataKeys(prompt_key="question"), prepare=True
    )  # verl's own data with its key: used as is
    assert capsys.readouterr().out == ""
    assert {path.name: path.read_bytes() for path in question.iterdir()} == before


def test_a_config_json_model_and_a_garbage_train_parquet_are_clean_errors_in_the_dry_run(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    assert dry_run(tmp_path, "--model", str(model / "config.json")) == 2
    assert (
        capsys.readouterr().err
        == f"verlfit: error: --model {model / 'config.json'} is a model's config.json, not a model folder: verl loads"
        f" the weights and the tokenizer from the folder\n  fix: pass --model {model} (the folder holding"
        " config.json, the weights and the tokenizer)\n"
    )
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_bytes(b"not parquet at all")
    (data / "test.parquet").write_bytes(b"not parquet either")
    assert dry_run(tmp_path, "--data", str(data)) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out == ""
    assert err.startswith(f"verlfit: error: {data / 'train.parquet'} does not read as parquet: ")
    assert err.endswith(
        "  fix: prepare the data again (verlfit prepare-data, or verlfit prepare-gsm8k into a new folder), or point"
        " --data at a folder with verl's train.parquet and test.parquet\n"
    )


def test_a_reward_failing_only_on_a_test_row_stops_the_dry_run_naming_the_test_row(tmp_path, capsys):
    """issue 32 items 13-14: the check read 3 training rows; verl validates on test.parquet with the same reward."""
    data = own_data(tmp_path / "data")
    pq.write_table(
        pa.table(
            {
                "data_source": ["arith"],
                "prompt": [[{"role": "user", "content": "x?"}]],
                "ability": ["math"],
                "reward_model": [{"style": "rule", "ground_truth": "x"}],
                "extra_info": [{"index": 0}],
            }
        ),
        data / "test.parquet",
    )
    reward = reward_file(
        tmp_path / "task",
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return"
        " float(int(ground_truth) == 0)\n",
    )
    assert dry_run(tmp_path, "--data", str(data), "--reward-function", str(reward)) == 2
    assert capsys.readouterr().err.startswith(
        f"verlfit: error: compute_score in {reward} raised ValueError: invalid literal for int() with base 10: 'x' on"
        f" test row 0 of {data / 'test.parquet'} (data_source 'arith', ground truth 'x') with the ground truth as the"
        " response\n"
    )


def test_a_reward_file_that_is_not_there_is_refused_even_before_data_is_prepared(tmp_path, monkeypatch, capsys):
    """New-user trial (issue 44): with no prepared data, `train --dry-run --reward-function MISSING.py` (or a symbolic
    link loop) printed the command, exit 0: the check that calls the reward waits for the rows."""
    from verlfit import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    for given, kind in (
        ("nothere.py", "does not exist"),
        ("loop1", "is not reachable (Too many levels of symbolic links)"),
    ):
        assert cli.main(["train", "--dry-run", "--profile", "p40", "--reward-function", given]) == 2
        assert (
            capsys.readouterr().err == f"verlfit: error: --reward-function {tmp_path / given} {kind}\n"
            "  fix: pass the Python file that defines your reward function: --reward-function FILE.py[:FUNCTION]\n"
        )
    assert (
        cli.main(["train", "--dry-run", "--profile", "p40", "--", f"custom_reward_function.path={tmp_path}/x.py"]) == 2
    )
    assert capsys.readouterr().err.startswith(
        f"verlfit: error: custom_reward_function.path {tmp_path / 'x.py'} does not exist"
    )


def test_an_own_reward_with_a_mistyped_data_folder_is_refused_not_trained_on_gsm8k(tmp_path, monkeypatch, capsys):
    """New-user trial: `--data data/shelff` (no such folder) with an own reward passed the dry run, and the launch
    would have prepared GSM8K there and trained the shelf reward on it. The default folder and an existing one still
    mean GSM8K prepared where missing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("VERLFIT_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    own_data(tmp_path / "data" / "shelf")
    reward = reward_file(tmp_path / "task")
    assert dry_run(tmp_path, "--data", "data/shelff", "--reward-function", f"{reward}:score") == 2
    typo = tmp_path / "data" / "shelff"
    assert (
        capsys.readouterr().err
        == f"verlfit: error: --data {typo}: no such folder, and --reward-function {reward} is your own: verlfit would"
        " prepare GSM8K into it and train your reward on GSM8K's rows\n"
        "  fix: check the path, or prepare your task into it first (verlfit prepare-data --train FILE --output"
        f" {typo}); for GSM8K with your reward, verlfit prepare-gsm8k --output {typo}\n"
    )
    assert not (tmp_path / "data" / "shelff").exists()
    # the default GSM8K folder, absent: GSM8K is what it means (the dry run says it would prepare it)
    assert dry_run(tmp_path, "--reward-function", f"{reward}:score") == 0
    assert "checked on the training and test rows once the data is prepared" in unwrapped(capsys.readouterr().out)
