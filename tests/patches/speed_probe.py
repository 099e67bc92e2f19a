"""Probes for the speed patches (0020+), run in a subprocess against one patched copy of verl.

Usage: PYTHONPATH=<dir containing verl/> python speed_probe.py PROBE
The last stdout line is ``PROBE_RESULT <json>`` (as verl_probe.py, whose tiny-model helpers it reuses).

Probes:
  trim      actor (log-probs, entropy, one PPO update) and critic (values, one value update) with
            trim_padding on and off, eager and sdpa, on a batch whose rows have different prompt and
            response lengths: the largest differences on response_mask positions
  rollout   HF rollout with rollout.trim_padding on and off (greedy; sampling with n=2 from the same seed):
            whether every output tensor is identical
  static    static-cache decoder (patch 0022, eager on CPU) vs HF generate: greedy tokens with and without
            early EOS, the warped scores vs generate's, the Gumbel-max sampling frequencies, and HFRollout
            with rollout.cuda_graph (plain and FSDP-wrapped module) vs without
  no_eos MODEL_DIR
            the ids the rollout gets for EOS and padding as verl passes them (patch 0022's special_tokens, issue
            29): StaticDecoder vs generate called as HFRollout calls it, greedy, on tiny random Qwen2 and Qwen3
            models without an EOS id, for no EOS, no pad, an EOS list and an EOS id with no pad, and the model's
            own EOS left out by the rollout; then verl's ActorRolloutRefWorker.generate_sequences (its
            eos/pad rule: the generation config's, else the tokenizer's) on MODEL_DIR, a checkpoint whose
            tokenizer has an EOS and whose generation config has none (synthetic_model.make_model(no_eos=True)),
            with and without rollout.cuda_graph
  unwrap    patch 0023 (rollout.unwrap_fsdp) with LoRA through verl's ActorRolloutRefWorker (the LoRA FSDP
            wrap policy of 0009, a nonzero adapter): two identical workers, one with the key; generation
            (greedy; sampled with n=2 from one seed; with cuda_graph too), the FSDP forwards run while
            generating, the module tree after, then compute_log_prob, update_actor and generation again on
            both; and StaticDecoder on the PEFT model against generate of the merged model
  lora_graph
            issue 43: HFRollout with rollout.cuda_graph against generate on a PEFT LoRA model, rollout.dtype float32,
            the frozen base fp32/bf16/fp16 (patch 0026): tokens, the StaticDecoder's cache dtype, and both again after
            an in-place update of the adapter's tensors
"""

import copy
import json
import sys

from verl_probe import EOS, PAD, actor_config, block_flash_attn, critic_config, init_dist, make_qwen2

PROMPT_LEN = 12
RESPONSE_LEN = 10
# (prompt tokens, response tokens incl. EOS) per row; micro-batches of 2 rows: windows [3, 19) and [5, 18)
ROWS = ((5, 4), (9, 7), (3, 2), (7, 6))


def verl_batch(seed=0):
    """A verl-layout batch: left-padded prompts, right-padded responses ending in EOS, verl's position_ids."""
    import torch

    g = torch.Generator().manual_seed(seed)
    bs = len(ROWS)
    ids = torch.full((bs, PROMPT_LEN + RESPONSE_LEN), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, r) in enumerate(ROWS):
        ids[i, PROMPT_LEN - p : PROMPT_LEN] = torch.randint(1, EOS, (p,), generator=g)
        ids[i, PROMPT_LEN : PROMPT_LEN + r - 1] = torch.randint(1, EOS, (r - 1,), generator=g)
        ids[i, PROMPT_LEN + r - 1] = EOS
        mask[i, PROMPT_LEN - p : PROMPT_LEN + r] = 1
    # verl: prompt positions cumsum(mask) - 1 clipped at 0; response positions continue from the last prompt one
    prompt_pos = torch.clip(torch.cumsum(mask[:, :PROMPT_LEN], dim=-1) - 1, min=0)
    pos = torch.cat([prompt_pos, prompt_pos[:, -1:] + torch.arange(1, RESPONSE_LEN + 1)], dim=1)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "responses": ids[:, PROMPT_LEN:].clone()}


def _max_masked_diff(a, b, mask):
    return float((a - b).abs()[mask.bool()].max())


def _outside_window_zero(t, mask):
    """Trimmed outputs right of each micro-batch's window must be exactly 0."""
    import torch

    out = True
    for start in range(0, t.size(0), 2):
        used = mask[start : start + 2].bool().any(0).nonzero().flatten()
        out &= bool(torch.all(t[start : start + 2, int(used[-1]) + 1 :] == 0))
    return out


def cpu_memory_shim():
    """verl's GPUMemoryLogger (update_policy, update_critic, compute_values) queries device memory; torch.cpu
    has no such queries. GPU-only code path, so the shim lives here rather than in the patch series."""
    import torch

    for name in ("memory_allocated", "memory_reserved"):
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, lambda: 0)
    if not hasattr(torch.cpu, "mem_get_info"):
        torch.cpu.mem_get_info = lambda: (0, 0)


