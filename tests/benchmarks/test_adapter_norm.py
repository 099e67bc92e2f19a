"""benchmarks/adapter_norm.py: the norms of a LoRA run's saved actor adapters, on adapter files written here with
numbers whose norms are computed by hand."""

import json
import math

import pytest

import adapter_norm  # benchmarks/ is on sys.path (tests/conftest.py)

PREFIX = "base_model.model.model.layers.0.self_attn.q_proj"  # PEFT's adapter key, as patch 0010 writes it


def write_adapter(run_dir, step, a, b, alpha=16, r=2):
    import torch
    from safetensors.torch import save_file

    folder = run_dir / "checkpoints" / f"global_step_{step}" / "actor" / "lora_adapter"
    folder.mkdir(parents=True)
    tensors = (
        {
            f"{PREFIX}.lora_A.weight": torch.tensor(a, dtype=torch.float32),
            f"{PREFIX}.lora_B.weight": torch.tensor(b, dtype=torch.float32),
        }
        if a is not None
        else {}
    )
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "lora_alpha": alpha, "peft_type": "LORA"}))


def test_norms_and_change_between_checkpoints(tmp_path, capsys):
    # A (2 x 3), B (2 x 2); scaling alpha / r = 8
    a = [[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
    write_adapter(tmp_path, 5, a, [[0.0, 0.0], [0.0, 0.0]])  # B = 0: PEFT's initial adapter, no change yet
    write_adapter(tmp_path, 10, a, [[1.0, 0.0], [0.0, 1.0]])  # B = I: delta = 8 * A
    assert adapter_norm.main([str(tmp_path), "--json", str(tmp_path / "out.json")]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["step"], r["tensors"], r["parameters"]) for r in lines] == [(5, 2, 10), (10, 2, 10)]
    assert lines[0]["lora_A_norm"] == pytest.approx(math.sqrt(5)) and lines[0]["lora_B_norm"] == 0.0
    assert lines[0]["delta_norm"] == 0.0 and lines[0]["change_from_previous"] is None
    assert lines[1]["delta_norm"] == pytest.approx(8 * math.sqrt(5))  # ||8 A||_F
    assert lines[1]["change_from_previous"] == pytest.approx(8 * math.sqrt(5))
    assert lines[0]["sha256"] != lines[1]["sha256"]
    assert json.loads((tmp_path / "out.json").read_text()) == lines


def test_an_empty_adapter_and_a_run_without_checkpoints_are_errors(tmp_path, capsys):
    assert adapter_norm.main([str(tmp_path)]) == 1
    assert "no checkpoints/global_step_*/actor/lora_adapter" in capsys.readouterr().err
    write_adapter(tmp_path, 5, None, None)
    assert adapter_norm.main([str(tmp_path)]) == 1
    assert "no lora_A/lora_B pair among its 0 tensors" in capsys.readouterr().err
