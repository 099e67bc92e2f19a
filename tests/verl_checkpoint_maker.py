"""Write a real verl 0.4.1 FSDP checkpoint on CPU, the way a run of `verlfit train` leaves one.

    python tests/verl_checkpoint_maker.py RUN_DIR --step N [--lora] [--critic] [--world-size 2] [--bf16-base]

Each of ``--world-size`` processes (gloo, CPU) builds the same tiny Qwen2 from ``RUN_DIR/base`` (made here by
rank 0's parent), wraps it in FSDP1 the way ``fsdp_workers.py:322-333`` does for the actor (FULL_SHARD,
use_orig_params=False, verl's get_fsdp_wrap_policy, a 1-D "fsdp" device mesh, so the shards are DTensors), takes
one AdamW step so the weights are not the initial ones, and saves with verl's own ``FSDPCheckpointManager`` into
``RUN_DIR/checkpoints/global_step_N/actor`` (and ``critic``: ``AutoModelForTokenClassification`` with
``num_labels=1`` as ``fsdp_workers.py:910-930`` builds it). Rank 0 then writes ``data.pt`` and verl's marker
``latest_checkpointed_iteration.txt`` as ``ray_trainer.py:831-839`` does, and the reference outputs of the
saved modules on fixed token ids: ``RUN_DIR/reference.pt`` = {"input_ids", "actor_logits", "critic_values"}.
``--bf16-base`` (with ``--lora``): the base checkpoint is saved in bf16 (as published checkpoints are) and the frozen
base is stored in bf16 under FSDP mixed precision param_dtype fp32, adapters fp32: what patch 0026 does on the p40
profile (its cast inlined here, since this script runs the pristine verl).
Differences from a GPU run: CPU and gloo instead of CUDA and NCCL, sync_module_states=False (it needs CUDA;
every rank builds the same weights from one seed instead).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

LORA_ALPHA = 8.0
LORA_RANK = 4


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_checkpoint_run(run_dir: Path, *flags: str) -> Path:
    """For the tests: run this script on ``run_dir`` with ``flags`` (its options, e.g. ``"--step", "2"``) and a free
    port in a subprocess (300 s at most); return ``run_dir``. A non-zero exit fails the test with the script's stderr.
    """
    command = [sys.executable, str(Path(__file__).resolve()), str(run_dir), "--port", str(_free_port()), *flags]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def make_base(base: Path, dtype=torch.float32) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{f"w{i}": i + 3 for i in range(61)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}w0 {% endif %}"
    )
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=1,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=1, pad_token_id=0, temperature=0.7, do_sample=True)
    model.to(dtype).save_pretrained(base)
    tokenizer.save_pretrained(base)


def worker(rank: int, world_size: int, args) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(args.port),
        RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_RANK=str(rank),
    )
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("fsdp",))
    run, base = Path(args.run_dir), Path(args.run_dir) / "base"
    tokenizer = AutoTokenizer.from_pretrained(base)
    step_dir = run / "checkpoints" / f"global_step_{args.step}"
    input_ids = torch.tensor([[5, 9, 13, 17, 21, 25, 29, 33], [40, 41, 42, 3, 4, 5, 6, 7]])
    reference = {"input_ids": input_ids}
    checkpoint_contents = OmegaConf.create(
        {"save_contents": ["model", "optimizer", "extra"], "load_contents": ["model", "optimizer", "extra"]}
    )

    def wrap_train_save(module, role, is_lora):
        torch.manual_seed(1)
        if is_lora:
            from peft import LoraConfig, TaskType, get_peft_model

            task = TaskType.CAUSAL_LM if role == "actor" else TaskType.TOKEN_CLS
            module = get_peft_model(
                module,
                LoraConfig(
                    task_type=task, r=LORA_RANK, lora_alpha=LORA_ALPHA, target_modules=["q_proj", "v_proj"], bias="none"
                ),
            )
        mixed = None
        if is_lora and args.bf16_base:  # patch 0026's store_frozen_base, and the p40 profile's fp32 compute
            from torch.distributed.fsdp import MixedPrecision

            for param in module.parameters():
                param.data = param.data.float() if param.requires_grad else param.data.to(torch.bfloat16)
            mixed = MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
        fsdp = FSDP(
            module,
            use_orig_params=False,
            auto_wrap_policy=get_fsdp_wrap_policy(module, is_lora=is_lora),
            device_id=torch.device("cpu"),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            sync_module_states=False,
            device_mesh=mesh,
            mixed_precision=mixed,
        )
        optimizer = torch.optim.AdamW(fsdp.parameters(), lr=0.05)
        out = fsdp(input_ids=input_ids).logits
        out.float().square().mean().backward()  # any loss: one step moves the weights (and LoRA B off zero)
        optimizer.step()
        optimizer.zero_grad()
        with torch.no_grad():
            reference[f"{role}_logits"] = fsdp(input_ids=input_ids).logits.detach().clone()
        manager = FSDPCheckpointManager(
            model=fsdp,
            optimizer=optimizer,
            lr_scheduler=None,
            processing_class=tokenizer,
            checkpoint_config=checkpoint_contents,
        )
        manager.save_checkpoint(str(step_dir / role), global_step=args.step)

    actor = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32, attn_implementation="sdpa")
    wrap_train_save(actor, "actor", args.lora)
    if args.critic:
        config = AutoConfig.from_pretrained(base)
        config.num_labels = 1
        critic = AutoModelForTokenClassification.from_pretrained(
            base, config=config, torch_dtype=torch.float32, attn_implementation="sdpa"
        )
        wrap_train_save(critic, "critic", args.lora)
    if rank == 0:
        torch.save({"dataloader": "state"}, step_dir / "data.pt")
        (run / "checkpoints" / "latest_checkpointed_iteration.txt").write_text(str(args.step))
        torch.save(reference, run / f"reference_step_{args.step}.pt")
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--lora", action="store_true")
    parser.add_argument("--critic", action="store_true")
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--port", type=int, default=29611)
    parser.add_argument("--bf16-base", action="store_true")
    args = parser.parse_args()
    run = Path(args.run_dir)
    if not (run / "base" / "config.json").is_file():
        make_base(run / "base", torch.bfloat16 if args.bf16_base else torch.float32)
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    lora = (
        f"\n    lora_rank: {LORA_RANK}\n    lora_alpha: {LORA_ALPHA}"
        if args.lora
        else "\n    lora_rank: 0\n    lora_alpha: 16"
    )
    (run / "config.yaml").write_text(
        f"actor_rollout_ref:\n  model:\n    path: {run / 'base'}{lora}\ncritic:\n "
        f" model:{lora.replace(chr(10) + '    ', chr(10) + '    ')}\n"
    )
    (run / "run.json").write_text(
        json.dumps({"verlfit_run": 1, "profile": "p40", "settings": {"model": str(run / "base")}})
    )
    torch.multiprocessing.spawn(worker, args=(args.world_size, args), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    sys.exit(main())