def probe_trim():
    import torch
    from verl import DataProto
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    make_qwen2()  # import transformers' Qwen2 modules before flash_attn is blocked
    block_flash_attn()
    cpu_memory_shim()
    init_dist()
    torch.manual_seed(0)
    base = verl_batch()
    mask = base["attention_mask"][:, PROMPT_LEN:]
    g = torch.Generator().manual_seed(1)
    old_log_probs = -torch.rand(mask.shape, generator=g) * 6
    ref_log_prob = old_log_probs + 0.1 * torch.randn(mask.shape, generator=g)
    advantages = torch.randn(mask.shape, generator=g)
    values_in = torch.randn(mask.shape, generator=g)
    returns = torch.randn(mask.shape, generator=g)
    result = {"windows": []}
    from verl.utils.padding_window import padding_window

    for start in range(0, len(ROWS), 2):
        result["windows"].append(list(padding_window(base["attention_mask"][start : start + 2], RESPONSE_LEN)))

    update_cfg = dict(
        ppo_mini_batch_size=4,
        ppo_micro_batch_size_per_gpu=2,
        ppo_epochs=1,
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        entropy_coeff=0.01,
        loss_agg_mode="token-mean",
        policy_loss={"loss_mode": "vanilla"},
        use_kl_loss=True,
        kl_loss_type="low_var_kl",
        kl_loss_coef=0.1,
        use_dynamic_bsz=False,
        grad_clip=1.0e9,
        autocast_dtype="fp32",
    )
    for attn in ("eager", "sdpa"):
        res = {}
        outs = {}
        for trim in (False, True):
            model = make_qwen2(seed=0, attn=attn)
            actor = DataParallelPPOActor(
                actor_config(trim_padding=trim, **update_cfg), model, torch.optim.SGD(model.parameters(), lr=1.0)
            )
            data = DataProto.from_dict(
                tensors=dict(base), meta_info={"micro_batch_size": 2, "temperature": 0.7, "use_dynamic_bsz": False}
            )
            logp, ent = actor.compute_log_prob(data, calculate_entropy=True)
            before = [p.detach().clone() for p in model.parameters()]
            upd = DataProto.from_dict(
                tensors={
                    **base,
                    "old_log_probs": old_log_probs,
                    "advantages": advantages,
                    "ref_log_prob": ref_log_prob,
                },
                meta_info={"temperature": 0.7},
            )
            metrics = actor.update_policy(upd)
            step = [p.detach() - b for p, b in zip(model.parameters(), before)]  # = -grad (SGD, lr 1, no clipping)

            cmodel = make_qwen2(seed=0, attn=attn, num_labels=1)
            cmodel.dropout.p = 0.0  # verl builds the critic with classifier_dropout = 0.0 (fsdp_workers.py:929)
            critic = DataParallelPPOCritic(
                critic_config(
                    trim_padding=trim,
                    autocast_dtype="fp32",
                    ppo_mini_batch_size=4,
                    ppo_micro_batch_size_per_gpu=2,
                    ppo_epochs=1,
                    cliprange_value=0.5,
                    loss_agg_mode="token-mean",
                    use_dynamic_bsz=False,
                    grad_clip=1.0e9,
                ),
                cmodel,
                torch.optim.SGD(cmodel.parameters(), lr=1.0),
            )
            values = critic.compute_values(
                DataProto.from_dict(tensors=dict(base), meta_info={"micro_batch_size": 2, "use_dynamic_bsz": False})
            )
            cbefore = [p.detach().clone() for p in cmodel.parameters()]
            cmetrics = critic.update_critic(
                DataProto.from_dict(tensors={**base, "values": values_in, "returns": returns})
            )
            cstep = [p.detach() - b for p, b in zip(cmodel.parameters(), cbefore)]
            outs[trim] = dict(
                logp=logp, ent=ent, step=step, metrics=metrics, values=values, cstep=cstep, cmetrics=cmetrics
            )
        a, b = outs[False], outs[True]
        res["logp_max_diff"] = _max_masked_diff(a["logp"], b["logp"], mask)
        res["entropy_max_diff"] = _max_masked_diff(a["ent"], b["ent"], mask)
        res["values_max_diff"] = float((a["values"] - b["values"]).abs().max())  # compute_values masks both
        res["logp_outside_window_zero"] = _outside_window_zero(b["logp"], mask)
        res["entropy_outside_window_zero"] = _outside_window_zero(b["ent"], mask)
        res["actor_step_max_diff"] = max(float((x - y).abs().max()) for x, y in zip(a["step"], b["step"]))
        res["actor_step_max"] = max(float(x.abs().max()) for x in a["step"])
        res["critic_step_max_diff"] = max(float((x - y).abs().max()) for x, y in zip(a["cstep"], b["cstep"]))
        res["critic_step_max"] = max(float(x.abs().max()) for x in a["cstep"])
        res["metrics"] = {
            k: [a["metrics"][k], b["metrics"][k]] for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")
        }
        res["cmetrics"] = {k: [a["cmetrics"][k], b["cmetrics"][k]] for k in ("critic/vf_loss", "critic/grad_norm")}
        # the untrimmed path really computes something else on padding right of the window
        res["untrimmed_outside_window_nonzero"] = not _outside_window_zero(a["logp"], mask)
        result[attn] = res
    result["absent_key"] = {
        "actor": DataParallelPPOActor(actor_config(), make_qwen2()).trim_padding,
        "critic": DataParallelPPOCritic(critic_config(), make_qwen2(num_labels=1), None).trim_padding,
    }
    try:
        DataParallelPPOActor(actor_config(trim_padding=True, use_fused_kernels=True), make_qwen2())
        result["fused_refused"] = "accepted"
    except ValueError as exc:
        result["fused_refused"] = f"ValueError: {exc}"
    return result


