"""Probes for the speed patches (0020+), run in a subprocess against one patched copy of verl.

Usage: PYTHONPATH=<dir containing verl/> python speed_probe.py PROBE
The last stdout line is ``PROBE_RESULT <json>`` (as verl_probe.py, whose tiny-model helpers it reuses).

Probes:
  trim      actor (log-probs, entropy, one PPO update) and critic (values, one value update) with
            trim_padding on and off, eager and sdpa, on a batch whose rows have different prompt and
            response lengths: the largest differences on response_mask positions
  rollout   HF rollout with rollout.trim_padding on and off (greedy; sampling with n=2 from the same seed):
            whether every output tensor is identical
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
        ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, ppo_epochs=1, clip_ratio=0.2, clip_ratio_low=None, clip_ratio_high=None, entropy_coeff=0.01,
        loss_agg_mode="token-mean", policy_loss={"loss_mode": "vanilla"}, use_kl_loss=True, kl_loss_type="low_var_kl", kl_loss_coef=0.1, use_dynamic_bsz=False, grad_clip=1.0e9, autocast_dtype="fp32",
    )
    for attn in ("eager", "sdpa"):
        res = {}
        outs = {}
        for trim in (False, True):
            model = make_qwen2(seed=0, attn=attn)
            actor = DataParallelPPOActor(actor_config(trim_padding=trim, **update_cfg), model, torch.optim.SGD(model.parameters(), lr=1.0))
            data = DataProto.from_dict(tensors=dict(base), meta_info={"micro_batch_size": 2, "temperature": 0.7, "use_dynamic_bsz": False})
            logp, ent = actor.compute_log_prob(data, calculate_entropy=True)
            before = [p.detach().clone() for p in model.parameters()]
            upd = DataProto.from_dict(tensors={**base, "old_log_probs": old_log_probs, "advantages": advantages, "ref_log_prob": ref_log_prob}, meta_info={"temperature": 0.7})
            metrics = actor.update_policy(upd)
            step = [p.detach() - b for p, b in zip(model.parameters(), before)]  # = -grad (SGD, lr 1, no clipping)

            cmodel = make_qwen2(seed=0, attn=attn, num_labels=1)
            cmodel.dropout.p = 0.0  # verl builds the critic with classifier_dropout = 0.0 (fsdp_workers.py:929)
            critic = DataParallelPPOCritic(
                critic_config(trim_padding=trim, autocast_dtype="fp32", ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, ppo_epochs=1, cliprange_value=0.5, loss_agg_mode="token-mean", use_dynamic_bsz=False, grad_clip=1.0e9),
                cmodel,
                torch.optim.SGD(cmodel.parameters(), lr=1.0),
            )
            values = critic.compute_values(DataProto.from_dict(tensors=dict(base), meta_info={"micro_batch_size": 2, "use_dynamic_bsz": False}))
            cbefore = [p.detach().clone() for p in cmodel.parameters()]
            cmetrics = critic.update_critic(DataProto.from_dict(tensors={**base, "values": values_in, "returns": returns}))
            cstep = [p.detach() - b for p, b in zip(cmodel.parameters(), cbefore)]
            outs[trim] = dict(logp=logp, ent=ent, step=step, metrics=metrics, values=values, cstep=cstep, cmetrics=cmetrics)
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
        res["metrics"] = {k: [a["metrics"][k], b["metrics"][k]] for k in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm")}
        res["cmetrics"] = {k: [a["cmetrics"][k], b["cmetrics"][k]] for k in ("critic/vf_loss", "critic/grad_norm")}
        # the untrimmed path really computes something else on padding right of the window
        res["untrimmed_outside_window_nonzero"] = not _outside_window_zero(a["logp"], mask)
        result[attn] = res
    result["absent_key"] = {"actor": DataParallelPPOActor(actor_config(), make_qwen2()).trim_padding, "critic": DataParallelPPOCritic(critic_config(), make_qwen2(num_labels=1), None).trim_padding}
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
        greedy[trim] = _run_rollout(model, rollout_config(do_sample=False, response_length=steps, micro_batch_size=2, trim_padding=trim), do_sample=False)
        result["generate_widths"][str(trim)] = list(widths)
    result["greedy_same"] = _same(greedy[False], greedy[True])
    ids, mask, _ = rollout_batch()
    result["greedy_matches_manual"] = greedy[True]["responses"].tolist() == manual_greedy(model, ids, mask, steps).tolist()
    sampled = {trim: _run_rollout(model, rollout_config(do_sample=True, n=2, response_length=steps, micro_batch_size=2, trim_padding=trim), seed=7) for trim in (False, True)}
    result["sampled_same"] = _same(sampled[False], sampled[True])
    result["sampled_shape"] = list(sampled[True]["input_ids"].shape)
    result["sampled_prompts_restored"] = bool((sampled[True]["prompts"] == ids.repeat_interleave(2, dim=0)).all())
    return result


def main(argv):
    fn = {"trim": probe_trim, "rollout": probe_rollout}[argv[0]]
    result = fn(*argv[1:])
    import verl

    result["verl_file"] = verl.__file__
    print("PROBE_RESULT " + json.dumps(result, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
