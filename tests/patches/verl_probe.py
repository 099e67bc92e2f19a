"""Probes run in a subprocess against one copy of verl (pristine, partly or fully patched).

Usage: PYTHONPATH=<dir containing verl/> python verl_probe.py PROBE [ARG...]
The last stdout line is ``PROBE_RESULT <json>``. The tests in this directory start it with the tree they
want under PYTHONPATH, so the installed verl in the venv is never imported or modified.

Probes:
  imports            import dp_actor / dp_critic as if CUDA were available, with flash_attn unimportable
  rollout            HF rollout with a tiny random Qwen2: greedy vs a manual decode, and sampling vs the
                     rollout config, from a checkpoint whose generation_config.json sets temperature 0.7,
                     top_p 0.8, top_k 20 and repetition_penalty 1.05
  autocast           autocast state seen inside the actor, ref, critic and HF-rollout forwards per config
  wiring             attn_implementation wiring (fsdp_workers, load_valuehead_model), BaseShardingManager.timing
  triton FAKE_DIR    flash-attn Triton cross-entropy gate, with a fake flash_attn package under FAKE_DIR
  checkpoint         verl's FSDPCheckpointManager on FSDP1 (one rank: NO_SHARD) tiny Qwen2s (full with tied
                     embeddings; LoRA with verl's LoRA wrap policy): save, train on, load; torch.load calls,
                     saved storage locations, the saved dict against FSDP's own state dict (patch 0012)
  lora               LoRA actor (HF rollout, FSDP1, fp32, SDPA) and LoRA critic built and driven by verl's own
                     ActorRolloutRefWorker / CriticWorker (init_model, generate_sequences, compute_log_prob,
                     compute_ref_log_prob, update_actor, save_checkpoint, compute_values, update_critic), with a
                     nonzero adapter, against the merged model (merge_and_unload) and the base model
"""

import importlib.abc
import json
import os
import sys
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

VOCAB = 300
PAD = 0
EOS = 299
PROMPTS = ([11, 12, 13, 14, 15, 16, 17, 18, 19, 20], [31, 32, 33, 34, 35])
PROMPT_LEN = 10