ROLLOUT_PROMPTS = ((11, 12, 13, 14, 15), (21, 22, 23, 24, 25, 26, 27, 28, 29, 30), (31, 32, 33, 34, 35, 36, 37))
ROLLOUT_WIDTH = 16


def rollout_batch():
    """Prompts of 5, 10 and 7 tokens left-padded to 16 columns (6 columns of padding in every row)."""
    import torch

    ids = torch.full((len(ROLLOUT_PROMPTS), ROLLOUT_WIDTH), PAD, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, prompt in enumerate(ROLLOUT_PROMPTS):
        ids[i, ROLLOUT_WIDTH - len(prompt) :] = torch.tensor(prompt)
        mask[i, ROLLOUT_WIDTH - len(prompt) :] = 1
    return ids, mask, torch.clip(torch.cumsum(mask, dim=-1) - 1, min=0)


def _run_rollout(model, cfg, seed=None, **meta):
    import torch
    from verl_probe import data_proto

    from verl.workers.rollout.hf_rollout import HFRollout

    ids, mask, pos = rollout_batch()
    if seed is not None:
        torch.manual_seed(seed)
    out = HFRollout(model, cfg).generate_sequences(data_proto(ids, mask, pos, **meta))
    return {k: out.batch[k] for k in ("prompts", "responses", "input_ids", "attention_mask", "position_ids")}


def _same(a, b):
    import torch

    return {k: bool(torch.equal(a[k], b[k])) for k in a}


def probe_rollout():
    from verl_probe import cpu_empty_cache_shim, manual_greedy, rollout_config

    model = make_qwen2(seed=0, attn="sdpa")
    block_flash_attn()
    cpu_empty_cache_shim()
    widths = []
    original_generate = model.generate

    def spy_generate(*args, **kwargs):
        widths.append(kwargs["input_ids"].shape[1])
        return original_generate(*args, **kwargs)

    model.generate = spy_generate
    result = {"generate_widths": {}}
    steps = 24
    greedy = {}
    for trim in (False, True):
        widths.clear()
        greedy[trim] = _run_rollout(
            model,
            rollout_config(do_sample=False, response_length=steps, micro_batch_size=2, trim_padding=trim),
            do_sample=False,
        )
        result["generate_widths"][str(trim)] = list(widths)
    result["greedy_same"] = _same(greedy[False], greedy[True])
    ids, mask, _ = rollout_batch()
    result["greedy_matches_manual"] = (
        greedy[True]["responses"].tolist() == manual_greedy(model, ids, mask, steps).tolist()
    )
    sampled = {
        trim: _run_rollout(
            model,
            rollout_config(do_sample=True, n=2, response_length=steps, micro_batch_size=2, trim_padding=trim),
            seed=7,
        )
        for trim in (False, True)
    }
    result["sampled_same"] = _same(sampled[False], sampled[True])
    result["sampled_shape"] = list(sampled[True]["input_ids"].shape)
    result["sampled_prompts_restored"] = bool((sampled[True]["prompts"] == ids.repeat_interleave(2, dim=0)).all())
    return result


def _generate(model, ids, mask, steps, eos, **kwargs):
    from transformers import GenerationConfig

    cfg = GenerationConfig(max_new_tokens=steps, eos_token_id=eos, pad_token_id=PAD, repetition_penalty=1.0, **kwargs)
    return model.generate(
        input_ids=ids,
        attention_mask=mask,
        generation_config=cfg,
        use_model_defaults=False,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
    )


def probe_static():
    import torch
    from verl_probe import cpu_empty_cache_shim, rollout_config

    from verl.workers.rollout.static_decode import StaticDecoder, next_tokens, sampling_processors

    ids, mask, _ = rollout_batch()
    result = {}
    steps = 32
    for attn in ("eager", "sdpa"):
        model = make_qwen2(seed=0, attn=attn)
        res = {}
        with torch.no_grad():
            ref = _generate(model, ids, mask, steps, EOS, do_sample=False).sequences
            dec = StaticDecoder(
                model,
                ids.size(0),
                ids.size(1) + steps,
                do_sample=False,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                eos_token_id=EOS,
                pad_token_id=PAD,
            )
            res["greedy_equal"] = dec.generate(ids, mask, steps).tolist() == ref.tolist()
            res["greedy_len"] = ref.size(1)
            # early EOS: the token row 1 emits at step 3 and row 0 at step 5 end those rows there
            eos = [int(ref[1, ids.size(1) + 3]), int(ref[0, ids.size(1) + 5])]
            ref_eos = _generate(model, ids, mask, steps, eos, do_sample=False).sequences
            dec = StaticDecoder(
                model,
                ids.size(0),
                ids.size(1) + steps,
                do_sample=False,
                temperature=1.0,
                top_k=0,
                top_p=1.0,
                eos_token_id=eos,
                pad_token_id=PAD,
            )
            got = dec.generate(ids, mask, steps)
            res["eos_equal"] = got.tolist() == ref_eos.tolist()
            res["eos_pad_after"] = int((got[:, ids.size(1) :] == PAD).sum())
            res["eos_len"] = [got.size(1), ref_eos.size(1)]
            # every row ends early: decoding stops after the step where the last row finished
            all_eos = list({int(ref[i, ids.size(1) + 2]) for i in range(ids.size(0))})
            res["all_eos_len"] = [
                StaticDecoder(
                    model,
                    ids.size(0),
                    ids.size(1) + steps,
                    do_sample=False,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    eos_token_id=all_eos,
                    pad_token_id=PAD,
                )
                .generate(ids, mask, steps)
                .size(1),
                _generate(model, ids, mask, steps, all_eos, do_sample=False).sequences.size(1),
            ]
        result[attn] = res

    # the warped scores generate samples from (output_scores) equal sampling_processors applied to its raw logits
    model = make_qwen2(seed=0, attn="sdpa")
    warp = {}
    for label, cfg in {
        "t0.7_k20_p0.8": dict(temperature=0.7, top_k=20, top_p=0.8),
        "t1_k0_p1": dict(temperature=1.0, top_k=0, top_p=1.0),
        "t1.3_k0_p0.9": dict(temperature=1.3, top_k=0, top_p=0.9),
    }.items():
        torch.manual_seed(3)
        with torch.no_grad():
            out = _generate(model, ids, mask, 8, EOS, do_sample=True, **cfg)
        procs = sampling_processors(True, **cfg)
        diffs = []
        for raw, processed in zip(out.logits, out.scores):
            mine = procs(None, raw.float())
            same_inf = torch.equal(torch.isinf(mine), torch.isinf(processed))
            finite = ~torch.isinf(processed)
            diffs.append(float((mine[finite] - processed[finite]).abs().max()) if same_inf else float("inf"))
        warp[label] = {"max_diff": max(diffs), "processors": [type(p).__name__ for p in procs]}
    result["warpers"] = warp

    # Gumbel-max picks token i with probability softmax(warped)[i]: 400000 draws from one row of 12 tokens
    logits = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, 0.25, 0.75, 1.25, 3.0]])
    procs = sampling_processors(True, temperature=0.8, top_k=8, top_p=0.95)
    target = torch.softmax(procs(None, logits.clone()), -1)[0]
    g = torch.Generator().manual_seed(0)
    draws = next_tokens(logits.expand(400000, -1), True, procs, generator=g)
    freq = torch.bincount(draws, minlength=12).float() / draws.numel()
    result["gumbel"] = {
        "max_abs_freq_diff": float((freq - target).abs().max()),
        "filtered_drawn": int(freq[target == 0].sum() * draws.numel()),
        "kept": int((target > 0).sum()),
    }
    try:
        sampling_processors(True, temperature=0.0)
        result["zero_temperature"] = "accepted"
    except ValueError as exc:
        result["zero_temperature"] = f"ValueError: {exc}"

    # through verl's HFRollout: cuda_graph (eager static decode on CPU) vs generate, plain and FSDP-wrapped
    block_flash_attn()
    cpu_empty_cache_shim()
    init_dist()
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy
    from transformers.models.qwen2.modeling_qwen2 import Qwen2DecoderLayer

    roll = {}
    calls = []
    original_generate = model.generate
    model.generate = lambda *a, **k: calls.append(1) or original_generate(*a, **k)
    base = _run_rollout(
        model, rollout_config(do_sample=False, response_length=steps, micro_batch_size=2), do_sample=False
    )
    for label, trim in (("static", False), ("static_trim", True)):
        out = _run_rollout(
            model,
            rollout_config(
                do_sample=False, response_length=steps, micro_batch_size=2, cuda_graph=True, trim_padding=trim
            ),
            do_sample=False,
        )
        roll[label] = _same(base, out)
    roll["generate_calls"] = len(calls)  # 2 micro-batches without cuda_graph, none with it
    wrapped = FSDP(
        make_qwen2(seed=0, attn="sdpa"),
        auto_wrap_policy=ModuleWrapPolicy({Qwen2DecoderLayer}),
        device_id=torch.device("cpu"),
    )
    out = _run_rollout(
        wrapped,
        rollout_config(do_sample=False, response_length=steps, micro_batch_size=2, cuda_graph=True),
        do_sample=False,
    )
    roll["fsdp_static"] = _same(base, out)
    roll["fsdp_restored"] = sum(isinstance(m, FSDP) for m in wrapped.modules())
    sampled = _run_rollout(
        model,
        rollout_config(
            do_sample=True,
            n=2,
            temperature=0.9,
            top_k=30,
            top_p=0.9,
            response_length=steps,
            micro_batch_size=2,
            cuda_graph=True,
        ),
        seed=5,
    )
    roll["sampled_shape"] = list(sampled["input_ids"].shape)
    # PPO's view of those samples: each sampled token must be allowed by top-k/top-p at its step
    with torch.no_grad():
        logits = (
            model(
                input_ids=sampled["input_ids"],
                attention_mask=sampled["attention_mask"],
                position_ids=sampled["position_ids"],
            )
            .logits[:, ROLLOUT_WIDTH - 1 : -1]
            .float()
        )
    procs = sampling_processors(True, temperature=0.9, top_k=30, top_p=0.9)
    allowed = torch.stack([~torch.isinf(procs(None, logits[:, t].clone())) for t in range(steps)], dim=1)
    valid = sampled["attention_mask"][:, ROLLOUT_WIDTH:].bool()
    chosen_allowed = allowed.gather(-1, sampled["responses"][..., None]).squeeze(-1)
    roll["sampled_tokens_outside_top_k_top_p"] = int((~chosen_allowed & valid).sum())
    roll["sampled_valid_tokens"] = int(valid.sum())
    result["rollout"] = roll
    return result


