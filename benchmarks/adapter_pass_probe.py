"""Where a 16-bit LoRA pass spends its time: one FSDP-wrapped LoRA model, several ways of holding the adapters.

verl 0.4.1 wraps every trainable leaf of a LoRA model (each lora_A and lora_B Linear) as an FSDP unit of its own
(fsdp_utils.get_fsdp_wrap_policy, is_lora) so that each flat parameter is all frozen or all trainable. In the
16-bit LoRA runs the old log-prob pass (adapter on) cost 3-5x the reference pass (adapter off) over the same rows:
1.1-1.9 ms per adapted Linear per pass (docs/benchmarks.md section 4.7). This probe builds a model of a real shape
(fewer layers), wraps it as verl does, and times one log-prob forward (no grad, autocast) and one training micro-batch
(forward and backward, gradient checkpointing) with the adapters held:

- ``units``: as verl does: each adapter Linear an FSDP unit, fp32, cast to the compute dtype by FSDP's mixed
  precision at each unshard (the 16-bit base's path);
- ``units-no-cast``: each adapter Linear an FSDP unit whose mixed precision keeps fp32 (autocast casts the matmul);
- ``outside``: the adapters left out of FSDP (``ignored_states``): plain fp32 parameters, autocast casts the matmul;
- ``disabled``: the adapter disabled (the reference pass), the floor.

It checks that every variant gives the same log-probs (and the trained ones the same adapter gradients) as
``units``, then prints a table of median times and the per-adapted-Linear cost over ``disabled``, and the torch
profiler's top operators for ``units`` and ``outside``.

Run on a CUDA GPU (one process): ``python3 benchmarks/adapter_pass_probe.py --layers 8``; ``--output DIR`` writes the
table as JSON and the profiler tables as text.
"""

import argparse
import functools
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from peft import LoraConfig, get_peft_model
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp import MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import CustomPolicy
from torch.profiler import ProfilerActivity
from torch.profiler import profile as torch_profile
from transformers import Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "entrypoint"))
from verlfit.synthetic_model import SHAPES as SYNTHETIC_SHAPES  # noqa: E402

# the probed shapes' configs (the hub models' own, less the layer count --layers sets): Qwen2.5-7B's (hidden 3584, MLP
# 18944, 28 query heads, 4 key/value heads, vocabulary 152064), and the learning check's small model for the CPU
SHAPES = {
    "qwen2.5-7b": SYNTHETIC_SHAPES["qwen2.5-7b"],
    "small": {**SYNTHETIC_SHAPES["small"], "vocab_size": 1024},
}
ADAPTER_NAME = re.compile(r"lora_[AB]\.default$")
VARIANTS = ("units", "units-no-cast", "outside", "disabled")


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the CPU runs a small shape to check the code, not to time


def is_adapter_leaf(module):
    """verl's LoRA wrap test (fsdp_utils.py lambda_policy_fn): a leaf module with a trainable weight."""
    return (
        len(list(module.children())) == 0
        and getattr(module, "weight", None) is not None
        and module.weight.requires_grad
    )


