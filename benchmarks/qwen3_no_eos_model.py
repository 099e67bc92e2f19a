"""A random-weight Qwen3-0.6B-shaped model without an EOS id, for issue 29's device check (stage ``noeos`` of
benchmarks/device_run.py).

    python benchmarks/qwen3_no_eos_model.py --output DIR --tokenizer-dir TOKENIZER_DIR

What the issue ran: a ``Qwen3ForCausalLM`` made from a ``Qwen3Config`` given only the shape, saved by transformers
4.51.3, so neither config.json nor generation_config.json has ``eos_token_id`` (or ``pad_token_id``, ``bos_token_id``):
verl's worker passes the rollout ``eos_token_id=None`` (fsdp_workers.py:654-657), and before patches 0022/0024's fix
the CUDA-graph decoder raised TypeError and the HF rollout RuntimeError. The tokenizer files are copied from
``--tokenizer-dir`` (a folder made by benchmarks/make_model.py: the project's Qwen2.5-style tokenizer, whose EOS is
``<|im_end|>``), so the tokenizer has an EOS the rollout never gets.

Shape: Qwen/Qwen3-0.6B's config.json (28 layers, hidden 1024, 16 heads, 8 KV heads, head_dim 128, intermediate 3072,
vocabulary 151936, tied embeddings, rope_theta 1e6, rms_norm_eps 1e-6, 40960 positions), as recalled and matching a
public copy of that config found with the code search; 596 M parameters (tied), saved in bfloat16 as the checkpoint
(1.2 GB). Deterministic for a seed. Written to a temporary folder next to ``--output`` and renamed, so an
interrupted run leaves no half model; an existing ``--output`` is refused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))

from verlfit.synthetic_model import TOKENIZER_FILES  # noqa: E402

QWEN3_0P6B_SHAPE = dict(
    hidden_size=1024,
    intermediate_size=3072,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    max_window_layers=28,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    attention_bias=False,
    hidden_act="silu",
    initializer_range=0.02,
    use_sliding_window=False,
    sliding_window=None,
    use_cache=True,
)


def qwen3_config(**overrides):
    """``Qwen3Config`` of the Qwen3-0.6B shape without bos/eos/pad ids (``overrides`` replace shape fields, e.g. a
    smaller ``num_hidden_layers`` for a test)."""
    from transformers import Qwen3Config

    return Qwen3Config(**{**QWEN3_0P6B_SHAPE, **overrides}, torch_dtype="bfloat16", architectures=["Qwen3ForCausalLM"])


def make(output: str, tokenizer_dir: str, seed: int = 0, **overrides) -> str:
    """Write the model (safetensors, config.json, generation_config.json) and the tokenizer files of
    ``tokenizer_dir`` to ``output``. Returns ``output``.

    Raises:
        FileExistsError: ``output`` exists (nothing is written).
        FileNotFoundError: ``tokenizer_dir`` has no tokenizer.json (make one with benchmarks/make_model.py
            --tokenizer-only); nothing is written.
    """
    import torch
    from transformers import Qwen3ForCausalLM

    out = Path(output)
    if out.exists():
        raise FileExistsError(f"--output {out} exists; give a new folder (this script never writes into one)")
    if not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"--tokenizer-dir {tokenizer_dir} has no tokenizer.json; make one with "
            "python benchmarks/make_model.py --tokenizer-only --output DIR"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        torch.manual_seed(seed)
        with torch.no_grad():
            model = Qwen3ForCausalLM(qwen3_config(**overrides))
        model.to(torch.bfloat16).save_pretrained(str(tmp), safe_serialization=True)
        for name in TOKENIZER_FILES + ["added_tokens.json"]:
            if (Path(tokenizer_dir) / name).exists():
                shutil.copyfile(Path(tokenizer_dir) / name, tmp / name)
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return output


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=(
            "Make a random Qwen3-0.6B-shaped model whose config and generation config have no EOS id (issue 29)."
        )
    )
    ap.add_argument("--output", required=True, help="new folder for the model (must not exist)")
    ap.add_argument(
        "--tokenizer-dir", required=True, help="folder with the project's tokenizer (benchmarks/make_model.py)"
    )
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    try:
        make(a.output, a.tokenizer_dir, seed=a.seed)
    except (FileExistsError, FileNotFoundError) as exc:
        print(f"qwen3_no_eos_model.py: {exc}", file=sys.stderr)
        return 2
    print(
        f"model: {a.output} (Qwen3-0.6B shape, random weights, no eos_token_id in config.json or"
        " generation_config.json)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