def make_qwen3(seed=0, attn="sdpa"):
    """A tiny random Qwen3ForCausalLM (per-head q/k RMSNorm, head_dim 16) whose config has no EOS and no pad id,
    as a Qwen3Config made without them (transformers 4.51.3 gives Qwen3Config no EOS default)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from verl_probe import VOCAB

    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        initializer_range=0.2,
        tie_word_embeddings=False,
        attn_implementation=attn,
    )
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float().eval()


def _generate_as_hf_rollout(model, ids, mask, steps, eos, pad):
    """generate() called as verl's HFRollout calls it for greedy decoding: eos/pad as keyword arguments next to a
    GenerationConfig without them, repetition_penalty 1.0 and use_model_defaults=False (patch 0004)."""
    from transformers import GenerationConfig

    cfg = GenerationConfig(do_sample=False, num_beams=1, repetition_penalty=1.0)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=steps,
        eos_token_id=eos,
        pad_token_id=pad,
        generation_config=cfg,
        output_scores=False,
        return_dict_in_generate=True,
        use_cache=True,
        use_model_defaults=False,
    )
    return out.sequences


def _static_greedy(model, ids, mask, steps, eos, pad):
    from verl.workers.rollout.static_decode import StaticDecoder

    return StaticDecoder(
        model,
        ids.size(0),
        ids.size(1) + steps,
        do_sample=False,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        eos_token_id=eos,
        pad_token_id=pad,
    ).generate(ids, mask, steps)


def _after_first_eos(responses, eos_ids):
    """(rows, steps) token ids -> the tokens that follow each row's first token in eos_ids, all rows, as a list."""
    out = []
    for row in responses.tolist():
        hits = [i for i, t in enumerate(row) if t in eos_ids]
        out += row[hits[0] + 1 :] if hits else []
    return out


