"""Probe for patch 0026 (a LoRA model's frozen base stored in 16 bits), run in a subprocess against one patched copy
of verl.

Usage: PYTHONPATH=<dir containing verl/> python frozen_base_probe.py run PROFILE CHECKPOINT FROZEN [ADAPTERS]
  PROFILE     p40 (FSDP param_dtype fp32, autocast off, rollout float32) or t4 (param_dtype fp16, fp16 autocast,
              loss scaling, rollout float16): the profiles' keys, as verl_probe.lora_trainer_config sets the P40's
  CHECKPOINT  original (verl_probe.save_checkpoint's tiny random Qwen2, fp32 on disk), rounded (the same model
              with every weight rounded to the profile's storage dtype, bf16 for p40 and fp16 for t4, and saved
              back in fp32: the fp32 model whose base holds exactly the values a 16-bit base stores) or nf4-rounded
              (the values an NF4 base computes with: _nf4_rounded_checkpoint)
  FROZEN      the value of model.frozen_base_dtype for the actor and the critic: bf16, fp16, nf4 (patch 0028) or
              fp32 (stock)
  ADAPTERS    units (stock, the default: each adapter an FSDP unit) or outside (model.adapters_outside_fsdp, patch
              0027, for the actor and the critic)

It builds verl's ActorRolloutRefWorker (role actor_rollout, LoRA rank 8, all-linear, a nonzero adapter:
verl_probe._cpu_worker_shims, the HF rollout with rollout.unwrap_fsdp as verlfit sets it with LoRA on one GPU) and
CriticWorker, and reports as plain lists: the dtypes of the FSDP flat parameters, greedy rollouts (unwrapped and
through the FSDP root), old and reference log-probs, one actor update (metrics, adapter after, base unchanged),
a checkpoint save / another update / load round trip, the critic's values and one critic update. The test compares
runs: the 16-bit base on the original checkpoint against the fp32 base on the rounded one (equal) and against the
fp32 base on the original (differs by the rounding).
"""

import contextlib
import hashlib
import importlib
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from verl_probe import (  # noqa: E402
    PROMPT_LEN,
    _cpu_worker_shims,
    _full_params,
    _Tokenizer,
    data_proto,
    left_padded_batch,
    lora_trainer_config,
    save_checkpoint,
    single_process_worker_env,
)

STORAGE = {"p40": "bfloat16", "t4": "float16"}
COMPUTE = {"p40": "float32", "t4": "float16"}  # FSDP param_dtype of each profile: what an NF4 base packs into
ADAPTED = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")  # all-linear in a layer


def _rounded_checkpoint(model_dir, dtype_name):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(getattr(torch, dtype_name)).float())
    out = tempfile.mkdtemp(prefix="frozen_base_rounded_")
    model.save_pretrained(out)
    return out


def _nf4_rounded_checkpoint(model_dir, profile):
    """The checkpoint holding, in fp32, exactly the values an NF4 base (patch 0028) computes with: every adapted
    Linear weight of the decoder layers cast to the profile's param_dtype and passed through bitsandbytes' own
    quantize_4bit / dequantize_4bit (NF4, blocks of 64, double quantisation), the layers' other weights (norms,
    biases) rounded to param_dtype, the rest (embeddings, LM head, final norm) to the 16-bit root dtype (bf16 on
    the p40, fp16 on the t4)."""
    import bitsandbytes.functional as bnbf
    import torch
    from transformers import AutoModelForCausalLM

    compute = getattr(torch, COMPUTE[profile])
    root = getattr(torch, STORAGE[profile])
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".layers." in name and name.endswith(".weight") and name.split(".")[-2] in ADAPTED:
                packed, state = bnbf.quantize_4bit(
                    param.to(compute), blocksize=64, compress_statistics=True, quant_type="nf4", quant_storage=compute
                )
                param.copy_(bnbf.dequantize_4bit(packed, state).float())
            elif ".layers." in name:
                param.copy_(param.to(compute).float())
            else:
                param.copy_(param.to(root).float())
    out = tempfile.mkdtemp(prefix="frozen_base_nf4_rounded_")
    model.save_pretrained(out)
    return out