class _BlockFlashAttn(importlib.abc.MetaPathFinder):
    """Make every ``flash_attn`` import fail, whatever is installed."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "flash_attn" or fullname.startswith("flash_attn."):
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by verl_probe)", name=fullname)
        return None


def block_flash_attn():
    sys.meta_path.insert(0, _BlockFlashAttn())
    for name in list(sys.modules):
        if name == "flash_attn" or name.startswith("flash_attn."):
            del sys.modules[name]


def init_dist():
    import torch.distributed as dist

    if not dist.is_initialized():
        fd, path = tempfile.mkstemp(prefix="verl_probe_pg_")
        os.close(fd)
        os.unlink(path)
        dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)


# the model family the probes build (issue 26): qwen2 (default), qwen3 (q/k norms; head_dim set to hidden/heads = 16,
# Qwen3Config's default being 128) or llama; tests/patches/test_model_families.py sets it per run; every size stays
# the same, so the tests' counts (e.g. test_patched_verl_lora.ADAPTER_NUMEL) hold for each family
FAMILY = os.environ.get("VERL_PROBE_FAMILY", "qwen2")
FAMILY_CLASSES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", "Qwen2ForTokenClassification", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "Qwen3ForTokenClassification", {"head_dim": 16}),
    "llama": ("LlamaConfig", "LlamaForCausalLM", "LlamaForTokenClassification", {}),
}
BUILT = []  # the class names make_qwen2 built in this process (reported as the result's models_built)


def make_qwen2(seed=0, attn="eager", num_labels=None, tie_word_embeddings=False, eos_token_id=EOS, pad_token_id=PAD):
    """The tiny random model of the probes' family (:data:`FAMILY`; the name stays: Qwen2 is the default), causal LM or
    token classification with num_labels. eos_token_id=None and pad_token_id=None give the model without an EOS id
    (config.json and generation_config.json without one, as transformers writes a config made without them: issue 29).
    """
    import torch
    import transformers

    config_name, causal_name, token_name, extra = FAMILY_CLASSES[FAMILY]
    config = getattr(transformers, config_name)(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        rope_theta=10000.0,
        # Larger than the default 0.02 so that attention is not uniform and positions matter.
        initializer_range=0.2,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=1,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        attn_implementation=attn,
        **extra,
    )
    torch.manual_seed(seed)
    if num_labels is not None:
        config.num_labels = num_labels
        model = getattr(transformers, token_name)(config)
    else:
        model = getattr(transformers, causal_name)(config)
    BUILT.append(type(model).__name__)
    return model.float().eval()


def save_checkpoint(path):
    """Save the tiny model with a generation_config.json carrying Instruct-style sampling defaults
    (written by this transformers, i.e. >= 4.50, so generate() would merge them in)."""
    from transformers import GenerationConfig

    model = make_qwen2(seed=0)
    model.generation_config = GenerationConfig(
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=PAD,
        do_sample=True,
        temperature=0.7,
        top_p=0.8,
        top_k=20,
        repetition_penalty=1.05,
    )
    model.save_pretrained(path)
    return path


def left_padded_batch():
    """input_ids, attention_mask and verl-style position_ids for the two prompts, left-padded."""
    import torch

    ids = torch.full((len(PROMPTS), PROMPT_LEN), PAD, dtype=torch.long)
    mask = torch.zeros((len(PROMPTS), PROMPT_LEN), dtype=torch.long)
    for i, prompt in enumerate(PROMPTS):
        ids[i, PROMPT_LEN - len(prompt) :] = torch.tensor(prompt)
        mask[i, PROMPT_LEN - len(prompt) :] = 1
    position_ids = torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0)  # verl.utils.model.compute_position_id_with_mask
    return ids, mask, position_ids


def rollout_config(**overrides):
    from omegaconf import OmegaConf

    cfg = {
        "name": "hf",
        "do_sample": False,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": -1,
        "n": 1,
        "response_length": 24,
        "dtype": "float32",
        "val_kwargs": {"do_sample": False, "temperature": 0, "top_p": 1.0, "top_k": -1, "n": 1},
    }
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def data_proto(ids, mask, position_ids, **meta):
    from verl import DataProto

    meta = {"eos_token_id": EOS, "pad_token_id": PAD, **meta}
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": position_ids}, meta_info=meta
    )


def manual_greedy(model, ids, mask, steps):
    """Greedy decode by full forward passes with explicitly correct positions, no cache, no generate()."""
    import torch

    seq, att = ids.clone(), mask.clone()
    out = []
    with torch.no_grad():
        for _ in range(steps):
            pos = torch.clip(torch.cumsum(att, dim=-1) - 1, min=0)
            logits = model(input_ids=seq, attention_mask=att, position_ids=pos, use_cache=False).logits[:, -1, :]
            nxt = logits.argmax(-1)
            out.append(nxt)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
            att = torch.cat([att, torch.ones_like(nxt)[:, None]], dim=1)
    return torch.stack(out, dim=1)


def probe_imports():
    import verl.utils.device as device

    block_flash_attn()
    device.is_cuda_available = True  # take the branch a GPU worker takes
    result = {}
    for mod in ("verl.workers.actor.dp_actor", "verl.workers.critic.dp_critic"):
        try:
            module = __import__(mod, fromlist=["*"])
        except Exception as exc:  # noqa: BLE001
            result[mod] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            continue
        result[mod] = {
            "ok": True,
            "sources": {
                name: getattr(module, name).__module__ if hasattr(getattr(module, name), "__module__") else None
                for name in ("index_first_axis", "pad_input", "rearrange", "unpad_input")
            },
        }
    result["flash_attn_importable"] = _importable("flash_attn")
    return result


def _importable(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


class _Spy:
    """Wrap model.generate: record kwargs, ask for the processed scores (the distribution sampled from)."""

    def __init__(self, model):
        self.model = model
        self.original = model.generate
        self.calls = []
        model.generate = self

    def __call__(self, *args, **kwargs):
        self.calls.append(
            {
                k: v if isinstance(v, (int, float, str, bool, type(None))) else type(v).__name__
                for k, v in kwargs.items()
            }
        )
        kwargs["output_scores"] = True
        out = self.original(*args, **kwargs)
        self.scores = out.scores
        self.generation_config = kwargs.get("generation_config")
        # what generate() actually used after merging in the checkpoint's generation_config.json
        self.effective, _ = self.model._prepare_generation_config(
            self.generation_config, use_model_defaults=kwargs.get("use_model_defaults")
        )
        return out


def cpu_empty_cache_shim():
    """HFRollout ends with get_torch_device().empty_cache(); torch.cpu has none. GPU-only code path, so the
    shim lives here rather than in the patch series."""
    import torch

    if not hasattr(torch.cpu, "empty_cache"):
        torch.cpu.empty_cache = lambda: None


def probe_rollout():
    model_dir = save_checkpoint(tempfile.mkdtemp(prefix="verl_probe_model_"))
    import torch
    from transformers import AutoModelForCausalLM

    from verl.workers.rollout.hf_rollout import HFRollout

    block_flash_attn()
    cpu_empty_cache_shim()
    result = {}

    # 1. greedy: the rollout must produce what a manual decode with correct positions produces
    model = make_qwen2(seed=0)
    ids, mask, pos = left_padded_batch()
    steps = 24
    rollout = HFRollout(model, rollout_config(do_sample=False, response_length=steps))
    out = rollout.generate_sequences(data_proto(ids, mask, pos, do_sample=False))
    responses = out.batch["responses"]
    reference = manual_greedy(model, ids, mask, steps)
    result["greedy"] = {"rollout": responses.tolist(), "manual": reference.tolist()}
    # positions verl returns for the response must continue the prompt's
    out_pos = out.batch["position_ids"]
    result["greedy"]["position_ids_continue"] = bool(
        torch.equal(out_pos[:, PROMPT_LEN:], pos[:, -1:] + torch.arange(1, steps + 1))
    )

    # 2. sampling: checkpoint whose generation_config.json carries sampling defaults
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    gen_cfg = model.generation_config
    result["checkpoint_generation_config"] = {
        k: getattr(gen_cfg, k)
        for k in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample", "transformers_version")
    }
    spy = _Spy(model)
    torch.manual_seed(1234)
    steps = 16
    temperature = 1.0
    cfg = rollout_config(do_sample=True, temperature=temperature, top_p=1.0, top_k=-1, response_length=steps)
    sample_ids = ids.repeat(4, 1)
    sample_mask = mask.repeat(4, 1)
    sample_pos = pos.repeat(4, 1)
    out = HFRollout(model, cfg).generate_sequences(data_proto(sample_ids, sample_mask, sample_pos))
    spy_scores = torch.stack(spy.scores, dim=1)  # (bs, steps_run, vocab): processed logits generate sampled from
    responses = out.batch["responses"]
    response_mask = out.batch["attention_mask"][:, PROMPT_LEN:]
    steps_run = spy_scores.shape[1]
    sampled_logp = torch.log_softmax(spy_scores.float(), dim=-1)

    with torch.no_grad():
        logits = model(
            input_ids=out.batch["input_ids"],
            attention_mask=out.batch["attention_mask"],
            position_ids=out.batch["position_ids"],
            use_cache=False,
        ).logits
    direct = torch.log_softmax(logits[:, PROMPT_LEN - 1 : -1, :].float() / temperature, dim=-1)[:, :steps_run]
    valid = response_mask[:, :steps_run].bool()
    tok = responses[:, :steps_run]
    token_diff = (
        sampled_logp.gather(-1, tok[..., None]).squeeze(-1) - direct.gather(-1, tok[..., None]).squeeze(-1)
    ).abs()[valid]
    dist_diff = (sampled_logp.exp() - direct.exp()).abs().sum(-1)[valid]  # total variation x2 per step
    result["sampling"] = {
        "valid_tokens": int(valid.sum()),
        "max_token_logprob_diff": float(token_diff.max()),
        "max_l1_distribution_diff": float(dist_diff.max()),
        "generate_kwargs": spy.calls[-1],
        "effective_generation_config": {
            k: getattr(spy.effective, k) for k in ("temperature", "top_p", "top_k", "repetition_penalty", "do_sample")
        },
    }

    # 3. the same responses scored the way PPO scores them: the patched actor's forward micro-batch
    try:
        from verl.workers.actor.dp_actor import DataParallelPPOActor
    except Exception as exc:  # noqa: BLE001
        result["actor"] = {"error": f"{type(exc).__name__}: {exc}"}
        return result
    init_dist()
    actor = DataParallelPPOActor(actor_config(autocast_dtype="fp32"), model)
    micro = {k: out.batch[k] for k in ("responses", "input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        _, actor_logp = actor._forward_micro_batch(micro, temperature=temperature)
    actor_logp = actor_logp[:, :steps_run]
    gen_logp = sampled_logp.gather(-1, tok[..., None]).squeeze(-1)
    result["actor"] = {"max_logprob_diff_vs_generate": float((actor_logp - gen_logp).abs()[valid].max())}
    return result


def actor_config(**overrides):
    from omegaconf import OmegaConf

    cfg = {
        "use_remove_padding": False,
        "use_fused_kernels": False,
        "ulysses_sequence_parallel_size": 1,
        "entropy_from_logits_with_chunking": False,
        "entropy_checkpointing": False,
        "use_torch_compile": False,
    }
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def critic_config(**overrides):
    from omegaconf import OmegaConf

    cfg = {"model": {"use_remove_padding": False}, "ulysses_sequence_parallel_size": 1}
    cfg.update(overrides)
    return OmegaConf.create(cfg)


class _AutocastRecorder:
    def __init__(self, module):
        self.seen = []
        module.register_forward_pre_hook(self._hook)

    def _hook(self, module, args):
        import torch

        self.seen.append((torch.is_autocast_enabled("cpu"), str(torch.get_autocast_dtype("cpu")).replace("torch.", "")))


def probe_autocast():
    # the checkpoint is not read here, but making it imports transformers' Qwen2 modules before block_flash_attn()
    # below hides flash_attn, as the other probes do (imported after the block, modeling_qwen2 fails to import)
    save_checkpoint(tempfile.mkdtemp(prefix="verl_probe_model_"))
    import torch

    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.critic.dp_critic import DataParallelPPOCritic
    from verl.workers.rollout.hf_rollout import HFRollout

    block_flash_attn()
    cpu_empty_cache_shim()
    init_dist()
    ids, mask, pos = left_padded_batch()
    micro = {"responses": ids[:, -4:], "input_ids": ids, "attention_mask": mask, "position_ids": pos}
    settings = {
        "absent": {},
        "fp32": {"autocast_dtype": "fp32"},
        "float32": {"autocast_dtype": "float32"},
        "32": {"autocast_dtype": 32},
        "bf16": {"autocast_dtype": "bf16"},
        "fp16": {"autocast_dtype": "fp16"},
    }
    result = {"actor": {}, "critic": {}, "rollout": {}}

    model = make_qwen2(seed=0)
    recorder = _AutocastRecorder(model)
    with torch.no_grad():
        reference = (
            torch.log_softmax(model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -5:-1].float(), -1)
            .gather(-1, ids[:, -4:, None])
            .squeeze(-1)
        )
    for label, extra in settings.items():
        actor = DataParallelPPOActor(actor_config(**extra), model)
        recorder.seen.clear()
        with torch.no_grad():
            _, logp = actor._forward_micro_batch(dict(micro), temperature=1.0)
        result["actor"][label] = {
            "autocast": recorder.seen[-1],
            "max_diff_vs_fp32": float((logp.float() - reference).abs().max()),
        }

    critic_model = make_qwen2(seed=0, num_labels=1)
    crecorder = _AutocastRecorder(critic_model)
    for label, extra in settings.items():
        critic = DataParallelPPOCritic(critic_config(**extra), critic_model, critic_optimizer=None)
        crecorder.seen.clear()
        with torch.no_grad():
            critic._forward_micro_batch(dict(micro))
        result["critic"][label] = {"autocast": crecorder.seen[-1]}

    for label, dtype in {"absent": None, "float32": "float32", "bfloat16": "bfloat16", "fp16": "fp16"}.items():
        cfg = rollout_config(response_length=2)
        if dtype is None:
            del cfg["dtype"]
        else:
            cfg.dtype = dtype
        recorder.seen.clear()
        HFRollout(model, cfg).generate_sequences(data_proto(ids, mask, pos, do_sample=False))
        result["rollout"][label] = {"autocast": recorder.seen[0]}
    try:
        HFRollout(model, rollout_config(dtype="int8"))
        result["rollout"]["invalid"] = "accepted"
    except ValueError as exc:
        result["rollout"]["invalid"] = f"ValueError: {exc}"
    return result


def probe_wiring():
    model_dir = save_checkpoint(tempfile.mkdtemp(prefix="verl_probe_model_"))
    import types

    import transformers
    from omegaconf import OmegaConf

    block_flash_attn()
    import verl.utils.model as vmodel
    import verl.workers.fsdp_workers as fw
    from verl.workers.sharding_manager.base import BaseShardingManager

    result = {"timing": getattr(BaseShardingManager(), "timing", "missing")}

    class Stop(Exception):
        pass

    seen = []
    real_from_pretrained = transformers.AutoConfig.from_pretrained

    def spy_from_pretrained(*args, **kwargs):
        seen.append(kwargs.get("attn_implementation"))
        raise Stop

    fw.hf_tokenizer = lambda *a, **k: types.SimpleNamespace(bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD)
    fw.hf_processor = lambda *a, **k: None
    fw.log_gpu_memory_usage = lambda *a, **k: None  # CUDA-only memory query
    transformers.AutoConfig.from_pretrained = spy_from_pretrained
    actor = {}
    for label, model_cfg in {"absent": {}, "sdpa": {"attn_implementation": "sdpa"}}.items():
        config = OmegaConf.create({"model": {"path": model_dir, **model_cfg}})
        OmegaConf.set_struct(config, True)  # as Hydra hands it over
        fake = types.SimpleNamespace(config=config, _is_actor=True, rank=0)
        try:
            fw.ActorRolloutRefWorker._build_model_optimizer(
                fake,
                model_path=model_dir,
                fsdp_config=OmegaConf.create({}),
                optim_config=None,
                override_model_config={},
            )
        except Stop:
            pass
        actor[label] = seen[-1] if seen else None
    result["actor_attn"] = actor

    critic = {}
    transformers.AutoConfig.from_pretrained = real_from_pretrained
    loader_calls = []

    def spy_loader(*args, **kwargs):
        loader_calls.append(kwargs.get("attn_implementation", "<not passed>"))
        raise Stop

    vmodel.load_valuehead_model = spy_loader
    for label, model_cfg in {"absent": {}, "eager": {"attn_implementation": "eager"}}.items():
        config = OmegaConf.create(
            {"model": {"path": model_dir, "tokenizer_path": model_dir, "fsdp_config": {}, **model_cfg}}
        )
        OmegaConf.set_struct(config, True)
        fake = types.SimpleNamespace(config=config, rank=0, device_mesh=None, ulysses_sequence_parallel_size=1)
        fw.get_init_weight_context_manager = lambda **kw: lambda: __import__("contextlib").nullcontext()
        seen.clear()
        real = transformers.AutoConfig.from_pretrained

        def record(*args, _real=real, **kwargs):
            seen.append(kwargs.get("attn_implementation"))
            return _real(*args, **kwargs)

        transformers.AutoConfig.from_pretrained = record
        try:
            fw.CriticWorker._build_critic_model_optimizer(fake, config)
        except Stop:
            pass
        finally:
            transformers.AutoConfig.from_pretrained = real
        critic[label] = {"config": seen[-1] if seen else None, "loader": loader_calls[-1] if loader_calls else None}
    result["critic_attn"] = critic

    # the value-head loader itself honours the argument
    import importlib

    vmodel = importlib.reload(vmodel)
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    cfg.num_labels = 1
    try:
        loaded = vmodel.load_valuehead_model(
            model_dir, __import__("torch").float32, cfg, False, attn_implementation="eager"
        )
        result["valuehead_eager"] = {"class": type(loaded).__name__, "attn": loaded.config._attn_implementation}
    except TypeError as exc:
        result["valuehead_eager"] = {"error": f"TypeError: {exc}"}
    return result


def probe_triton(fake_dir):
    import torch

    sys.path.insert(0, fake_dir)
    import flash_attn.ops.triton.cross_entropy as fake_ce

    import verl.utils.torch_functional as tf

    result = {"flash_attn_ce_available": tf.FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE}
    logits = torch.randn(2, 3, 7)
    labels = torch.randint(0, 7, (2, 3))
    try:
        out = tf.logprobs_from_logits(logits, labels)
        expected = torch.log_softmax(logits, -1).gather(-1, labels[..., None]).squeeze(-1)
        result["cpu_logprobs_match"] = bool(torch.allclose(out, expected, atol=1e-6))
    except Exception as exc:  # noqa: BLE001
        result["cpu_logprobs_match"] = f"{type(exc).__name__}: {exc}"
    result["fake_kernel_calls_on_cpu"] = fake_ce.CALLS
    gate = getattr(tf, "flash_attn_cross_entropy_supported", None)
    if gate is not None:
        capability = {}
        real = torch.cuda.get_device_capability
        for cc in [(6, 1), (7, 0), (8, 6)]:
            torch.cuda.get_device_capability = lambda device=None, _cc=cc: _cc
            capability[f"{cc[0]}.{cc[1]}"] = gate(torch.device("cuda", 0))
        torch.cuda.get_device_capability = real
        capability["cpu"] = gate(torch.device("cpu"))
        result["gate"] = capability
    return result


# ---------------------------------------------------------------------------------------------- LoRA

LORA_RANK = 8
LORA_ALPHA = 16
RESPONSE_STEPS = 24


def _gloo_average():
    """verl's ``reduce_timing`` (verl/utils/debug/performance.py:179) all-reduces with ``ReduceOp.AVG``, which NCCL
    (verl's backend on GPUs) has and torch 2.6's Gloo lacks ("Cannot use ReduceOp.AVG with Gloo": the image's torch;
    newer torch has it). On a Gloo group an AVG becomes a SUM divided by the world size: the same average, exact for
    the world of one these tests run."""
    import torch.distributed as dist

    real_all_reduce = dist.all_reduce

    def all_reduce(tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if op == dist.ReduceOp.AVG and dist.get_backend(group) == "gloo":
            real_all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
            tensor.div_(dist.get_world_size(group))
            return None
        return real_all_reduce(tensor, op=op, group=group, async_op=async_op)

    dist.all_reduce = all_reduce


def _cpu_worker_shims(fw, captured):
    """Test-side shims that let verl's FSDP workers run on CPU with gloo, world size 1. None changes what the
    workers compute: FSDP1 refuses CPU modules with ``sync_module_states=True`` and needs ``device_id`` to run
    on CPU (with one rank, syncing is a no-op); torch.cpu lacks the memory statistics update_actor reports; the
    tokenizer is only read for its special token ids. ``get_peft_model`` is wrapped to make the adapter nonzero
    (PEFT initialises lora_B to zero, so an adapter that is silently ignored would look correct) and to keep a
    copy of the base model and of the adapted model, as they were before FSDP wrapped them."""
    import copy
    import types

    import torch

    fw.hf_tokenizer = lambda *a, **k: types.SimpleNamespace(bos_token_id=1, eos_token_id=EOS, pad_token_id=PAD)
    fw.hf_processor = lambda *a, **k: None
    fw.log_gpu_memory_usage = lambda *a, **k: None
    for name in ("max_memory_allocated", "max_memory_reserved", "memory_allocated", "memory_reserved"):
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, lambda *a: 0)
    if not hasattr(torch.cpu, "mem_get_info"):
        torch.cpu.mem_get_info = lambda *a: (0, 0)
    if not hasattr(torch.cpu, "get_device_name"):
        torch.cpu.get_device_name = lambda *a: "CPU"  # FlopsCounter's device lookup (MFU metric only)
    real_fsdp = fw.FSDP

    def cpu_fsdp(*args, **kwargs):
        kwargs["sync_module_states"] = False
        kwargs["device_id"] = torch.device("cpu")
        return real_fsdp(*args, **kwargs)

    fw.FSDP = cpu_fsdp
    _gloo_average()
    real_get_peft_model = fw.get_peft_model

    def nonzero_get_peft_model(model, peft_config, *args, **kwargs):
        base = copy.deepcopy(model)
        peft_model = real_get_peft_model(model, peft_config, *args, **kwargs)
        generator = torch.Generator().manual_seed(7 + len(captured))
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
        captured.append({"base": base, "peft": copy.deepcopy(peft_model), "config": peft_config})
        return peft_model

    fw.get_peft_model = nonzero_get_peft_model


def lora_trainer_config(model_dir, target_modules="all-linear"):
    """verl's ppo_trainer.yaml with the P40 profile's keys and LoRA on actor and critic, resolved."""
    import verl
    from omegaconf import OmegaConf, open_dict

    full = OmegaConf.load(os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "ppo_trainer.yaml"))
    fp32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    with open_dict(full):
        model = full.actor_rollout_ref.model
        model.path = model_dir
        model.lora_rank, model.lora_alpha, model.target_modules = LORA_RANK, LORA_ALPHA, target_modules
        model.attn_implementation = "sdpa"
        model.use_remove_padding = False
        model.enable_gradient_checkpointing = True
        actor = full.actor_rollout_ref.actor
        actor.fsdp_config.mixed_precision = fp32
        actor.autocast_dtype = "fp32"
        actor.use_torch_compile = False
        actor.ppo_mini_batch_size = 2
        actor.ppo_micro_batch_size_per_gpu = 1
        actor.optim.lr = 1e-2
        actor.use_kl_loss = True
        full.actor_rollout_ref.ref.autocast_dtype = "fp32"
        full.actor_rollout_ref.ref.fsdp_config.model_dtype = "fp32"
        rollout = full.actor_rollout_ref.rollout
        rollout.name, rollout.dtype, rollout.tensor_model_parallel_size = "hf", "float32", 1
        rollout.do_sample, rollout.response_length = False, RESPONSE_STEPS
        rollout.log_prob_micro_batch_size_per_gpu = 2
        critic = full.critic
        critic.model.path = critic.model.tokenizer_path = model_dir
        critic.model.lora_rank, critic.model.lora_alpha, critic.model.target_modules = (
            LORA_RANK,
            LORA_ALPHA,
            target_modules,
        )
        critic.model.attn_implementation = "sdpa"
        critic.model.use_remove_padding = False
        critic.model.enable_gradient_checkpointing = True
        critic.model.fsdp_config.mixed_precision = fp32
        critic.autocast_dtype = "fp32"
        critic.ppo_mini_batch_size = 2
        critic.ppo_micro_batch_size_per_gpu = 1
        critic.forward_micro_batch_size_per_gpu = 2
        critic.optim.lr = 1e-2
        full.trainer.total_training_steps = 1
    OmegaConf.resolve(full)
    return full


def _sequence_logprobs(model, batch):
    """log p(response token) under ``model``: the reference computation for verl's log-probs (fp32, no autocast)."""
    import torch

    responses = batch["responses"]
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            use_cache=False,
        ).logits
    logits = logits[:, -responses.shape[1] - 1 : -1, :].float()
    return torch.log_softmax(logits, dim=-1).gather(-1, responses[..., None]).squeeze(-1)