def probe_no_eos(model_dir):
    import json as json_module
    import os

    import torch
    from verl_probe import cpu_empty_cache_shim, data_proto, rollout_config

    from verl.workers.rollout import static_decode

    ids, mask, _ = rollout_batch()
    steps = 32
    width = ids.size(1)
    pairs = {
        "none_none": (None, None),
        "none_pad": (None, PAD),
        "empty_pad": ([], PAD),
        "int_none": (7, None),
        "list_none": ([9, 7], None),
        "list_pad": ([9, 7], PAD),
    }
    result = {
        "special_tokens": (
            {label: list(static_decode.special_tokens(eos, pad)) for label, (eos, pad) in pairs.items()}
            if hasattr(static_decode, "special_tokens")
            else "missing"
        )
    }
    models = {
        "qwen2_no_eos": make_qwen2(seed=0, attn="sdpa", eos_token_id=None, pad_token_id=None),
        "qwen3_no_eos": make_qwen3(seed=0),
        "qwen2_model_eos": make_qwen2(seed=0, attn="sdpa"),
    }
    cases = {}
    for name, model in models.items():
        res = {"model_generation_config_eos": model.generation_config.eos_token_id}
        with torch.no_grad():
            full = _generate_as_hf_rollout(model, ids, mask, steps, None, None)
            # EOS ids taken from the no-EOS decode: the token row 1 emits at step 3 and row 0 at step 5
            eos_list = [int(full[1, width + 3]), int(full[0, width + 5])]
            for label, (eos, pad) in {
                "no_eos_no_pad": (None, None),
                "no_eos_pad": (None, PAD),
                "eos_list_no_pad": (eos_list, None),
                "eos_int_no_pad": (eos_list[0], None),
            }.items():
                ref = _generate_as_hf_rollout(model, ids, mask, steps, eos, pad)
                try:
                    got = _static_greedy(model, ids, mask, steps, eos, pad)
                except Exception as exc:  # the defect of issue 29, reported rather than raised
                    res[label] = {"error": f"{type(exc).__name__}: {exc}"}
                    continue
                eos_ids = [] if eos is None else [eos] if isinstance(eos, int) else eos
                after = _after_first_eos(got[:, width:], eos_ids)
                res[label] = {
                    "equal": got.tolist() == ref.tolist(),
                    "len": [got.size(1), ref.size(1)],
                    # tokens after a row's first EOS, and how many of them are the first EOS id (generate's pad without
                    # one)
                    "after_eos": [len(after), after.count(eos_ids[0])] if eos_ids else None,
                }
        cases[name] = res
    result["cases"] = cases

    # HFRollout with an EOS list and no pad id (a generation config like Llama 3.2's), every row stopping by its
    # third token: verl appends the columns generate did not produce
    cpu_empty_cache_shim()
    block_flash_attn()
    from verl.workers.rollout.hf_rollout import HFRollout

    model = models["qwen2_no_eos"]
    with torch.no_grad():
        full = _generate_as_hf_rollout(model, ids, mask, steps, None, None)
    early = sorted({int(full[i, width + 2]) for i in range(ids.size(0))})
    early_out, rollout_eos = {}, {"eos": early}
    for cuda_graph in (False, True):
        try:
            early_out[cuda_graph] = _run_rollout(
                model,
                rollout_config(do_sample=False, response_length=steps, micro_batch_size=3, cuda_graph=cuda_graph),
                do_sample=False,
                eos_token_id=early,
                pad_token_id=None,
            )
        except Exception as exc:
            rollout_eos[f"cuda_graph_{cuda_graph}"] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        responses = early_out[cuda_graph]["responses"]
        after = _after_first_eos(responses, early)
        rollout_eos[f"cuda_graph_{cuda_graph}"] = {
            "responses_shape": list(responses.shape),
            "after_eos": [len(after), after.count(early[0])],
            "response_mask_ones": int(early_out[cuda_graph]["attention_mask"][:, width:].sum()),
        }
    if len(early_out) == 2:
        rollout_eos["same"] = _same(early_out[False], early_out[True])
    result["rollout_eos_no_pad"] = rollout_eos

    # verl's own worker path: ActorRolloutRefWorker.generate_sequences builds the rollout's eos/pad ids (the
    # generation config's when the checkpoint has one, fsdp_workers.py:654-657) and calls HFRollout
    cpu_memory_shim()
    import verl.workers.fsdp_workers as fw
    from verl.utils import hf_tokenizer
    from verl.utils.model import get_generation_config
    from verl.workers.sharding_manager.base import BaseShardingManager

    from transformers import AutoModelForCausalLM

    with open(os.path.join(model_dir, "generation_config.json")) as f:
        saved = json_module.load(f)
    model = AutoModelForCausalLM.from_pretrained(
        model_dir, attn_implementation="sdpa", torch_dtype=torch.float32
    ).eval()
    tokenizer = hf_tokenizer(model_dir)
    worker_path = {
        "tokenizer_eos_pad": [tokenizer.eos_token, tokenizer.pad_token],
        "generation_config_json_keys": sorted(k for k in saved if k != "transformers_version"),
    }
    outputs = {}
    for cuda_graph in (False, True):
        worker = type("WorkerState", (), {})()  # the attributes generate_sequences reads
        worker._is_rollout = True
        worker.generation_config = get_generation_config(model_dir)
        worker.tokenizer = tokenizer
        worker.rollout_sharding_manager = BaseShardingManager()
        worker.rollout = HFRollout(
            model, rollout_config(do_sample=False, response_length=steps, micro_batch_size=2, cuda_graph=cuda_graph)
        )
        prompt_ids, prompt_mask, prompt_pos = rollout_batch()
        try:
            out = fw.ActorRolloutRefWorker.generate_sequences(
                worker, data_proto(prompt_ids, prompt_mask, prompt_pos, do_sample=False)
            )
        except Exception as exc:
            worker_path[f"cuda_graph_{cuda_graph}"] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        outputs[cuda_graph] = {
            k: out.batch[k] for k in ("prompts", "responses", "input_ids", "attention_mask", "position_ids")
        }
        worker_path[f"cuda_graph_{cuda_graph}"] = {
            "responses_shape": list(out.batch["responses"].shape),
            "response_mask_ones": int(out.batch["attention_mask"][:, width:].sum()),
        }
    if len(outputs) == 2:
        worker_path["same"] = _same(outputs[False], outputs[True])
        with torch.no_grad():
            worker_path["generate_equal"] = (
                outputs[True]["input_ids"].tolist()
                == _generate_as_hf_rollout(model, prompt_ids, prompt_mask, steps, None, None).tolist()
            )
    result["worker"] = worker_path
    return result


