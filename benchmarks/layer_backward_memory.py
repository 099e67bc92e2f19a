"""What one decoder layer holds while it runs backward: the planner's backward workspace, measured on the CPU.

The planner counts a training micro-batch's moment "backward through the layers" as the saved activations, one
layer's activations again (its recompute under gradient checkpointing) and a backward workspace of
``BACKWARD_WORKSPACE_LAYERS`` layers more (``verlfit.plan.memory.training_activation_bytes``). This probe builds one
decoder layer of a built-in shape (the hub model's own sizes, random weights, fp32), puts verl's LoRA on it (rank 32,
every Linear of the layer, the base frozen: ``get_peft_model``), runs one forward and one backward over ``--tokens``
tokens with the layer checkpointed as verl does (``torch.utils.checkpoint``, ``use_reentrant=False``), and reads the
process's resident memory around them: the peak (``VmHWM`` in ``/proc/self/status``, reset through
``/proc/self/clear_refs``) over what was resident before the forward. glibc serves every allocation above
``MALLOC_MMAP_THRESHOLD_`` bytes with its own mapping and returns it when freed, so with a low threshold (the script
re-executes itself with 65536 when it is not set) the resident memory follows the live tensors. It prints, in MiB,
the checkpointed layer's saved input, its peak during backward, the planner's one-layer activations
(``layer_activation_bytes`` with the adapter widths) and the measured backward workspace in layers:
``(backward peak - saved input) / layer - 1``.

CPU only and Linux only (``/proc``). The autograd graph is the GPU's; SDPA's CPU kernel is not CUDA's, which leaves the
attention's share (small beside the MLP's in these shapes) as measured here.

Usage: ``python benchmarks/layer_backward_memory.py --model Qwen/Qwen2.5-7B-Instruct --tokens 512``
(``--json FILE`` also writes the numbers). Qwen2 shapes only (Qwen2.5); exit status 2 for another family.
"""

import argparse
import gc
import json
import os
import sys
from pathlib import Path

import torch
from peft import LoraConfig, get_peft_model
from transformers import Qwen2Config
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer, Qwen2RotaryEmbedding

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from verlfit.errors import VerlfitError  # noqa: E402
from verlfit.model_shape import load_model_shape  # noqa: E402
from verlfit.plan.memory import BACKWARD_WORKSPACE_LAYERS, _adapter_widths, layer_activation_bytes  # noqa: E402

MMAP_THRESHOLD = "65536"  # bytes: glibc maps (and unmaps on free) every allocation above it
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
MIB = 2**20


def resident_bytes() -> tuple[int, int]:
    """(resident now, resident peak since the last :func:`reset_peak`) of this process, bytes (/proc/self/status)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def reset_peak() -> None:
    """Reset VmHWM to the current resident size (proc(5), /proc/PID/clear_refs, value 5)."""
    Path("/proc/self/clear_refs").write_text("5")


def measure(model: str, tokens: int, rank: int) -> dict:
    """One checkpointed LoRA decoder layer of ``model``'s built-in shape over ``tokens`` tokens (one sequence), fp32:
    bytes of its saved input and of its backward peak over the resident memory before the forward, and the planner's
    one-layer activations for the same tokens.

    Raises:
        VerlfitError: ``model`` is not a Qwen2 shape.
    """
    shape = load_model_shape(model)
    if shape.model_type != "qwen2":
        raise VerlfitError(
            f"--model {model}: a {shape.model_type} shape; this probe builds Qwen2 decoder layers only",
            fix="pass a Qwen2.5 model (e.g. Qwen/Qwen2.5-7B-Instruct)",
            exit_code=2,
        )
    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        num_hidden_layers=1,
        vocab_size=8,
        attn_implementation="sdpa",
    )
    positions = torch.arange(tokens)[None]
    with torch.no_grad():
        rotary = Qwen2RotaryEmbedding(config)(torch.zeros(1, tokens, shape.hidden_size), positions)

    class CheckpointedLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = Qwen2DecoderLayer(config, 0)

        def forward(self, hidden):
            def run(h):
                return self.layer(h, position_embeddings=rotary, position_ids=positions)[0]

            return torch.utils.checkpoint.checkpoint(run, hidden, use_reentrant=False)

    adapters = LoraConfig(r=rank, lora_alpha=rank, target_modules=LORA_TARGETS)
    layer = get_peft_model(CheckpointedLayer().float(), adapters)
    hidden = torch.randn(1, tokens, shape.hidden_size, requires_grad=True)
    gradient = torch.randn(1, tokens, shape.hidden_size)
    for _ in range(2):  # the adapters' gradients and every lazily made buffer exist before the measured pass
        layer(hidden).backward(gradient)
    hidden.grad = None
    gc.collect()
    before, _ = resident_bytes()
    output = layer(hidden)
    saved, _ = resident_bytes()
    reset_peak()
    output.backward(gradient)
    _, backward_peak = resident_bytes()
    adapter_width = _adapter_widths(shape, "actor", rank, "all-linear")[0]
    planned = layer_activation_bytes(shape, tokens, tokens, "float32", "sdpa", adapter_width)
    return {
        "model": model,
        "tokens": tokens,
        "lora_rank": rank,
        "saved_input_bytes": saved - before,
        "backward_peak_bytes": backward_peak - before,
        "planned_layer_bytes": planned,
        "backward_workspace_layers": (backward_peak - saved) / planned - 1,
        "planner_backward_workspace_layers": BACKWARD_WORKSPACE_LAYERS,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="Qwen/Qwen2.5-7B-Instruct", help="a built-in Qwen2 shape (hub id)")
    parser.add_argument("--tokens", type=int, default=512, help="tokens of the one sequence (default 512)")
    parser.add_argument("--lora-rank", type=int, default=32, help="LoRA rank on every Linear of the layer")
    parser.add_argument("--json", help="also write the numbers (bytes) to this file")
    args = parser.parse_args(argv)
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != MMAP_THRESHOLD:
        # the threshold is read when the process starts: run again with it
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD})
    try:
        result = measure(args.model, args.tokens, args.lora_rank)
    except VerlfitError as error:
        print(f"layer_backward_memory: {error}", file=sys.stderr)
        return 2
    print(
        f"{result['model']}, one LoRA decoder layer (rank {result['lora_rank']}, fp32, checkpointed), "
        f"{result['tokens']} tokens: saved input {result['saved_input_bytes'] / MIB:.1f} MiB, backward peak "
        f"{result['backward_peak_bytes'] / MIB:.1f} MiB; the planner's layer {result['planned_layer_bytes'] / MIB:.1f}"
        f" MiB; backward workspace {result['backward_workspace_layers']:.3f} layers (the planner counts "
        f"{result['planner_backward_workspace_layers']})"
    )
    if args.json:
        temporary = Path(args.json).with_name(Path(args.json).name + ".tmp")
        temporary.write_text(json.dumps(result, indent=1) + "\n")
        temporary.replace(args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