def _values(model, batch):
    import torch

    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            use_cache=False,
        ).logits
    return logits[:, -batch["responses"].shape[1] - 1 : -1].squeeze(-1).float()


def _masked_max_diff(a, b, mask):
    return float((a.float() - b.float()).abs()[mask.bool()].max())


def _full_params(fsdp_module):
    """{name: tensor copy} of every parameter of an FSDP1 module, unsharded, with PEFT's own names."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    with FSDP.summon_full_params(fsdp_module, writeback=False):
        return {
            name.replace("_fsdp_wrapped_module.", ""): p.detach().clone() for name, p in fsdp_module.named_parameters()
        }


class _GradAtStep:
    """Wrap optimizer.step: record, at each step, the gradients the FSDP module's flat parameters hold."""

    def __init__(self, fsdp_module, optimizer):
        self.seen = []
        real_step = optimizer.step

        def step(*args, **kwargs):
            self.seen.append(
                [(p.requires_grad, p.grad is not None, p.numel()) for _, p in fsdp_module.named_parameters()]
            )
            return real_step(*args, **kwargs)

        optimizer.step = step


def _param_report(fsdp_module, optimizer, peft_model, grads):
    """Which parameters of the FSDP module received gradients at the optimizer steps, and what AdamW keeps state for."""
    params = list(fsdp_module.named_parameters())
    at_step = [entry for seen in grads.seen for entry in seen]
    state = [p for group in optimizer.param_groups for p in group["params"] if optimizer.state.get(p)]
    return {
        "dtypes": sorted({str(p.dtype).replace("torch.", "") for _, p in params}),
        "optimizer_params_numel": sum(p.numel() for group in optimizer.param_groups for p in group["params"]),
        "optimizer_state_numel": sum(p.numel() for p in state),
        "optimizer_state_requires_grad": sorted({bool(p.requires_grad) for p in state}),
        "optimizer_state_dtypes": sorted(
            {str(t.dtype).replace("torch.", "") for p in state for t in optimizer.state[p].values() if t.dim() > 0}
        ),
        "steps": len(grads.seen),
        "with_grad_numel_per_step": sorted({sum(n for _, has_grad, n in seen if has_grad) for seen in grads.seen}),
        "frozen_with_grad": sum(1 for requires_grad, has_grad, _ in at_step if has_grad and not requires_grad),
        "trainable_without_grad": sum(1 for requires_grad, has_grad, _ in at_step if requires_grad and not has_grad),
        "adapter_numel": sum(p.numel() for _, p in peft_model.named_parameters() if p.requires_grad),
        "trainable_not_lora": sorted(
            n for n, p in peft_model.named_parameters() if p.requires_grad and "lora_" not in n
        ),
        "total_numel": sum(p.numel() for _, p in peft_model.named_parameters()),
    }