UNWRAP_SAMPLING = {"temperature": 0.9, "top_k": 30, "top_p": 0.9}


def _lora_worker(fw, captured, model_dir, **rollout_keys):
    """verl's ActorRolloutRefWorker (actor + HF rollout + ref in actor) with LoRA, the sampling of
    UNWRAP_SAMPLING, n=2 and the extra rollout keys given; ``captured`` is emptied first, so every worker gets
    the same nonzero adapter (verl_probe._cpu_worker_shims seeds lora_B by len(captured))."""
    import torch
    from omegaconf import open_dict
    from verl_probe import lora_trainer_config

    captured.clear()
    config = lora_trainer_config(model_dir)
    with open_dict(config):
        rollout = config.actor_rollout_ref.rollout
        rollout.do_sample, rollout.n = True, 2  # greedy generation passes do_sample=False in meta_info
        for key, value in {**UNWRAP_SAMPLING, **rollout_keys}.items():
            rollout[key] = value
    worker = fw.ActorRolloutRefWorker(config.actor_rollout_ref, role="actor_rollout")
    torch.manual_seed(0)  # PEFT draws lora_A from the global generator
    worker.init_model()
    return worker


class _FsdpForwardCounter:
    """Counts FullyShardedDataParallel.forward calls (each one an FSDP unit's pre/post-forward hooks)."""

    def __init__(self):
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

        self.calls = 0
        real = FSDP.forward

        def forward(module, *args, **kwargs):
            self.calls += 1
            return real(module, *args, **kwargs)

        FSDP.forward = forward

    def take(self):
        calls, self.calls = self.calls, 0
        return calls


def _pad_after_eos(responses):
    """(rows, steps) token ids -> the same with every token after a row's first EOS replaced by PAD."""
    import torch

    after = (torch.cumsum((responses == EOS).long(), dim=-1) - (responses == EOS).long()) > 0
    return responses.masked_fill(after, PAD)


def _tree(module):
    """The module tree as (name, object id, type) rows: equal only if the very same objects are in place."""
    return [(name, id(m), type(m).__name__) for name, m in module.named_modules()]