def build(shape, layers, rank, variant, compute_dtype, base_dtype, seed=0):
    torch.manual_seed(seed)
    fields = {
        k: v for k, v in SHAPES[shape].items() if k not in ("model_type", "num_hidden_layers", "max_window_layers")
    }
    config = Qwen2Config(num_hidden_layers=layers, attn_implementation="sdpa", torch_dtype="float32", **fields)
    with torch.device(DEVICE):
        model = Qwen2ForCausalLM(config)
    model = get_peft_model(
        model, LoraConfig(r=rank, lora_alpha=rank, target_modules="all-linear", bias="none", task_type="CAUSAL_LM")
    )
    adapters = 0
    for name, param in model.named_parameters():
        if param.requires_grad:
            torch.nn.init.normal_(param, std=0.02)  # lora_B starts at zero: give it values so the adapter counts
            adapters += 1
        else:
            param.data = param.data.to(base_dtype)  # patch 0026: the frozen base stored in 16 bits
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    mixed = MixedPrecision(param_dtype=compute_dtype, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    keep_fp32 = MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    ignored = None

    def policy(module):
        if isinstance(module, Qwen2DecoderLayer):
            return True
        if variant in ("units", "disabled") and is_adapter_leaf(module):
            return True
        if variant == "units-no-cast" and is_adapter_leaf(module):
            return {"mixed_precision": keep_fp32}
        return False

    if variant == "outside":
        ignored = [m for m in model.modules() if is_adapter_leaf(m)]
    wrapped = FSDP(
        model,
        auto_wrap_policy=CustomPolicy(policy),
        mixed_precision=mixed,
        sharding_strategy=ShardingStrategy.NO_SHARD,
        device_id=torch.cuda.current_device() if DEVICE == "cuda" else torch.device("cpu"),
        use_orig_params=False,
        ignored_states=ignored,
        sync_module_states=False,
    )
    return wrapped, adapters


def log_probs(model, input_ids, compute_dtype, disabled):
    with torch.no_grad(), torch.autocast(DEVICE, dtype=compute_dtype, enabled=compute_dtype != torch.float32):
        if disabled:
            with model._fsdp_wrapped_module.disable_adapter():
                logits = model(input_ids=input_ids, use_cache=False).logits
        else:
            logits = model(input_ids=input_ids, use_cache=False).logits
    return torch.log_softmax(logits.float(), -1).gather(-1, input_ids.unsqueeze(-1)).squeeze(-1)


def train_step(model, input_ids, compute_dtype):
    model.zero_grad(set_to_none=True)
    with torch.autocast(DEVICE, dtype=compute_dtype, enabled=compute_dtype != torch.float32):
        logits = model(input_ids=input_ids, use_cache=False).logits
    loss = -torch.log_softmax(logits.float(), -1).gather(-1, input_ids.unsqueeze(-1)).mean()
    loss.backward()
    return loss.detach()


def adapter_grads(model):
    """Each adapter Linear's weight gradient, flattened, by module name: an adapter unit's flat parameter holds just
    that weight (NO_SHARD keeps the whole gradient on it); an adapter outside FSDP holds its own."""
    grads = {}
    for name, module in model.named_modules():
        name = name.replace("_fsdp_wrapped_module.", "")
        if isinstance(module, FSDP) and ADAPTER_NAME.search(name):
            grads[name] = module._flat_param.grad.detach().float().clone()
        elif not isinstance(module, FSDP) and is_adapter_leaf(module) and module.weight.is_leaf:  # not a unit's view
            grads[name] = module.weight.grad.detach().float().flatten().clone()
    return grads


def synchronize():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats):
    times = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def profile(fn, path):
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        synchronize()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
    cuda_table = prof.key_averages().table(sort_by="self_device_time_total", row_limit=12)
    with open(path, "w") as handle:
        handle.write(table + "\n\n" + cuda_table + "\n")
    return table


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--micro-batch", type=int, default=4)
    ap.add_argument("--sequence", type=int, default=768, help="tokens a row (prompt 512 + response 256)")
    ap.add_argument(
        "--dtype",
        default="bfloat16",
        choices=["bfloat16", "float16", "float32"],
        help="compute dtype (FSDP's param_dtype; autocast unless float32: the P40's path)",
    )
    ap.add_argument(
        "--base-dtype", default=None, choices=["bfloat16", "float16"], help="frozen base storage (default: --dtype)"
    )
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--small", action="store_true", help="the learning check's small shape, to check the probe on the CPU"
    )
    ap.add_argument("--output", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo", rank=0, world_size=1)
    if DEVICE == "cuda":
        torch.cuda.set_device(0)
    compute_dtype = getattr(torch, args.dtype)
    shape = "small" if args.small else "qwen2.5-7b"
    generator = torch.Generator(device=DEVICE).manual_seed(1)
    input_ids = torch.randint(
        0, SHAPES[shape]["vocab_size"], (args.micro_batch, args.sequence), device=DEVICE, generator=generator
    )
    rows, reference, reference_grads = [], None, None
    for variant in args.variants.split(","):
        model, adapters = build(
            shape, args.layers, args.rank, variant, compute_dtype, getattr(torch, args.base_dtype or args.dtype)
        )
        disabled = variant == "disabled"
        forward = functools.partial(log_probs, model, input_ids, compute_dtype, disabled)
        values = forward()
        for _ in range(2):
            forward()
        forward_s, forward_all = timed(forward, args.repeats)
        row = {
            "variant": variant,
            "adapter_linears": adapters // 2,
            "forward_s": forward_s,
            "forward_all_s": forward_all,
        }
        if reference is None:
            reference = values
        row["log_prob_max_abs_difference"] = float((values - reference).abs().max())
        if not disabled:
            step = functools.partial(train_step, model, input_ids, compute_dtype)
            step()
            grads = adapter_grads(model)
            if reference_grads is None:
                reference_grads = grads
            row["adapter_grad_max_abs_difference"] = max(
                float((grads[name] - reference_grads[name]).abs().max()) for name in reference_grads
            )
            step()
            row["train_s"], row["train_all_s"] = timed(step, args.repeats)
            if variant in ("units", "outside"):
                print(f"--- profiler, {variant}, one log-prob forward (self CPU time)")
                print(profile(forward, os.path.join(args.output, f"profile-forward-{variant}.txt")))
                profile(step, os.path.join(args.output, f"profile-train-{variant}.txt"))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_all_s")}), flush=True)
        del model
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    floor = next((r["forward_s"] for r in rows if r["variant"] == "disabled"), None)
    shape = "a small" if args.small else "Qwen2.5-7B's"
    print(
        f"\n{args.layers} layers of {shape} shape, rank {args.rank}, micro-batch {args.micro_batch} x {args.sequence}"
    )
    print(f"{'variant':<15}{'forward s':>11}{'ms/adapted Linear':>19}{'train s':>10}{'logp diff':>11}{'grad diff':>11}")
    for r in rows:
        per = (
            ""
            if floor is None or r["variant"] == "disabled"
            else f"{(r['forward_s'] - floor) / r['adapter_linears'] * 1e3:.3f}"
        )
        print(
            f"{r['variant']:<15}{r['forward_s']:>11.4f}{per:>19}{r.get('train_s', float('nan')):>10.4f}"
            f"{r['log_prob_max_abs_difference']:>11.3g}{r.get('adapter_grad_max_abs_difference', float('nan')):>11.3g}"
        )
    with open(os.path.join(args.output, "adapter_pass_probe.json"), "w") as handle:
        json.dump({"arguments": vars(args), "torch": torch.__version__, "rows": rows}, handle, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