def _config(model_dir, profile, frozen, adapters):
    from omegaconf import open_dict

    config = lora_trainer_config(model_dir)
    with open_dict(config):
        for section in (config.actor_rollout_ref.model, config.critic.model):
            if frozen != "fp32":
                section.frozen_base_dtype = frozen
            if adapters == "outside":
                section.adapters_outside_fsdp = True
        config.actor_rollout_ref.rollout.unwrap_fsdp = True
        if profile == "t4":
            fp16 = {"param_dtype": "fp16", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
            config.actor_rollout_ref.actor.fsdp_config.mixed_precision = fp16
            config.critic.model.fsdp_config.mixed_precision = fp16
            config.actor_rollout_ref.actor.autocast_dtype = "fp16"
            config.actor_rollout_ref.ref.autocast_dtype = "fp16"
            config.critic.autocast_dtype = "fp16"
            config.actor_rollout_ref.actor.loss_scaling = {"enabled": True}
            config.critic.loss_scaling = {"enabled": True}
            config.actor_rollout_ref.rollout.dtype = "float16"
    return config


def _stored(fsdp_module):
    """{"<dtype> trainable|frozen": elements} over the FSDP module's flat parameters (what it stores)."""
    out = {}
    for _, param in fsdp_module.named_parameters():
        key = f"{str(param.dtype).replace('torch.', '')} {'trainable' if param.requires_grad else 'frozen'}"
        out[key] = out.get(key, 0) + param.numel()
    return out


class _UpcastSampler:
    """At every leaf module's forward (the forward and, with gradient checkpointing, the backward's recompute),
    which FSDP units hold their mixed-precision copy (``_mp_shard``, the flat parameter cast to param_dtype:
    torch/distributed/fsdp/_flat_param.py) allocated: the transient copies the planner counts."""

    def __init__(self, fsdp_module):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        self.units = []
        for unit in FSDP.fsdp_modules(fsdp_module):
            handle = unit._handle
            if handle is not None and hasattr(handle.flat_param, "_mp_shard"):
                kind = "root" if unit is fsdp_module else type(unit._fsdp_wrapped_module).__name__
                self.units.append((kind, handle.flat_param))
        self.samples = []
        # the units live at two moments of the logits' lives: when verl's log-probs read them (after the model's
        # forward returned) and when the LM head's backward starts (their gradient has arrived)
        self.moments = {"log_probs": [], "lm_head_backward": []}
        for name, module in fsdp_module.named_modules():
            if not module._modules:
                module.register_forward_pre_hook(self._sample)
                if name.endswith("lm_head"):
                    module.register_forward_hook(self._watch_gradient)

    def _live(self):
        return tuple(
            sorted(
                (kind, flat._mp_shard.numel())
                for kind, flat in self.units
                if flat._mp_shard.untyped_storage().size() > 0
            )
        )

    def _watch_gradient(self, module, args, output):
        # the LM head's input gradient: its backward has run (from the logits' gradient, with its weight)
        if args[0].requires_grad:
            args[0].register_hook(lambda gradient: self.moments["lm_head_backward"].append(self._live()))

    def _sample(self, module, args):
        self.samples.append(self._live())

    @contextlib.contextmanager
    def watching_log_probs(self, actor_module):
        """Sample the live units each time ``actor_module``'s ``logprobs_from_logits`` runs (verl's dp_actor.py
        reads the logits with it once the model's forward has returned)."""
        original = actor_module.logprobs_from_logits

        def sampled(*args, **kwargs):
            self.moments["log_probs"].append(self._live())
            return original(*args, **kwargs)

        actor_module.logprobs_from_logits = sampled
        try:
            yield
        finally:
            actor_module.logprobs_from_logits = original

    def report(self):
        """{"units": [[kind, elements], ...] every unit with an upcast copy, "largest_live": the sample with the most
        elements live at once, "max_live_units": the most units live at once}."""
        largest = max(self.samples, key=lambda live: sum(n for _, n in live), default=())
        return {
            "units": sorted([kind, flat.numel()] for kind, flat in self.units),
            "largest_live": [list(x) for x in largest],
            "max_live_units": max((len(live) for live in self.samples), default=0),
            "samples": len(self.samples),
            # per moment, the unit kinds live at each sample (the root's copy: freed after the forward, cast again
            # for the backward)
            "live_at": {
                moment: sorted({tuple(kind for kind, _ in live) for live in lives})
                for moment, lives in self.moments.items()
            },
        }


def _nf4_report(fsdp_module):
    """The bitsandbytes Linear4bit modules (patch 0028): how many, their quantisation (type, block size, double
    quantisation), packing dtype and the devices of their constants."""
    linears = [m for m in fsdp_module.modules() if type(m).__name__ == "Linear4bit"]
    states = [m.quant_state for m in linears]
    return {
        "linears": len(linears),
        "quant": sorted({(s.quant_type, s.blocksize, s.nested, str(s.dtype).replace("torch.", "")) for s in states}),
        "storage": sorted({str(m.quant_storage).replace("torch.", "") for m in linears}),
        "devices": sorted({str(t.device) for s in states for t in (s.absmax, s.code, s.state2.absmax)}),
    }


def _raw_bytes(tensor):
    import torch

    return tensor.detach().contiguous().view(-1).view(torch.uint8)


def _saved_tensor_bytes(path):
    """Bytes of the tensors a saved checkpoint file holds (``.pt``: verl's torch.save of the state dicts, FSDP's
    sharded tensors counted by their local shards; ``.safetensors``: every tensor), the file's pickling left out."""
    import torch

    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return sum(t.numel() * t.element_size() for t in load_file(path).values())

    def count(value):
        if torch.is_tensor(value):
            return value.numel() * value.element_size()
        if hasattr(value, "local_shards"):  # torch.distributed ShardedTensor
            return sum(count(shard.tensor) for shard in value.local_shards())
        if isinstance(value, dict):
            return sum(count(v) for v in value.values())
        if isinstance(value, (list, tuple)):
            return sum(count(v) for v in value)
        return 0

    return count(torch.load(path, map_location="cpu", weights_only=False))


def _digest(params):
    """sha256 over the named tensors' dtypes and bytes as stored (an NF4 base's packed weights, viewed as floats, may
    hold NaN patterns, which a float comparison would call unequal), names sorted."""
    digest = hashlib.sha256()
    for name in sorted(params):
        digest.update(name.encode())
        digest.update(str(params[name].dtype).encode())
        digest.update(_raw_bytes(params[name]).numpy().tobytes())
    return digest.hexdigest()


def _lists(tensor):
    return tensor.float().tolist()


def _units(fsdp_module):
    """The number of FSDP units (the root included) and how many hold trainable parameters."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    units = [u for u in FSDP.fsdp_modules(fsdp_module) if u._handle is not None]
    return {"units": len(units), "trainable": sum(u._handle.flat_param.requires_grad for u in units)}


def probe_run(profile, checkpoint, frozen, adapters="units"):
    import torch
    from verl import DataProto

    model_dir = save_checkpoint(tempfile.mkdtemp(prefix="frozen_base_model_"))
    if checkpoint == "rounded":
        model_dir = _rounded_checkpoint(model_dir, STORAGE[profile])
    elif checkpoint == "nf4-rounded":
        model_dir = _nf4_rounded_checkpoint(model_dir, profile)
    single_process_worker_env()
    import verl.workers.fsdp_workers as fw

    captured = []
    _cpu_worker_shims(fw, captured)
    config = _config(model_dir, profile, frozen, adapters)
    result = {"profile": profile, "checkpoint": checkpoint, "frozen": frozen, "adapters": adapters}

    worker = fw.ActorRolloutRefWorker(config.actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    fsdp = worker.actor_module_fsdp
    result["actor_stored"] = _stored(fsdp)
    result["actor_units"] = _units(fsdp)
    result["adapter_devices"] = sorted({str(p.device) for n, p in fsdp.named_parameters() if "lora_" in n})
    result["actor_mixed_precision"] = str(fsdp.mixed_precision.param_dtype).replace("torch.", "")
    result["nf4"] = _nf4_report(fsdp)

    ids, mask, pos = left_padded_batch()
    out = worker.generate_sequences(data_proto(ids, mask, pos, do_sample=False))
    batch = out.batch
    worker.rollout.unwrap_fsdp = False  # stock path: summon_full_params(recurse=False), the units' own casts
    through_root = worker.generate_sequences(data_proto(ids, mask, pos, do_sample=False)).batch
    worker.rollout.unwrap_fsdp = True
    result["rollout"] = {"unwrapped": batch["responses"].tolist(), "through_root": through_root["responses"].tolist()}
    response_mask = batch["attention_mask"][:, PROMPT_LEN:]
    result["response_mask"] = response_mask.tolist()

    tensors = {k: batch[k] for k in ("responses", "input_ids", "attention_mask", "position_ids", "prompts")}
    old = worker.compute_log_prob(DataProto.from_dict(tensors=dict(tensors))).batch["old_log_probs"]
    ref = worker.compute_ref_log_prob(DataProto.from_dict(tensors=dict(tensors))).batch["ref_log_prob"]
    result["old_log_probs"], result["ref_log_probs"] = _lists(old), _lists(ref)
    result["log_prob_dtype"] = str(old.dtype).replace("torch.", "")

    before = _full_params(fsdp)
    generator = torch.Generator().manual_seed(3)
    advantages = torch.randn(response_mask.shape, generator=generator) * response_mask
    update = dict(tensors, old_log_probs=old, ref_log_prob=ref, advantages=advantages)
    n_tokens = batch["attention_mask"].sum(-1).tolist()

    def update_actor():
        metrics = worker.update_actor(
            DataProto.from_dict(tensors=dict(update), meta_info={"temperature": 1.0, "global_token_num": n_tokens})
        ).meta_info["metrics"]
        return {
            k: [float(x) for x in (v if isinstance(v, list) else [v])]
            for k, v in metrics.items()
            if k.startswith(("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"))
        }

    sampler = _UpcastSampler(fsdp)
    with sampler.watching_log_probs(importlib.import_module("verl.workers.actor.dp_actor")):
        result["update_metrics"] = update_actor()
    result["upcast_during_update"] = sampler.report()
    after = _full_params(fsdp)
    adapter = {k: v for k, v in after.items() if "lora_" in k}
    result["adapter_after"] = {k: _lists(v.flatten()) for k, v in sorted(adapter.items())}
    result["adapter_dtypes"] = sorted({str(v.dtype).replace("torch.", "") for v in adapter.values()})
    result["base_unchanged"] = all(
        torch.equal(_raw_bytes(before[k]), _raw_bytes(after[k])) for k in before if "lora_" not in k
    )
    result["base_dtypes_after_update"] = sorted(
        {str(v.dtype).replace("torch.", "") for k, v in after.items() if "lora_" not in k}
    )
    state = worker.actor_optimizer.state
    result["optimizer_state"] = sorted(
        {(str(t.dtype).replace("torch.", ""), p.requires_grad) for p in state for t in state[p].values() if t.dim() > 0}
    )
    result["optimizer_state_numel"] = sum(p.numel() for p in state if state[p])
    after_logp = worker.compute_log_prob(DataProto.from_dict(tensors=dict(tensors))).batch["old_log_probs"]
    result["log_probs_after_update"] = _lists(after_logp)

    # save, update once more (the weights move), load: the saved weights, dtypes and optimizer come back
    ckpt = tempfile.mkdtemp(prefix="frozen_base_ckpt_")
    worker.checkpoint_manager.processing_class = _Tokenizer()
    worker.save_checkpoint(local_path=ckpt, global_step=1)
    saved = _full_params(fsdp)
    update_actor()
    moved = _full_params(fsdp)
    worker.load_checkpoint(local_path=ckpt)
    loaded = _full_params(fsdp)
    result["checkpoint"] = {
        "moved_after_save": _digest(moved) != _digest(saved),
        "loaded_equal_saved": (
            _digest(loaded) == _digest(saved) and all(loaded[k].dtype == saved[k].dtype for k in saved)
        ),
        "stored_after_load": _stored(fsdp),
        "log_probs_after_load": _lists(
            worker.compute_log_prob(DataProto.from_dict(tensors=dict(tensors))).batch["old_log_probs"]
        ),
        "adapter_dir": (
            sorted(os.listdir(os.path.join(ckpt, "lora_adapter")))
            if os.path.isdir(os.path.join(ckpt, "lora_adapter"))
            else []
        ),
        "saved_files": sorted(f for f in os.listdir(ckpt) if f.endswith(".pt")),
        "saved_tensor_bytes": {
            f: _saved_tensor_bytes(os.path.join(ckpt, f))
            for f in sorted(os.listdir(ckpt))
            if f.endswith((".pt", ".safetensors"))
        },
        "quant_state_file": os.path.exists(os.path.join(ckpt, "nf4_quant_state.safetensors")),
    }

    result["checkpoint_path"] = ckpt  # the saved step (before the second update), for an export of it
    result["probe_ids"] = {k: tensors[k].tolist() for k in ("input_ids", "attention_mask", "position_ids")}
    critic = fw.CriticWorker(config.critic)
    critic.init_model()
    result["critic_stored"] = _stored(critic.critic_module)
    result["critic_units"] = _units(critic.critic_module)
    result["critic_nf4"] = _nf4_report(critic.critic_module)
    values = critic.compute_values(DataProto.from_dict(tensors=dict(tensors))).batch["values"]
    result["values"] = _lists(values)
    returns = torch.randn(response_mask.shape, generator=generator) * response_mask
    critic.update_critic(
        DataProto.from_dict(
            tensors=dict(tensors, values=values, returns=returns), meta_info={"global_token_num": n_tokens}
        )
    )
    cafter = _full_params(critic.critic_module)
    head = {k: v for k, v in cafter.items() if "modules_to_save" in k}
    result["value_head_after"] = {k: _lists(v.flatten()) for k, v in sorted(head.items())}
    result["value_head_dtypes"] = sorted({str(v.dtype).replace("torch.", "") for v in head.values()})
    result["values_after_update"] = _lists(
        critic.compute_values(DataProto.from_dict(tensors=dict(tensors))).batch["values"]
    )
    return result


def probe_refusal(world_size):
    """What _store_frozen_base (patch 0028) raises for nf4 at a world size other than 1 (torch.distributed's answer
    replaced), before touching the model."""
    import torch
    import verl.workers.fsdp_workers as fw

    torch.distributed.get_world_size = lambda *args: int(world_size)
    try:
        fw._store_frozen_base(torch.nn.Linear(2, 2), "nf4", "actor", 0, {})
    except ValueError as error:
        return {"error": str(error)}
    return {"error": None}


def main(argv):
    import json

    import verl

    probe, args = argv[0], argv[1:]
    result = {"run": probe_run, "refusal": probe_refusal}[probe](*args)
    result["verl_file"] = verl.__file__
    print("PROBE_RESULT " + json.dumps(result, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