def probe_unwrap():
    import tempfile

    import torch
    from verl_probe import (
        LORA_RANK,
        PROMPT_LEN,
        RESPONSE_STEPS,
        _cpu_worker_shims,
        _full_params,
        data_proto,
        left_padded_batch,
        manual_greedy,
        save_checkpoint,
        single_process_worker_env,
    )

    model_dir = save_checkpoint(tempfile.mkdtemp(prefix="speed_probe_model_"))
    single_process_worker_env()
    import verl.workers.fsdp_workers as fw
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from verl import DataProto

    from verl.workers.rollout.static_decode import StaticDecoder

    captured = []
    _cpu_worker_shims(fw, captured)
    plain = _lora_worker(fw, captured, model_dir)
    peft_model = captured[0]["peft"].eval()  # the adapted model as verl built it, before FSDP wrapped it
    unwrap = _lora_worker(fw, captured, model_dir, unwrap_fsdp=True)
    workers = {"plain": plain, "unwrap": unwrap}
    result = {
        "key_read": {
            label: getattr(w.rollout, "unwrap_fsdp", None) for label, w in workers.items()
        },  # None: a tree without 0023
        "lora_rank": LORA_RANK,
        "lora_b_nonzero": bool(
            all(float(p.abs().sum()) > 0 for n, p in peft_model.named_parameters() if "lora_B" in n)
        ),
        "fsdp_units": sum(isinstance(m, FSDP) for m in unwrap.actor_module_fsdp.modules()),
    }
    counter = _FsdpForwardCounter()
    tree_before = _tree(unwrap.actor_module_fsdp)
    ids, mask, pos = left_padded_batch()

    def generate(worker, seed=None, **meta):
        if seed is not None:
            torch.manual_seed(seed)
        out = worker.generate_sequences(data_proto(ids, mask, pos, **meta))
        return {k: out.batch[k] for k in ("prompts", "responses", "input_ids", "attention_mask", "position_ids")}

    fsdp_forwards, greedy, sampled = {}, {}, {}
    for label, worker in workers.items():
        counter.take()
        greedy[label] = generate(worker, do_sample=False)
        fsdp_forwards[label] = counter.take()
        sampled[label] = generate(worker, seed=5)
    result["fsdp_forwards_greedy"] = fsdp_forwards
    result["greedy_same"] = _same(greedy["plain"], greedy["unwrap"])
    result["sampled_same"] = _same(sampled["plain"], sampled["unwrap"])
    result["sampled_shape"] = list(sampled["unwrap"]["input_ids"].shape)
    merged = copy.deepcopy(peft_model).merge_and_unload().eval()
    expected = _pad_after_eos(
        manual_greedy(merged, ids, mask, RESPONSE_STEPS)
    )  # rows that emit EOS get pad after it, as generate
    result["greedy_equals_merged_manual"] = greedy["unwrap"]["responses"].tolist() == expected.tolist()
    result["greedy_rows_ended_by_eos"] = int((greedy["unwrap"]["responses"] == EOS).any(-1).sum())
    result["greedy_differs_from_base"] = (
        greedy["unwrap"]["responses"].tolist()
        != manual_greedy(captured[0]["base"].eval(), ids, mask, RESPONSE_STEPS).tolist()
    )
    # rollout.cuda_graph on the same worker (the static decoder, eager on CPU, on the unwrapped PEFT model)
    unwrap.rollout.cuda_graph = True
    counter.take()
    result["cuda_graph_greedy_same"] = _same(greedy["plain"], generate(unwrap, do_sample=False))
    result["fsdp_forwards_cuda_graph"] = counter.take()
    unwrap.rollout.cuda_graph = False
    result["tree_restored"] = _tree(unwrap.actor_module_fsdp) == tree_before
    result["tree_fsdp_units_after"] = sum(isinstance(m, FSDP) for m in unwrap.actor_module_fsdp.modules())

    # after generating, the FSDP worker trains as before: log-probs, one update, log-probs and generation again
    batch = sampled["plain"]
    response_mask = batch["attention_mask"][:, PROMPT_LEN:]
    old = {
        label: w.compute_log_prob(DataProto.from_dict(tensors=dict(batch))).batch["old_log_probs"]
        for label, w in workers.items()
    }
    result["old_log_probs_same"] = bool(torch.equal(old["plain"], old["unwrap"]))
    generator = torch.Generator().manual_seed(3)
    advantages = torch.randn(response_mask.shape, generator=generator) * response_mask
    n_tokens = batch["attention_mask"].sum(-1).tolist()
    metrics, params, before = {}, {}, _full_params(unwrap.actor_module_fsdp)
    for label, w in workers.items():
        ref = w.compute_ref_log_prob(DataProto.from_dict(tensors=dict(batch))).batch["ref_log_prob"]
        update = dict(batch, old_log_probs=old[label], ref_log_prob=ref, advantages=advantages)
        metrics[label] = w.update_actor(
            DataProto.from_dict(tensors=update, meta_info={"temperature": 1.0, "global_token_num": n_tokens})
        ).meta_info["metrics"]
        params[label] = _full_params(w.actor_module_fsdp)
    result["update_metrics_same"] = {
        k: metrics["plain"][k] == metrics["unwrap"][k] for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")
    }
    result["params_after_update_same"] = all(
        torch.equal(params["plain"][n], params["unwrap"][n]) for n in params["plain"]
    )
    changed = sorted(n for n in before if not torch.equal(before[n], params["unwrap"][n]))
    result["changed_only_adapter"] = bool(changed) and all(".lora_A." in n or ".lora_B." in n for n in changed)
    new = {
        label: w.compute_log_prob(DataProto.from_dict(tensors=dict(batch))).batch["old_log_probs"]
        for label, w in workers.items()
    }
    result["log_probs_after_update_same"] = bool(torch.equal(new["plain"], new["unwrap"]))
    result["log_probs_moved"] = float((new["unwrap"] - old["unwrap"]).abs()[response_mask.bool()].max())
    result["greedy_after_update_same"] = _same(generate(plain, do_sample=False), generate(unwrap, do_sample=False))
    counter.take()

    # the static decoder on the PEFT model itself (adapter active) vs generate of the merged model
    rids, rmask, _ = rollout_batch()
    steps = 32
    static = {}
    with torch.no_grad():
        ref = _generate(merged, rids, rmask, steps, EOS, do_sample=False).sequences
        dec = StaticDecoder(
            peft_model,
            rids.size(0),
            rids.size(1) + steps,
            do_sample=False,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            eos_token_id=EOS,
            pad_token_id=PAD,
        )
        got = dec.generate(rids, rmask, steps)
        static["module"] = type(peft_model).__name__
        static["greedy_equal_merged"] = got.tolist() == ref.tolist()
        static["greedy_len"] = got.size(1)
        static["greedy_equal_peft_generate"] = (
            got.tolist() == _generate(peft_model, rids, rmask, steps, EOS, do_sample=False).sequences.tolist()
        )
        static["differs_from_base"] = (
            got.tolist() != _generate(captured[0]["base"], rids, rmask, steps, EOS, do_sample=False).sequences.tolist()
        )
        eos = [int(ref[1, rids.size(1) + 3]), int(ref[0, rids.size(1) + 5])]
        ref_eos = _generate(merged, rids, rmask, steps, eos, do_sample=False).sequences
        dec_eos = StaticDecoder(
            peft_model,
            rids.size(0),
            rids.size(1) + steps,
            do_sample=False,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            eos_token_id=eos,
            pad_token_id=PAD,
        )
        got_eos = dec_eos.generate(rids, rmask, steps)
        static["eos_equal_merged"] = got_eos.tolist() == ref_eos.tolist()
        static["eos_pad_after"] = int((got_eos[:, rids.size(1) :] == PAD).sum())
    result["static_peft"] = static
    return result


