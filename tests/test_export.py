"""verlfit export on real verl 0.4.1 FSDP checkpoints written on CPU (tests/verl_checkpoint_maker.py: two gloo
ranks, FSDP1 FULL_SHARD over a 1-D device mesh, verl's own FSDPCheckpointManager)."""

import errno
import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from verl_checkpoint_maker import write_checkpoint_run
from verlfit import cli, export
from verlfit.errors import VerlfitError


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """A PPO run with actor and critic checkpoints of step 2."""
    return write_checkpoint_run(tmp_path_factory.mktemp("full") / "run", "--critic", "--step", "2")


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A LoRA run (r 4, alpha 8 on q_proj/v_proj), actor only, step 3."""
    return write_checkpoint_run(tmp_path_factory.mktemp("lora") / "run", "--lora", "--step", "3")


def _logits(model_dir, input_ids, cls=None):
    from transformers import AutoModelForCausalLM

    model = (
        (cls or AutoModelForCausalLM).from_pretrained(model_dir, attn_implementation="sdpa", torch_dtype="auto").eval()
    )
    with torch.no_grad():
        return model(input_ids=input_ids).logits, model


def _copy_run(run: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("export"))
    return copy


def test_verl_layout_is_what_the_manager_wrote(full_run):
    step = full_run / "checkpoints" / "global_step_2"
    assert (full_run / "checkpoints" / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert json.loads((step / "actor" / "fsdp_config.json").read_text()) == {"FSDP_version": 1, "world_size": 2}
    names = sorted(p.name for p in (step / "actor").iterdir())
    assert names == [
        "extra_state_world_size_2_rank_0.pt",
        "extra_state_world_size_2_rank_1.pt",
        "fsdp_config.json",
        "huggingface",
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
        "optim_world_size_2_rank_0.pt",
        "optim_world_size_2_rank_1.pt",
    ]
    shard = torch.load(step / "actor" / "model_world_size_2_rank_0.pt", weights_only=False)
    from torch.distributed.tensor import DTensor

    assert isinstance(shard["model.embed_tokens.weight"], DTensor)
    assert shard["model.embed_tokens.weight"]._local_tensor.shape == (32, 32)  # vocab 64 split over 2 ranks


def test_full_export_reloads_with_the_saved_logits(full_run):
    from transformers import AutoModelForTokenClassification, AutoTokenizer, GenerationConfig

    assert cli.main(["export", str(full_run), "--critic"]) == 0
    out = full_run / "export" / "global_step_2"
    reference = torch.load(full_run / "reference_step_2.pt")
    logits, model = _logits(out, reference["input_ids"])
    assert model.dtype == torch.float32
    torch.testing.assert_close(logits, reference["actor_logits"], rtol=0, atol=1e-6)
    values, critic = _logits(out / "critic", reference["input_ids"], AutoModelForTokenClassification)
    assert critic.config.num_labels == 1 and critic.config.architectures == ["Qwen2ForTokenClassification"]
    torch.testing.assert_close(values, reference["critic_logits"], rtol=0, atol=1e-6)
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "float32"
    assert GenerationConfig.from_pretrained(out).temperature == 0.7  # the base model's generation_config.json
    assert AutoTokenizer.from_pretrained(out).eos_token == "<eos>"
    assert sorted(p.name for p in out.parent.iterdir()) == ["global_step_2"]  # no temporary directory left


def test_bfloat16_only_when_asked(full_run, tmp_path):
    out = tmp_path / "bf16"
    export.export(full_run, output=out, dtype="bfloat16")
    reference = torch.load(full_run / "reference_step_2.pt")
    logits, model = _logits(out, reference["input_ids"])
    assert model.dtype == torch.bfloat16
    assert not torch.equal(logits.float(), reference["actor_logits"])
    torch.testing.assert_close(logits.float(), reference["actor_logits"], rtol=0.05, atol=0.05)


def test_lora_merged_and_adapter_only(lora_run):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    reference = torch.load(lora_run / "reference_step_3.pt")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = export.export(lora_run)
    # the merge builds its base from the checkpoint's huggingface/ folder, not the run's --model: PEFT warned that
    # the config's base_model_name_or_path "was renamed" (its advice, "ensure that the correct base model is loaded",
    # is what the merge does); the merged model keeps no PEFT config, so the merge gives none
    assert [str(w.message) for w in caught if "base_model_name_or_path" in str(w.message)] == []
    assert merged.output == lora_run / "export" / "global_step_3" and merged.written == {"actor": "model"}
    logits, model = _logits(merged.output, reference["input_ids"])
    assert not any("lora" in name for name, _ in model.named_parameters())
    torch.testing.assert_close(logits, reference["actor_logits"], rtol=0, atol=1e-5)
    base_logits, _ = _logits(lora_run / "base", reference["input_ids"])
    assert (base_logits - reference["actor_logits"]).abs().max() > 1e-3  # the adapter changed the model
    adapter = export.export(lora_run, adapter_only=True)
    assert adapter.output == lora_run / "export" / "global_step_3-adapter"
    config = json.loads((adapter.output / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], sorted(config["target_modules"]), config["base_model_name_or_path"]) == (
        4,
        8.0,
        ["q_proj", "v_proj"],
        str(lora_run / "base"),
    )
    peft_model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(lora_run / "base", attn_implementation="sdpa"), adapter.output
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(
            peft_model(input_ids=reference["input_ids"]).logits, reference["actor_logits"], rtol=0, atol=1e-6
        )


def test_an_nf4_base_without_its_constants_is_refused_for_a_merge_and_its_adapter_exported_alone(
    lora_run, tmp_path, monkeypatch
):
    # patch 0028's checkpoint holds each adapted Linear of the layers packed as a (n, 1) tensor, the quantisation
    # constants in a file beside it: here the lora run's shards with q_proj's weights packed that way and no such file
    # (tests/patches/test_frozen_base_nf4.py exports a real one)
    real = export.merged_state_dict

    def packed(role_dir, dtype=None, fix=None):
        state = real(role_dir, dtype, fix)
        for key in [k for k in state if k.endswith("q_proj.base_layer.weight")]:
            state[key] = torch.zeros(state[key].numel() // 8, 1)  # fp32 elements holding 8 weights each
        return state

    monkeypatch.setattr(export, "merged_state_dict", packed)
    run = _copy_run(lora_run, tmp_path)
    with pytest.raises(VerlfitError) as error:
        export.export(run, output=tmp_path / "merged")
    assert error.value.message == (
        f"{run}/checkpoints/global_step_3/actor: the base was stored in NF4 (--frozen-base-dtype nf4; 2 packed "
        "weights such as base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight) and the checkpoint has "
        "no nf4_quant_state.safetensors (the quantisation constants patch 0028 saves beside the shards), so verlfit "
        "cannot rebuild the base the adapter was trained on"
    )
    assert error.value.fix.startswith("export the adapter with --adapter-only") and error.value.exit_code == 2
    assert not (tmp_path / "merged").exists()
    adapter = export.export(run, output=tmp_path / "adapter", adapter_only=True)
    expected = export.export(lora_run, adapter_only=True).output
    assert adapter.written == {"actor": "adapter"}
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (adapter.output / name).read_bytes() == (expected / name).read_bytes(), name


def test_lora_without_config_yaml_needs_lora_alpha(lora_run, tmp_path):
    run = _copy_run(lora_run, tmp_path)
    (run / "config.yaml").unlink()
    with pytest.raises(VerlfitError, match="lora_alpha is not in the checkpoint") as error:
        export.export(run, output=tmp_path / "out")
    assert "--lora-alpha" in str(error.value)
    assert not list(tmp_path.glob(".out.*"))
    export.export(run, output=tmp_path / "out", adapter_only=True, lora_alpha=8)
    assert json.loads((tmp_path / "out" / "adapter_config.json").read_text())["lora_alpha"] == 8


def test_lora_alpha_other_than_the_runs_own_is_refused_naming_both(lora_run, tmp_path, capsys):
    """New-user trial finding 11: `export RUN --lora-alpha 16` (or 1e30: weights of 8.2e27) replaced the run's own
    lora_alpha 8 from its config.yaml without a word, although the help says the option is for a run without one.
    A differing value is refused naming both; the run's own value is taken as given."""
    run = _copy_run(lora_run, tmp_path)
    for alpha in ("16", "1e30"):
        out = tmp_path / f"out-{alpha}"
        assert cli.main(["export", str(run), "--lora-alpha", alpha, "--output", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"verlfit: error: --lora-alpha {float(alpha):g} differs from the lora_alpha 8 the run trained its actor"
            f" with ({run / 'config.yaml'}, actor_rollout_ref.model.lora_alpha): the adapter would be scaled by"
            f" {float(alpha):g}/rank instead of 8/rank, a model the run never trained\n"
            "  fix: leave out --lora-alpha (export reads the run's own; the option is for a run without config.yaml)\n"
        )
        assert not out.exists()
    export.export(run, output=tmp_path / "same", adapter_only=True, lora_alpha=8)
    assert json.loads((tmp_path / "same" / "adapter_config.json").read_text())["lora_alpha"] == 8


def test_no_checkpoint(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(VerlfitError, match=r"has no checkpoint .*holds no global_step_N") as error:
        export.find_checkpoint(tmp_path)
    assert "--save-freq" in str(error.value)


def test_marker_missing_is_incomplete(full_run, tmp_path, capsys):
    run = _copy_run(full_run, tmp_path)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").unlink()
    with pytest.raises(
        VerlfitError,
        match=(
            r"no complete checkpoint: .*latest_checkpointed_iteration.txt .*missing; global_step_2 was cut off mid-save"
        ),
    ):
        export.find_checkpoint(run)
    with pytest.raises(
        VerlfitError,
        match=(
            r"global_step_2 is incomplete: verl's marker .*latest_checkpointed_iteration.txt is missing, so the save of"
            r" step 2 did not finish"
        ),
    ) as error:
        export.find_checkpoint(run, 2)
    # not "resume the run": verlfit train --resume refuses a run without a marker (new-user trial 4)
    assert (
        error.value.fix
        == "no step is complete, and without verl's marker `verlfit train --resume` refuses the run too (verl would"
        " start again from step 0): start a new run with another --run-dir"
    )
    shutil.copytree(run / "checkpoints" / "global_step_2", run / "checkpoints" / "global_step_5")
    with pytest.raises(VerlfitError, match="global_step_2, global_step_5 were cut off mid-save"):
        export.find_checkpoint(run)
    assert cli.main(["export", str(run), "--step", "4"]) == 2  # no complete step to suggest: not "5, or latest"
    err = capsys.readouterr().err
    assert "has no checkpoint of step 4; saved: global_step_2, global_step_5 (none complete)" in err
    assert (
        "fix: no step is complete, and without verl's marker `verlfit train --resume` refuses the run too" in err
        and "latest" not in err.split("fix:")[1]
    )
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_bytes(
        b"\xff\xfe"
    )  # there, but no step (trial 4: "is missing" before)
    with pytest.raises(VerlfitError) as error:
        export.find_checkpoint(run)
    marker = run / "checkpoints" / "latest_checkpointed_iteration.txt"
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        (
            f"{marker} (verl's marker, written after a checkpoint is saved) holds no step number, so which checkpoint"
            " is the latest is unknown; saved: global_step_2, global_step_5 (global_step_2, global_step_5 with every"
            " file)"
        ),
        "pass --step with one of the complete steps: global_step_2, global_step_5",
        2,
    )


def test_a_damaged_marker_leaves_a_step_with_every_file_exportable_by_step(full_run, tmp_path, capsys):
    """New-user trial: garbage in latest_checkpointed_iteration.txt made a complete global_step_2 "cut off mid-save"
    even with --step 2. With the marker damaged, a step counts as complete when every file of it is there."""
    run = _copy_run(full_run, tmp_path)
    (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("garbage\n")
    assert export.find_checkpoint(run, 2).step == 2
    shutil.rmtree(run / "checkpoints" / "global_step_2" / "actor" / "huggingface")
    with pytest.raises(VerlfitError, match=r"global_step_2 is incomplete: missing "):
        export.find_checkpoint(run, 2)


def test_exporting_a_model_folder_or_another_folder_says_what_it_is(tiny_qwen2_dir, tmp_path, capsys):
    """New-user trial: `verlfit export MODEL_FOLDER` said "train with --save-freq N"."""
    assert cli.main(["export", str(tiny_qwen2_dir), "--output", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err
        == f"verlfit: error: {tiny_qwen2_dir} is a model folder (config.json), not a run directory: it is in Hugging"
        " Face's format already, with nothing to export\n"
        f"  fix: use it as it is (verlfit eval {tiny_qwen2_dir}, or verlfit train --model {tiny_qwen2_dir}); verlfit"
        " export takes a run directory made by verlfit train\n"
    )
    (tmp_path / "notes").mkdir()
    assert cli.main(["export", str(tmp_path / "notes"), "--output", str(tmp_path / "out")]) == 2
    assert (
        capsys.readouterr().err
        == f"verlfit: error: {tmp_path / 'notes'} is not a run directory: it has no checkpoints/ folder and no run"
        " record\n  fix: pass verlfit export the directory verlfit train created, e.g. verlfit export runs/<name>\n"
    )
    assert not (tmp_path / "out").exists()


def test_step_above_marker_and_missing_step(full_run, tmp_path, capsys):
    run = _copy_run(full_run, tmp_path)
    shutil.copytree(run / "checkpoints" / "global_step_2", run / "checkpoints" / "global_step_4")
    with pytest.raises(
        VerlfitError,
        match=r"global_step_4 is incomplete: verl's marker .* says step 2, so the save of step 4 did not finish",
    ) as error:
        export.find_checkpoint(run, 4)
    assert error.value.exit_code == 2
    with pytest.raises(
        VerlfitError, match=r"has no checkpoint of step 3; saved: global_step_2, global_step_4 \(complete: 2\)\n"
    ) as error:
        export.find_checkpoint(run, 3)
    assert (error.value.fix, error.value.exit_code) == ("pass --step with one of the complete steps: global_step_2", 2)
    assert export.find_checkpoint(run).step == 2
    assert export.find_checkpoint(run, "global_step_2").step == 2


def test_newest_complete_skips_a_marked_step_with_missing_files(full_run, tmp_path, capsys):
    run = _copy_run(full_run, tmp_path)
    root = run / "checkpoints"
    shutil.copytree(root / "global_step_2", root / "global_step_5")
    (root / "global_step_5" / "data.pt").unlink()
    (root / "latest_checkpointed_iteration.txt").write_text("5")
    assert cli.main(["export", str(run), "--step", "4"]) == 2
    err = capsys.readouterr().err
    assert "has no checkpoint of step 4; saved: global_step_2, global_step_5 (complete: 2)" in err
    assert "fix: pass --step with one of the complete steps: global_step_2" in err
    with pytest.raises(VerlfitError, match="global_step_5 is incomplete: missing data.pt") as error:
        export.find_checkpoint(run)
    assert (
        error.value.fix
        == "pass --step with one of the complete steps: global_step_2, or resume the run to save a new checkpoint"
    )


@pytest.mark.parametrize("text, expected", [("7", 7), ("global_step_7", 7), ("latest", "latest")])
def test_step_accepts_the_directory_name(text, expected):
    assert export.parse_step(text) == expected


def test_bad_step_is_a_usage_error(full_run, capsys):
    with pytest.raises(SystemExit) as exit:
        cli.main(["export", str(full_run), "--step", "global_step_x"])
    assert exit.value.code == 2
    assert "'global_step_x': a step number (N or global_step_N) or latest" in capsys.readouterr().err
    with pytest.raises(VerlfitError, match="--step 'two'") as error:
        export.find_checkpoint(full_run, "two")
    assert error.value.exit_code == 2


def test_missing_shard_and_data(full_run, tmp_path):
    run = _copy_run(full_run, tmp_path)
    step = run / "checkpoints" / "global_step_2"
    (step / "actor" / "model_world_size_2_rank_1.pt").unlink()
    (step / "data.pt").unlink()
    with pytest.raises(VerlfitError, match=r"is incomplete: missing actor/model_world_size_2_rank_1.pt, data.pt"):
        export.find_checkpoint(run)


def test_an_earlier_export_is_replaced_by_a_rerun_and_a_users_folder_never(full_run, tmp_path, capsys):
    out = tmp_path / "model"
    export.export(full_run, output=out)
    first = (out / "model.safetensors").stat().st_mtime_ns
    assert cli.main(["export", str(full_run), "--output", str(out)]) == 0  # the same export again: replaced
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith(
        f"replaced what verlfit wrote in {out} before: config.json, "
    )  # says what it replaced
    assert "model.safetensors" in printed[-1] and ".verlfit-written.json" not in printed[-1]
    assert (out / "model.safetensors").stat().st_mtime_ns != first
    (out / "old.txt").write_text("mine")
    for force in ([], ["--force"]):
        assert cli.main(["export", str(full_run), "--output", str(out), *force]) == 2
        err = capsys.readouterr().err
        assert (
            f"verlfit: error: --output {out} holds files verlfit did not write (verlfit did not write old.txt): verlfit"
            " never replaces or deletes them, even with --force\n" in err
        )
    assert (out / "old.txt").read_text() == "mine" and (out / "model.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_full_disk_says_so_and_leaves_nothing(full_run, tmp_path, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(export, "_save_role", full)
    with pytest.raises(
        VerlfitError, match=r"not enough disk space at .*: [0-9.]+ GiB free; the model needs about 0.00 GiB"
    ) as error:
        export.export(full_run, output=tmp_path / "out")
    assert "--output on another disk" in str(error.value)
    assert list(tmp_path.iterdir()) == []


def test_full_disk_before_writing(full_run, tmp_path, monkeypatch):
    monkeypatch.setattr(export.shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(10, 10, 1000))
    with pytest.raises(VerlfitError, match=r"not enough disk space .*0.00 GiB free; the model needs about"):
        export.export(full_run, output=tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_critic_and_adapter_only_refused_where_they_do_not_apply(full_run, lora_run, tmp_path):
    with pytest.raises(VerlfitError, match="--critic: .* has no critic"):
        export.export(lora_run, output=tmp_path / "a", critic=True)
    with pytest.raises(VerlfitError, match="--adapter-only: .* holds no LoRA adapter"):
        export.export(full_run, output=tmp_path / "b", adapter_only=True)
    assert list(tmp_path.iterdir()) == []


def test_step_argument(capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", "runs/x", "--step", "two"])
    assert "'two': a step number (N or global_step_N) or latest" in capsys.readouterr().err


def _two_steps(full_run, tmp_path) -> Path:
    """A copy of full_run with a complete older step 1 (a copy of step 2) beside step 2."""
    run = _copy_run(full_run, tmp_path)
    shutil.copytree(run / "checkpoints" / "global_step_2", run / "checkpoints" / "global_step_1")
    return run


def test_truncated_shard_is_named_with_the_older_steps_and_leaves_nothing(full_run, tmp_path, capsys):
    run = _two_steps(full_run, tmp_path)
    shard = run / "checkpoints" / "global_step_2" / "actor" / "model_world_size_2_rank_1.pt"
    shard.write_bytes(shard.read_bytes()[:1000])
    assert cli.main(["export", str(run)]) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: cannot read the shard {shard} (" in err
        and "the file is damaged (truncated or not a torch checkpoint)" in err
    )
    assert "fix: export another complete checkpoint with --step: global_step_1" in err
    assert "Traceback" not in err
    assert not (run / "export").exists()  # the default output's parent was created by this run: removed again


def test_garbage_shard_is_named_and_the_output_parents_it_created_are_removed(full_run, tmp_path):
    run = _copy_run(full_run, tmp_path)
    shard = run / "checkpoints" / "global_step_2" / "actor" / "model_world_size_2_rank_0.pt"
    shard.write_bytes(b"this is not a checkpoint" * 100)
    with pytest.raises(
        VerlfitError, match=r"cannot read the shard .*model_world_size_2_rank_0.pt \(UnpicklingError: "
    ) as error:
        export.export(run, output=tmp_path / "new" / "deeper" / "out")
    assert (
        error.value.fix
        == f"no other checkpoint is saved (only global_step 2): resume the run (verlfit train --resume {run}) to save a"
        " new one"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert not (run / "export").exists()


def test_unwritable_output_is_named_and_directories_it_created_are_removed(full_run, tmp_path, monkeypatch):
    # tests run as root, which no file mode stops: the kernel's answer is faked where the export first writes
    kept = tmp_path / "ro"
    kept.mkdir()
    real_mkdir = Path.mkdir

    def denied(self, *args, **kwargs):
        if self.parent == kept / "sub":
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(VerlfitError) as error:
        export.export(full_run, output=kept / "sub" / "exp")
    assert (
        error.value.message
        == f"cannot write to --output {kept / 'sub' / 'exp'}: permission denied ({kept / 'sub'} is not writable for"
        " this user)"
    )
    assert error.value.fix == "pass --output a folder you can write (it is created if missing)"
    assert list(kept.iterdir()) == []  # sub/ (made by this run) removed, ro/ (there before) kept
    assert kept.is_dir()

    def read_only(self, *args, **kwargs):  # a read-only mount says so (issue 32 item 18: it said permission denied)
        if self.parent == kept / "sub":
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    with pytest.raises(VerlfitError) as error:
        export.export(full_run, output=kept / "sub" / "exp")
    assert (
        error.value.message
        == f"cannot write to --output {kept / 'sub' / 'exp'}: {kept / 'sub'} is on a read-only file system"
    )
    assert list(kept.iterdir()) == []


def test_lora_alpha_on_a_full_run_is_refused(full_run, tmp_path, capsys):
    assert cli.main(["export", str(full_run), "--lora-alpha", "8", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert (
        f"--lora-alpha 8: {full_run / 'checkpoints' / 'global_step_2'} holds no LoRA adapter (a full fine-tuning run),"
        " so there is no alpha to apply" in err
    )
    assert "fix: leave out --lora-alpha" in err
    assert list(tmp_path.iterdir()) == []


NOISE = ("pickling/unpickling of the DeviceMesh", "pkg_resources is deprecated", "Sliding Window Attention is enabled")


def test_export_output_has_none_of_the_known_warnings(full_run, tmp_path):
    """A fresh process as a user runs it: the result line is all there is (the CPU test checkpoint's Qwen2 config
    has sliding_window set, and its shards pickle a DeviceMesh, so each message did show before)."""
    import os

    env = dict(os.environ, PYTHONPATH=str(Path(export.__file__).resolve().parents[1]))
    proc = subprocess.run(
        [sys.executable, "-m", "verlfit", "export", str(full_run), "--output", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"exported step 2 of {full_run} (actor model) to {tmp_path / 'out'}\n"
    assert [line for line in proc.stderr.splitlines() if any(noise in line for noise in NOISE)] == []


def test_quiet_known_warnings_drops_only_those(caplog):
    import logging
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with export.quiet_known_warnings():
            warnings.warn("pkg_resources is deprecated as an API. See ...", UserWarning)
            warnings.warn("another warning", UserWarning)
            logging.getLogger("torch.distributed.device_mesh").warning(
                "It seems like pickling/unpickling of the DeviceMesh occurred before the PGs were created. x"
            )
            logging.getLogger("torch.distributed.device_mesh").warning("something else")
            logging.getLogger("transformers.models.qwen2.modeling_qwen2").warning(
                "Sliding Window Attention is enabled but not implemented for `sdpa`; ..."
            )
        warnings.warn("pkg_resources is deprecated as an API, outside", UserWarning)
    assert [str(w.message) for w in caught] == ["another warning", "pkg_resources is deprecated as an API, outside"]
    assert [r.getMessage() for r in caplog.records] == ["something else"]
    assert logging.getLogger("torch.distributed.device_mesh").filters == []


def test_force_onto_a_file_is_refused_and_the_file_kept(full_run, tmp_path, capsys):
    # a new-user trial: --force replaced a regular file with the model directory
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    assert cli.main(["export", str(full_run), "--output", str(target), "--force"]) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: --output {target} is a file, not a folder: verlfit export writes a folder and never replaces"
        " a file" in err
    )
    assert "fix: pass --output a folder path (it is created if missing)" in err
    assert target.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_exported_file_follows_the_umask(full_run, tmp_path, umask):
    # model.safetensors came out 0600 while config.json and the tokenizer files were 0644
    import os
    import stat

    old = os.umask(umask)
    try:
        result = export.export(full_run, output=tmp_path / "model", critic=True)
    finally:
        os.umask(old)
    modes = {
        str(path.relative_to(result.output)): stat.S_IMODE(path.stat().st_mode) for path in result.output.rglob("*")
    }
    assert modes["model.safetensors"] == modes["config.json"] == modes["critic/model.safetensors"] == 0o666 & ~umask
    assert all(mode == (0o777 if (result.output / name).is_dir() else 0o666) & ~umask for name, mode in modes.items())
    assert stat.S_IMODE(result.output.stat().st_mode) == 0o777 & ~umask


@pytest.fixture(scope="module")
def lora_bf16_run(tmp_path_factory):
    """A LoRA run (r 4, alpha 8 on q_proj/v_proj) whose frozen base was stored in bf16 (patch 0026, fp32 compute), a
    bf16 base checkpoint, actor only, step 3."""
    return write_checkpoint_run(tmp_path_factory.mktemp("lora_bf16") / "run", "--lora", "--bf16-base", "--step", "3")


def test_a_16_bit_lora_base_exports_in_its_dtype_merged_in_fp32(lora_bf16_run, tmp_path):
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    run = lora_bf16_run
    reference = torch.load(run / "reference_step_3.pt")
    shards = export.merged_state_dict(run / "checkpoints" / "global_step_3" / "actor")
    assert {str(v.dtype) for k, v in shards.items() if "lora_" in k} == {"torch.float32"}
    assert {str(v.dtype) for k, v in shards.items() if "lora_" not in k} == {"torch.bfloat16"}
    # the merged model in the base's dtype, each adapted weight merged in fp32 and cast once: W + B A alpha / r
    merged = export.export(run)
    saved = load_file(str(merged.output / "model.safetensors"))
    assert {str(v.dtype) for v in saved.values()} == {"torch.bfloat16"}
    prefix = "base_model.model.model.layers.0.self_attn.q_proj."
    delta = shards[prefix + "lora_B.default.weight"] @ shards[prefix + "lora_A.default.weight"] * (8.0 / 4)
    expected = (shards[prefix + "base_layer.weight"].float() + delta).to(torch.bfloat16)
    assert torch.equal(saved["model.layers.0.self_attn.q_proj.weight"], expected)
    assert not torch.equal(expected, shards[prefix + "base_layer.weight"])  # the adapter moved the weight
    # in fp32 the merged model is the trained one (its base's bf16 values upcast exactly)
    fp32 = export.export(run, output=tmp_path / "fp32", dtype="float32")
    logits, model = _logits(fp32.output, reference["input_ids"])
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    torch.testing.assert_close(logits, reference["actor_logits"], rtol=0, atol=1e-5)
    # the adapter alone stays fp32 and, on the bf16 base checkpoint, gives the trained model
    adapter = export.export(run, adapter_only=True)
    adapter_tensors = load_file(str(adapter.output / "adapter_model.safetensors"))
    assert {str(v.dtype) for v in adapter_tensors.values()} == {"torch.float32"}
    base = AutoModelForCausalLM.from_pretrained(run / "base", attn_implementation="sdpa", torch_dtype=torch.float32)
    peft_model = PeftModel.from_pretrained(base, adapter.output).eval()
    with torch.no_grad():
        logits = peft_model(input_ids=reference["input_ids"]).logits
    torch.testing.assert_close(logits, reference["actor_logits"], rtol=0, atol=1e-6)


# --------------------------------------------------------------------------- issue 32: export loses nothing


def _checksums(folder: Path) -> dict:
    import hashlib

    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize(
    "where, words",
    [
        ("run", "is a run directory (it holds run.json): its checkpoints and records are never replaced"),
        ("run/..", "holds the input {run} of this command: writing there would replace what it reads"),
        ("run/checkpoints", "lies inside the run directory {run}, outside this command's own place there"),
    ],
)
def test_item1_export_onto_its_run_its_parent_or_its_checkpoints_is_refused_with_force_too(
    full_run, tmp_path, monkeypatch, capsys, where, words
):
    run = _copy_run(full_run, tmp_path)
    (tmp_path / "notes.txt").write_text("beside the run")
    before = _checksums(tmp_path)
    monkeypatch.chdir("/")  # the current directory is none of the outputs: their own refusals are said
    output = tmp_path / where
    assert cli.main(["export", str(run), "--output", str(output), "--force"]) == 2
    err = capsys.readouterr().err
    assert words.format(run=run) in err and "Traceback" not in err
    assert "fix: pass --output a new folder" in err
    assert _checksums(tmp_path) == before


def test_item2_export_force_onto_a_users_folder_keeps_it_and_says_the_fix(full_run, tmp_path, capsys):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my notes")
    assert cli.main(["export", str(full_run), "--output", str(folder), "--force"]) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: --output {folder} holds files verlfit did not write (no verlfit marker: verlfit did not write"
        " README.md): verlfit never replaces or deletes them, even with --force\n" in err
    )
    assert f"  fix: pass --output a new folder (it is created), or move your files out of {folder}\n" in err
    assert (
        sorted(p.name for p in folder.iterdir()) == ["README.md"] and (folder / "README.md").read_text() == "my notes"
    )


def test_item8_export_into_the_current_directory_is_refused_and_leaves_nothing(full_run, tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    assert cli.main(["export", str(full_run), "--output", ".", "--force"]) == 2
    err = capsys.readouterr().err
    assert (
        f"verlfit: error: --output . ({work}) is the current directory: verlfit writes its output as a folder of its"
        " own and never into the folder you work in\n" in err
    )
    assert "  fix: pass --output a new folder, e.g. --output ./export-output\n" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"] and list(work.iterdir()) == []