def _changed(before, after):
    import torch

    changed = sorted(name for name in before if not torch.equal(before[name], after[name]))
    return {"changed": changed, "unchanged_count": len(before) - len(changed)}


def single_process_worker_env():
    """What verl's FSDP workers need to run in this one CPU process: flash-attn blocked, CPU stand-ins for the CUDA
    memory queries, a gloo process group, and the torchrun variables of a world of one on a free loopback port."""
    import socket

    block_flash_attn()
    cpu_empty_cache_shim()
    init_dist()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for key, value in {
        "WORLD_SIZE": "1",
        "RANK": "0",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
    }.items():
        os.environ.setdefault(key, value)


def probe_lora():
    import copy

    model_dir = save_checkpoint(tempfile.mkdtemp(prefix="verl_probe_model_"))
    import torch

    single_process_worker_env()

    import verl.workers.fsdp_workers as fw
    from verl import DataProto

    captured = []
    _cpu_worker_shims(fw, captured)
    config = lora_trainer_config(model_dir)
    result = {"peft_version": __import__("peft").__version__}

    # ------------------------------------------------------------------ actor, rollout and in-actor reference
    worker = fw.ActorRolloutRefWorker(config.actor_rollout_ref, role="actor_rollout")
    try:
        worker.init_model()
    except Exception as exc:  # noqa: BLE001
        result["actor_init_error"] = f"{type(exc).__name__}: {exc}"
        return result
    base, peft_model = captured[0]["base"], captured[0]["peft"]
    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    base.eval()
    inner = worker.actor_module.base_model.model
    result["actor"] = {
        "module": type(worker.actor_module).__name__,
        "attn_implementation": inner.config._attn_implementation,
        "mixed_precision_param_dtype": str(worker.actor_module_fsdp.mixed_precision.param_dtype).replace("torch.", ""),
        "target_modules": sorted(captured[0]["config"].target_modules),
        "lora_b_nonzero": bool(
            all(float(p.abs().sum()) > 0 for n, p in peft_model.named_parameters() if "lora_B" in n)
        ),
    }

    ids, mask, pos = left_padded_batch()
    out = worker.generate_sequences(data_proto(ids, mask, pos, do_sample=False))
    batch = out.batch
    response_mask = batch["attention_mask"][:, PROMPT_LEN:]
    result["rollout"] = {
        "responses": batch["responses"].tolist(),
        "merged_manual": manual_greedy(merged, ids, mask, RESPONSE_STEPS).tolist(),
        "base_manual": manual_greedy(base, ids, mask, RESPONSE_STEPS).tolist(),
    }

    tensors = {k: batch[k] for k in ("responses", "input_ids", "attention_mask", "position_ids", "prompts")}
    old = worker.compute_log_prob(DataProto.from_dict(tensors=dict(tensors)))
    ref = worker.compute_ref_log_prob(DataProto.from_dict(tensors=dict(tensors)))
    merged_logp, base_logp = _sequence_logprobs(merged, tensors), _sequence_logprobs(base, tensors)
    old_logp, ref_logp = old.batch["old_log_probs"], ref.batch["ref_log_prob"]
    result["logprobs"] = {
        "dtypes": [str(old_logp.dtype).replace("torch.", ""), str(ref_logp.dtype).replace("torch.", "")],
        "old_vs_merged": _masked_max_diff(old_logp, merged_logp, response_mask),
        "old_vs_base": _masked_max_diff(old_logp, base_logp, response_mask),
        "ref_vs_base": _masked_max_diff(ref_logp, base_logp, response_mask),
        "ref_vs_merged": _masked_max_diff(ref_logp, merged_logp, response_mask),
    }

    before = _full_params(worker.actor_module_fsdp)
    generator = torch.Generator().manual_seed(3)
    update = dict(
        tensors,
        old_log_probs=old_logp,
        ref_log_prob=ref_logp,
        advantages=torch.randn(response_mask.shape, generator=generator) * response_mask,
    )
    n_tokens = batch["attention_mask"].sum(-1).tolist()
    actor_grads = _GradAtStep(worker.actor_module_fsdp, worker.actor_optimizer)
    metrics = worker.update_actor(
        DataProto.from_dict(tensors=update, meta_info={"temperature": 1.0, "global_token_num": n_tokens})
    ).meta_info["metrics"]
    result["update"] = _param_report(worker.actor_module_fsdp, worker.actor_optimizer, peft_model, actor_grads)
    after = _full_params(worker.actor_module_fsdp)
    result["update"].update(_changed(before, after))
    result["update"]["pg_loss_finite"] = bool(
        all(torch.isfinite(torch.tensor(v)).all() for k, v in metrics.items() if k.startswith("actor/pg_loss"))
    )
    ref_after = worker.compute_ref_log_prob(DataProto.from_dict(tensors=dict(tensors))).batch["ref_log_prob"]
    old_after = worker.compute_log_prob(DataProto.from_dict(tensors=dict(tensors))).batch["old_log_probs"]
    result["update"]["ref_after_vs_base"] = _masked_max_diff(ref_after, base_logp, response_mask)
    result["update"]["old_after_vs_old_before"] = _masked_max_diff(old_after, old_logp, response_mask)

    # checkpoint: verl writes only the adapter under lora_adapter/ (fsdp_workers.py save_checkpoint)
    ckpt = tempfile.mkdtemp(prefix="verl_probe_ckpt_")
    worker.checkpoint_manager = __import__("types").SimpleNamespace(
        save_checkpoint=lambda **kw: None
    )  # full FSDP state: not LoRA's concern
    worker.save_checkpoint(local_path=ckpt)
    adapter_dir = os.path.join(ckpt, "lora_adapter")
    result["checkpoint"] = {"files": sorted(os.listdir(adapter_dir)) if os.path.isdir(adapter_dir) else []}
    if result["checkpoint"]["files"]:
        from peft import PeftModel

        reloaded = PeftModel.from_pretrained(copy.deepcopy(base), adapter_dir).eval()
        result["checkpoint"]["reloaded_vs_trained_logprob"] = _masked_max_diff(
            _sequence_logprobs(reloaded, tensors), old_after, response_mask
        )
        result["checkpoint"]["reloaded_vs_base_logprob"] = _masked_max_diff(
            _sequence_logprobs(reloaded, tensors), base_logp, response_mask
        )

    # ------------------------------------------------------------------ critic
    critic_worker = fw.CriticWorker(config.critic)
    try:
        critic_worker.init_model()
    except Exception as exc:  # noqa: BLE001
        result["critic_init_error"] = f"{type(exc).__name__}: {exc}"
        return result
    cbase, cpeft = captured[1]["base"], captured[1]["peft"]
    cpeft.eval()
    values = critic_worker.compute_values(DataProto.from_dict(tensors=dict(tensors))).batch["values"]
    critic_fsdp = critic_worker.critic_module
    result["critic"] = {
        "module": type(critic_fsdp._fsdp_wrapped_module).__name__,
        "task_type": str(getattr(captured[1]["config"].task_type, "value", captured[1]["config"].task_type)),
        "attn_implementation": cbase.config._attn_implementation,
        "mixed_precision_param_dtype": str(critic_fsdp.mixed_precision.param_dtype).replace("torch.", ""),
        "values_vs_adapted": _masked_max_diff(values, _values(cpeft, tensors), response_mask),
        "values_vs_base": _masked_max_diff(values, _values(cbase.eval(), tensors), response_mask),
    }
    cbefore = _full_params(critic_fsdp)
    returns = torch.randn(response_mask.shape, generator=generator) * response_mask
    critic_update = dict(tensors, values=values, returns=returns)
    critic_grads = _GradAtStep(critic_fsdp, critic_worker.critic_optimizer)
    critic_worker.update_critic(DataProto.from_dict(tensors=critic_update, meta_info={"global_token_num": n_tokens}))
    result["critic_update"] = _param_report(critic_fsdp, critic_worker.critic_optimizer, cpeft, critic_grads)
    result["critic_update"].update(_changed(cbefore, _full_params(critic_fsdp)))
    return result


