"""How much a LoRA run's actor adapter changed: read every ``lora_adapter/`` that verl 0.4.1 saved in a run's
checkpoints (``checkpoints/global_step_N/actor/lora_adapter/adapter_model.safetensors`` and its
``adapter_config.json``, fsdp_workers.py:775-797) and print, per checkpoint, one JSON line:

* ``step``, ``tensors`` (lora_A and lora_B weights), ``parameters``, ``sha256`` of the safetensors file;
* ``lora_A_norm``, ``lora_B_norm``: Frobenius norms over all the A (resp. B) matrices;
* ``delta_norm``: the norm of the weight change the adapter applies, sqrt(sum over modules of
  ||(alpha / r) * B @ A||_F^2). PEFT initialises B to zero, so this is 0 before the first update and is the
  adapter's whole effect on the base weights;
* ``change_from_previous``: the same norm of (delta now - delta at the previous checkpoint): nonzero means the
  adapter moved between the two steps.

    python benchmarks/adapter_norm.py RUN_DIR [--json FILE]

Errors: a run directory without checkpoints, or a checkpoint whose lora_adapter holds no lora_A/lora_B pair
(an empty adapter file is what unpatched verl wrote with PEFT 0.21, patch 0010), exit with status 1 and say which.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path


def _checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    found = []
    for path in (run_dir / "checkpoints").glob("global_step_*/actor/lora_adapter"):
        match = re.fullmatch(r"global_step_(\d+)", path.parent.parent.name)
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def _deltas(adapter_dir: Path) -> tuple[dict, dict]:
    """(module name -> (alpha / r) * B @ A as float64, summary numbers) of one lora_adapter directory."""
    import torch
    from safetensors.torch import load_file

    config = json.loads((adapter_dir / "adapter_config.json").read_text(encoding="utf-8"))
    scaling = config["lora_alpha"] / config["r"]
    file = adapter_dir / "adapter_model.safetensors"
    tensors = load_file(str(file))
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = re.fullmatch(r"(.+)\.(lora_A|lora_B)(?:\.[A-Za-z0-9_]+)?\.weight", key)
        if match:
            pairs.setdefault(match.group(1), {})[match.group(2)] = tensor.double()
    complete = {name: pair for name, pair in pairs.items() if set(pair) == {"lora_A", "lora_B"}}
    if not complete:
        raise ValueError(f"{file}: no lora_A/lora_B pair among its {len(tensors)} tensors")
    deltas = {name: scaling * pair["lora_B"] @ pair["lora_A"] for name, pair in complete.items()}
    summary = {
        "tensors": 2 * len(complete),
        "parameters": sum(pair["lora_A"].numel() + pair["lora_B"].numel() for pair in complete.values()),
        "sha256": hashlib.sha256(file.read_bytes()).hexdigest(),
        "lora_A_norm": math.sqrt(sum(float(pair["lora_A"].square().sum()) for pair in complete.values())),
        "lora_B_norm": math.sqrt(sum(float(pair["lora_B"].square().sum()) for pair in complete.values())),
        "delta_norm": math.sqrt(sum(float(delta.square().sum()) for delta in deltas.values())),
    }
    return deltas, summary


def adapter_changes(run_dir: Path) -> list[dict]:
    """One record per saved actor adapter of ``run_dir``, oldest first (see the module docstring).

    Raises:
        FileNotFoundError: no ``lora_adapter`` under ``run_dir/checkpoints``.
        ValueError: an adapter without any lora_A/lora_B pair, or with other modules than the checkpoint before.
    """
    found = _checkpoints(Path(run_dir))
    if not found:
        raise FileNotFoundError(
            f"{run_dir}: no checkpoints/global_step_*/actor/lora_adapter (a LoRA run saves one per --save-freq steps)"
        )
    records, previous = [], None
    for step, adapter_dir in found:
        deltas, summary = _deltas(adapter_dir)
        record = {"step": step, **summary, "change_from_previous": None}
        if previous is not None:
            if set(previous) != set(deltas):
                raise ValueError(f"{adapter_dir}: adapts other modules than the checkpoint before it")
            record["change_from_previous"] = math.sqrt(
                sum(float((deltas[name] - previous[name]).square().sum()) for name in deltas)
            )
        records.append(record)
        previous = deltas
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description="Norms of a LoRA run's saved actor adapters and their change between checkpoints."
    )
    parser.add_argument("run_dir", type=Path, help="a verlfit run directory (with checkpoints/)")
    parser.add_argument("--json", type=Path, help="also write the records as a JSON list to this file")
    args = parser.parse_args(argv)
    try:
        records = adapter_changes(args.run_dir)
    except (FileNotFoundError, ValueError) as error:
        print(f"adapter_norm.py: {error}", file=sys.stderr)
        return 1
    for record in records:
        print(json.dumps(record))
    if args.json:
        with tempfile.NamedTemporaryFile(
            "w", dir=args.json.parent, prefix=f".{args.json.name}.", delete=False
        ) as handle:
            json.dump(records, handle, indent=2)
            handle.write("\n")
        os.replace(handle.name, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