def probe_lora_graph():
    """Issue 43 items 1-2 on CPU (the graph decoder's steps run eagerly there): HFRollout with rollout.cuda_graph
    against generate on a PEFT LoRA model (rank 8, all-linear, lora_B drawn), rollout.dtype float32 (the p40 path),
    the frozen base in fp32, bf16 and fp16 (patch 0026, computed in fp32); then one in-place SGD step on the adapter's
    tensors and both again with the same rollout objects."""
    import torch
    from peft import LoraConfig, get_peft_model
    from verl_probe import cpu_empty_cache_shim, data_proto, rollout_config

    import verl.workers.rollout.hf_rollout as hf_rollout
    from verl.utils.frozen_base import store_frozen_base

    cpu_empty_cache_shim()
    cache_dtypes = []

    class Recorded(hf_rollout.StaticDecoder):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            cache_dtypes.append(str(self.cache.key_cache[0].dtype))

    hf_rollout.StaticDecoder = Recorded
    result = {}
    for base in ("float32", "bfloat16", "float16"):
        model = get_peft_model(
            make_qwen2(seed=0, attn="sdpa"), LoraConfig(r=8, lora_alpha=16, target_modules="all-linear")
        )
        generator = torch.Generator().manual_seed(1)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.data.copy_(torch.randn(param.shape, generator=generator) * 0.3)
        if base != "float32":
            store_frozen_base(model, getattr(torch, base))
        graph = hf_rollout.HFRollout(model, rollout_config(cuda_graph=True, response_length=RESPONSE_LEN * 2))
        plain = hf_rollout.HFRollout(model, rollout_config(cuda_graph=False, response_length=RESPONSE_LEN * 2))
        res = {}
        cache_dtypes.clear()
        ids, mask, pos = rollout_batch()

        def tokens(roll):
            return roll.generate_sequences(data_proto(ids, mask, pos)).batch["input_ids"]

        expected, got = tokens(plain), tokens(graph)
        res["equal"] = got.tolist() == expected.tolist()
        with model.disable_adapter():
            res["adapter_changes_tokens"] = tokens(plain).tolist() != expected.tolist()
        params = [p for n, p in model.named_parameters() if "lora_" in n]
        pointers = [p.data_ptr() for p in params]
        for p in params:
            p.grad = torch.randn(p.shape, generator=generator)
        torch.optim.SGD(params, lr=0.05).step()
        res["updated_in_place"] = [p.data_ptr() for p in params] == pointers
        expected_after, got_after = tokens(plain), tokens(graph)
        res["update_changes_tokens"] = (
            expected_after.tolist() != expected.tolist() and got_after.tolist() != got.tolist()
        )
        res["equal_after_update"] = got_after.tolist() == expected_after.tolist()
        res["cache_dtypes"] = sorted(set(cache_dtypes))
        result[base] = res
    return result


def main(argv):
    fn = {
        "trim": probe_trim,
        "rollout": probe_rollout,
        "static": probe_static,
        "no_eos": probe_no_eos,
        "unwrap": probe_unwrap,
        "lora_graph": probe_lora_graph,
    }[argv[0]]
    result = fn(*argv[1:])
    import verl

    result["verl_file"] = verl.__file__
    result["models_built"] = sorted(set(sys.modules["verl_probe"].BUILT))  # the family really built (issue 26)
    print("PROBE_RESULT " + json.dumps(result, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