class _Tokenizer:
    """The checkpoint manager only calls processing_class.save_pretrained(dir) (fsdp_checkpoint_manager.py:248)."""

    def save_pretrained(self, path):
        with open(os.path.join(path, "tokenizer_stub.txt"), "w") as f:
            f.write("stub\n")


def _checkpoint_case(lora):
    """Save, one more training step, load, through verl's FSDPCheckpointManager; the facts patch 0012 asserts."""
    import copy

    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardedStateDictConfig, ShardingStrategy, StateDictType

    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    model = make_qwen2(seed=0, tie_word_embeddings=not lora)
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(
            model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM")
        )
    model.train()
    fp32 = MixedPrecision(param_dtype=torch.float32, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
    # as fsdp_workers.py:314-330 (FULL_SHARD on a world of one becomes NO_SHARD), on CPU as in _cpu_worker_shims
    fsdp = FSDP(
        model,
        auto_wrap_policy=get_fsdp_wrap_policy(model, config=None, is_lora=lora),
        device_id=torch.device("cpu"),
        sharding_strategy=ShardingStrategy.FULL_SHARD,
        mixed_precision=fp32,
        sync_module_states=False,
        use_orig_params=False,
    )
    optimizer = torch.optim.AdamW(fsdp.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 / (1 + step))
    generator = torch.Generator().manual_seed(3)

    def train_step():
        ids = torch.randint(1, VOCAB - 1, (2, 12), generator=generator)
        loss = fsdp(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()

    def full_params():
        with FSDP.summon_full_params(fsdp, writeback=False):
            return {name: p.detach().clone() for name, p in fsdp.named_parameters()}

    train_step()
    manager = FSDPCheckpointManager(fsdp, optimizer, scheduler, processing_class=_Tokenizer(), checkpoint_config=None)
    ckpt = tempfile.mkdtemp(prefix="verl_probe_ckpt_")
    with FSDP.state_dict_type(fsdp, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig()):
        fsdp_state_dict = {k: v.clone() for k, v in fsdp.state_dict().items()}  # FSDP's own dict, no checkpoint manager
    params_at_save, optim_at_save = full_params(), copy.deepcopy(optimizer.state_dict())
    manager.save_checkpoint(ckpt, global_step=1)
    train_step()
    params_moved = any(not torch.equal(params_at_save[k], v) for k, v in full_params().items())

    loads = []
    real_load = torch.load

    def recording_load(*args, **kwargs):
        loads.append({"file": os.path.basename(str(args[0])), "map_location": kwargs.get("map_location")})
        return real_load(*args, **kwargs)

    torch.load = recording_load
    try:
        manager.load_checkpoint(ckpt)
    finally:
        torch.load = real_load
    params_after, optim_after = full_params(), optimizer.state_dict()

    def same(a, b):
        if isinstance(a, torch.Tensor):
            return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        if isinstance(a, dict):
            return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
        return a == b

    locations = {}
    files = {}
    for name in sorted(os.listdir(ckpt)):
        if name.endswith(".pt"):
            seen = []
            files[name] = real_load(
                os.path.join(ckpt, name),
                map_location=lambda storage, loc: (seen.append(loc), storage)[1],
                weights_only=False,
            )
            locations[name] = sorted(set(seen))
    saved_model = files["model_world_size_1_rank_0.pt"]
    result = {
        "strategies": sorted({unit.sharding_strategy.name for unit in FSDP.fsdp_modules(fsdp)}),
        "params_moved_after_save": params_moved,
        "params_round_trip": same(params_at_save, params_after),
        "optimizer_round_trip": same(optim_at_save, optim_after),
        "optimizer_state_count": len(optim_after["state"]),
        "scheduler_last_epoch": scheduler.last_epoch,
        "loads": loads,
        "storage_locations": locations,
        "saved_keys_equal_fsdp": list(saved_model.keys()) == list(fsdp_state_dict.keys()),
        "saved_values_equal_fsdp": same(dict(saved_model), fsdp_state_dict),
        "saved_key_count": len(saved_model),
        "saved_tensor_devices": sorted({str(v.device) for v in saved_model.values() if isinstance(v, torch.Tensor)}),
    }
    if not lora:
        result["tied_keys_share_storage"] = (
            saved_model["lm_head.weight"].untyped_storage().data_ptr()
            == saved_model["model.embed_tokens.weight"].untyped_storage().data_ptr()
        )
    return result


def probe_checkpoint():
    init_dist()
    return {"full": _checkpoint_case(lora=False), "lora": _checkpoint_case(lora=True)}


def main(argv):
    probe, args = argv[0], argv[1:]
    fn = {
        "imports": probe_imports,
        "rollout": probe_rollout,
        "autocast": probe_autocast,
        "wiring": probe_wiring,
        "triton": probe_triton,
        "lora": probe_lora,
        "checkpoint": probe_checkpoint,
    }[probe]
    result = fn(*args)
    import verl

    result["verl_file"] = verl.__file__
    result["models_built"] = sorted(set(BUILT))
    print("PROBE_RESULT " + json.dumps(result, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
