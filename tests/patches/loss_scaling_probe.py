"""Probes for patch 0024 (dynamic loss scaling of fp16 updates), run in a subprocess against one patched copy of verl.

Usage: PYTHONPATH=<dir containing verl/> python loss_scaling_probe.py PROBE
The last stdout line is ``PROBE_RESULT <json>`` (as verl_probe.py, whose tiny-model helpers it reuses).

fp16 on CPU: torch's CPU autocast runs Linear/matmul in fp16 (``torch.autocast("cpu", dtype=torch.float16)``,
checked by the probe itself: ``cpu_autocast_fp16``), so the fp16 paths run as on a GPU, only slower. The actor and
critic are FSDP1 modules (gloo, world size 1, ``device_id=cpu``) with verl's mixed precision for the t4/v100 profiles:
``MixedPrecision(param_dtype=fp16, reduce_dtype=fp32, buffer_dtype=fp32)``: the flat parameters (masters), their
gradients and AdamW's states stay fp32; forward and backward run on fp16 copies.

Probes:
  update    one PPO update (actor) and one value update (critic) of a tiny random Qwen2 and Qwen3 through verl's
            DataParallelPPOActor / DataParallelPPOCritic: fp32 (no autocast, no scaler) against fp16 (FSDP param
            fp16, fp16 autocast, loss scaling on), with SGD lr 1 (a parameter's change is minus its clipped
            gradient), grad_clip 1e9 (no clipping) and 0.05 (clipping active); the scaler in fp32 (exact powers of
            two: bit-identical to no scaler); key absent (stock: no scaler object)
  overflow  an inf or nan injected into one micro-batch's gradient (a backward hook on the first decoder layer's
            output): the update is skipped with weights and AdamW state bit-identical, the scale halved, the
            metrics say so; the next clean update steps; max_consecutive_skips overflowing updates in a row raise
  stock     on a tree without 0024: an fp16 actor whose every update overflows, five updates (no scaler, no metric,
            no stop)
  logprob   a tiny random Qwen2's HF rollout (verl's HFRollout) in fp16 autocast, with and without patch 0022's
            static decoder, sampled: its per-token log-probs (generate's raw logits under fp16) against verl's fp32
            compute_log_prob of the same tokens
"""

import json
import sys

from verl_probe import EOS, PAD, VOCAB, actor_config, block_flash_attn, critic_config, init_dist, make_qwen2
from speed_probe import PROMPT_LEN, cpu_memory_shim, verl_batch

# the overflow probe starts lower than torch's 2**16, at which the tiny Qwen2 critic's first update overflows by itself
# (the update probe shows it): so the first, clean update steps and AdamW has state to keep
OVERFLOW_INIT_SCALE = 1024.0


def make_qwen3(seed=0, num_labels=None):
    """A tiny random Qwen3 (q/k RMSNorm per head, head_dim independent of hidden/heads), as make_qwen2."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3ForTokenClassification

    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=256,
        rope_theta=10000.0,
        initializer_range=0.2,
        tie_word_embeddings=False,
        bos_token_id=1,
        eos_token_id=EOS,
        pad_token_id=PAD,
        attn_implementation="sdpa",
    )
    torch.manual_seed(seed)
    if num_labels is not None:
        config.num_labels = num_labels
        return Qwen3ForTokenClassification(config).float().eval()
    return Qwen3ForCausalLM(config).float().eval()


def _setup():
    """Import transformers' Qwen2 and Qwen3 modules before flash_attn is blocked (as speed_probe.probe_trim), then
    the CPU shims and the gloo process group."""
    make_qwen2()
    make_qwen3()
    block_flash_attn()
    cpu_memory_shim()
    init_dist()


def _model(arch, seed=0, critic=False):
    if arch == "qwen3":
        model = make_qwen3(seed=seed, num_labels=1 if critic else None)
    else:
        model = make_qwen2(seed=seed, attn="sdpa", num_labels=1 if critic else None)
    if critic:
        model.dropout.p = 0.0  # verl builds the critic with classifier_dropout = 0.0 (fsdp_workers.py:929)
    return model


def _fsdp(model, fp16):
    """FSDP1 as verl wraps a model on one GPU, on CPU; fp16: the t4/v100 profiles' mixed precision."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import MixedPrecision, ShardingStrategy

    mixed = (
        MixedPrecision(param_dtype=torch.float16, reduce_dtype=torch.float32, buffer_dtype=torch.float32)
        if fp16
        else None
    )
    return FSDP(
        model,
        device_id=torch.device("cpu"),
        sharding_strategy=ShardingStrategy.NO_SHARD,
        mixed_precision=mixed,
        use_orig_params=False,
        sync_module_states=False,
    )


def _flat(fsdp_module):
    """The FSDP flat parameters (fp32 masters) as one vector."""
    import torch

    return torch.cat([p.detach().reshape(-1).clone() for p in fsdp_module.parameters()])


ACTOR_UPDATE = dict(
    ppo_mini_batch_size=4,
    ppo_micro_batch_size_per_gpu=2,
    ppo_epochs=1,
    clip_ratio=0.2,
    clip_ratio_low=None,
    clip_ratio_high=None,
    entropy_coeff=0.0,
    loss_agg_mode="token-mean",
    policy_loss={"loss_mode": "vanilla"},
    use_kl_loss=True,
    kl_loss_type="low_var_kl",
    kl_loss_coef=0.1,
    use_dynamic_bsz=False,
    trim_padding=True,
)
CRITIC_UPDATE = dict(
    ppo_mini_batch_size=4,
    ppo_micro_batch_size_per_gpu=2,
    ppo_epochs=1,
    cliprange_value=0.5,
    loss_agg_mode="token-mean",
    use_dynamic_bsz=False,
    trim_padding=True,
)


def _inputs():
    import torch

    base = verl_batch()
    mask = base["attention_mask"][:, PROMPT_LEN:]
    g = torch.Generator().manual_seed(1)
    old_log_probs = -torch.rand(mask.shape, generator=g) * 6
    return base, {
        "old_log_probs": old_log_probs,
        "ref_log_prob": old_log_probs + 0.1 * torch.randn(mask.shape, generator=g),
        "advantages": torch.randn(mask.shape, generator=g),
        "values": torch.randn(mask.shape, generator=g),
        "returns": torch.randn(mask.shape, generator=g),
    }


def _actor(arch, fp16, scaling, grad_clip, optimizer="sgd", lr=1.0, **extra):
    import torch
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    module = _fsdp(_model(arch), fp16)
    opt = (
        torch.optim.SGD(module.parameters(), lr=lr)
        if optimizer == "sgd"
        else torch.optim.AdamW(module.parameters(), lr=lr)
    )
    cfg = dict(ACTOR_UPDATE, grad_clip=grad_clip, autocast_dtype="fp16" if fp16 else "fp32", **extra)
    if scaling is not None:
        cfg["loss_scaling"] = scaling
    return DataParallelPPOActor(actor_config(**cfg), module, opt), module, opt


def _critic(arch, fp16, scaling, grad_clip, optimizer="sgd", lr=1.0, **extra):
    import torch
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    module = _fsdp(_model(arch, critic=True), fp16)
    opt = (
        torch.optim.SGD(module.parameters(), lr=lr)
        if optimizer == "sgd"
        else torch.optim.AdamW(module.parameters(), lr=lr)
    )
    cfg = dict(CRITIC_UPDATE, grad_clip=grad_clip, autocast_dtype="fp16" if fp16 else "fp32", **extra)
    if scaling is not None:
        cfg["loss_scaling"] = scaling
    return DataParallelPPOCritic(critic_config(**cfg), module, opt), module, opt


def _actor_update(actor, base, extra):
    from verl import DataProto

    return actor.update_policy(
        DataProto.from_dict(
            tensors={
                **base,
                "old_log_probs": extra["old_log_probs"],
                "advantages": extra["advantages"],
                "ref_log_prob": extra["ref_log_prob"],
            },
            meta_info={"temperature": 0.7},
        )
    )


def _critic_update(critic, base, extra):
    from verl import DataProto

    return critic.update_critic(
        DataProto.from_dict(tensors={**base, "values": extra["values"], "returns": extra["returns"]})
    )


def _step(role, arch, fp16, scaling, grad_clip):
    """(parameter change as one vector, metrics of the update that stepped, updates skipped before it) of one update.
    With loss scaling an update whose scaled gradients overflow is skipped (weights untouched, SGD has no state) and
    repeated at the halved scale, as training would go on, at most 8 times."""
    base, extra = _inputs()
    make, update = (_actor, _actor_update) if role == "actor" else (_critic, _critic_update)
    worker, module, _ = make(arch, fp16, scaling, grad_clip)
    before = _flat(module)
    for skipped in range(8):
        metrics = update(worker, base, extra)
        if not metrics.get(f"{role}/skipped_updates"):
            break
    return _flat(module) - before, metrics, skipped


def _compare(a, b):
    return {
        "max_abs_diff": float((a - b).abs().max()),
        "max_abs": float(a.abs().max()),
        "rel_l2": float((a - b).norm() / a.norm()),
        "cosine": float((a @ b) / (a.norm() * b.norm())),
    }


def probe_update():
    import torch

    _setup()
    with torch.autocast("cpu", dtype=torch.float16):
        x = torch.randn(2, 2)
        autocast_dtype = str(torch.nn.functional.linear(x, x).dtype)
    result = {"cpu_autocast_fp16": autocast_dtype}
    on = {"enabled": True}
    for arch in ("qwen2", "qwen3"):
        for role in ("actor", "critic"):
            res = {}
            for label, clip in (("unclipped", 1.0e9), ("clipped", 0.05)):
                ref, ref_metrics, _ = _step(role, arch, False, None, clip)
                half, half_metrics, skipped = _step(role, arch, True, on, clip)
                res[label] = {
                    **_compare(ref, half),
                    "grad_norm": [ref_metrics[f"{role}/grad_norm"][0], half_metrics[f"{role}/grad_norm"][0]],
                    "loss_scale": half_metrics[f"{role}/loss_scale"],
                    "skipped_before": skipped,
                    "skipped_total": half_metrics[f"{role}/skipped_updates_total"],
                }
                if label == "clipped":
                    res[label]["step_norm"] = [float(ref.norm()), float(half.norm())]
            # the scaler alone (fp32): scaling by 2**16 and unscaling are exact, so the update is bit-identical
            scaled, _, _ = _step(role, arch, False, on, 0.05)
            ref, _, _ = _step(role, arch, False, None, 0.05)
            res["fp32_scaler_bit_identical"] = bool(torch.equal(scaled, ref))
            result[f"{arch}_{role}"] = res
    # key absent: stock verl (no scaler, scale() returns the very loss object)
    actor, _, _ = _actor("qwen2", False, None, 1.0)
    critic, _, _ = _critic("qwen2", False, None, 1.0)
    loss = torch.tensor(1.5)
    result["absent"] = {
        "actor": actor.loss_scaler.enabled,
        "critic": critic.loss_scaler.enabled,
        "scaler": actor.loss_scaler.scaler is None,
        "same_loss_object": actor.loss_scaler.scale(loss) is loss,
    }
    metrics = _actor_update(actor, *_inputs())
    result["absent"]["metric_keys"] = sorted(k for k in metrics if "scale" in k or "skipped" in k)
    return result


def _inject(module, value, calls):
    """A backward hook on the first decoder layer's output that writes ``value`` into one gradient element, on
    the micro-batches whose index is in ``calls`` (counted per backward)."""
    import torch

    layer = next(m for m in module.modules() if type(m).__name__.endswith("DecoderLayer"))
    seen = {"n": 0}

    def forward_hook(mod, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        if torch.is_grad_enabled() and hidden.requires_grad:
            index = seen["n"]
            seen["n"] += 1

            def grad_hook(grad):
                if index in calls:
                    grad = grad.clone()
                    grad.view(-1)[0] = value
                return grad

            hidden.register_hook(grad_hook)
        return output

    layer.register_forward_hook(forward_hook)
    return seen


def _optimizer_state(opt):
    import torch

    out = []
    for state in opt.state.values():
        for key in sorted(state):
            out.append(state[key].detach().clone() if torch.is_tensor(state[key]) else state[key])
    return out


def _same_state(a, b):
    import torch

    return len(a) == len(b) and all(torch.equal(x, y) if torch.is_tensor(x) else x == y for x, y in zip(a, b))


def probe_overflow():
    import torch

    _setup()
    result = {}
    base, extra = _inputs()
    for role in ("actor", "critic"):
        make, update = (_actor, _actor_update) if role == "actor" else (_critic, _critic_update)
        for value in ("inf", "nan"):
            worker, module, opt = make(
                "qwen2",
                True,
                {"enabled": True, "init_scale": OVERFLOW_INIT_SCALE, "max_consecutive_skips": 3},
                1.0,
                optimizer="adamw",
                lr=1e-3,
            )
            # micro-batches are counted per forward with gradients: 2 a clean update (then AdamW has state), 2 poisoned
            # (one of them overflows), 2 clean again
            _inject(module, float(value), calls={2})
            first = update(worker, base, extra)
            weights, state = _flat(module), _optimizer_state(opt)
            skipped = update(worker, base, extra)
            res = {
                "first": {
                    k: first[k]
                    for k in (f"{role}/loss_scale", f"{role}/skipped_updates", f"{role}/skipped_updates_total")
                },
                "skipped": {
                    k: skipped[k]
                    for k in (f"{role}/loss_scale", f"{role}/skipped_updates", f"{role}/skipped_updates_total")
                },
                "skipped_grad_norm": repr(
                    float(
                        skipped[f"{role}/grad_norm"]
                        if not isinstance(skipped[f"{role}/grad_norm"], list)
                        else skipped[f"{role}/grad_norm"][0]
                    )
                ),
                "weights_bit_identical": bool(torch.equal(weights, _flat(module))),
                "optimizer_state_bit_identical": _same_state(state, _optimizer_state(opt)),
                "adam_steps": [float(s["step"]) for s in opt.state.values()][:1],
            }
            after = update(worker, base, extra)
            res["next"] = {
                k: after[k] for k in (f"{role}/loss_scale", f"{role}/skipped_updates", f"{role}/skipped_updates_total")
            }
            res["next_moved"] = not bool(torch.equal(weights, _flat(module)))
            result[f"{role}_{value}"] = res
        # every update overflows: the third in a row stops the run
        worker, module, opt = make(
            "qwen2",
            True,
            {"enabled": True, "init_scale": OVERFLOW_INIT_SCALE, "max_consecutive_skips": 3},
            1.0,
            optimizer="adamw",
            lr=1e-3,
        )
        _inject(module, float("inf"), calls=set(range(100)))
        seen = []
        try:
            for _ in range(5):
                seen.append(update(worker, base, extra)[f"{role}/loss_scale"])
            result[f"{role}_stop"] = {"raised": None, "scales": seen}
        except RuntimeError as exc:
            result[f"{role}_stop"] = {
                "raised": str(exc),
                "scales": seen,
                "weights_untouched": bool(torch.equal(_flat(module), _flat(make("qwen2", True, None, 1.0)[1]))),
            }
    return result


def probe_stock():
    """On a tree without patch 0024: an fp16 actor whose every update overflows, five updates."""
    import torch

    _setup()
    base, extra = _inputs()
    worker, module, _ = _actor("qwen2", True, None, 1.0, optimizer="adamw", lr=1e-3)
    _inject(module, float("inf"), calls=set(range(100)))
    keys = set()
    for _ in range(5):
        keys |= {k for k in _actor_update(worker, base, extra) if "scale" in k or "skipped" in k}
    return {
        "has_loss_scaler": hasattr(worker, "loss_scaler"),
        "updates": 5,
        "metric_keys": sorted(keys),
        "weights_untouched": bool(torch.equal(_flat(module), _flat(_actor("qwen2", True, None, 1.0)[1]))),
    }


def probe_logprob():
    import torch
    from verl_probe import cpu_empty_cache_shim, rollout_config
    from speed_probe import rollout_batch
    from verl import DataProto
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.rollout.hf_rollout import HFRollout

    _setup()
    cpu_empty_cache_shim()
    result = {}
    steps = 24
    model = make_qwen2(seed=0, attn="sdpa")
    ids, mask, pos = rollout_batch()
    for label, static in (("generate", False), ("static_decode", True)):
        # the rollout's own distribution: generate's raw logits under fp16 autocast, captured by a forward hook on
        # lm_head (prefill's last column, then one per decode step), temperature 1, no top-k/top-p
        captured = []
        hook = model.lm_head.register_forward_hook(lambda mod, args, out: captured.append(out[:, -1].detach().float()))
        torch.manual_seed(11)
        from verl_probe import data_proto

        out = HFRollout(
            model,
            rollout_config(
                do_sample=True,
                response_length=steps,
                micro_batch_size=3,
                dtype="float16",
                cuda_graph=static,
                trim_padding=True,
            ),
        ).generate_sequences(data_proto(ids, mask, pos, do_sample=True))
        hook.remove()
        responses = out.batch["responses"]
        logits = torch.stack(captured[:steps], dim=1)  # (batch, steps, vocab)
        rollout_logp = torch.log_softmax(logits, -1).gather(-1, responses[..., None]).squeeze(-1)
        actor = DataParallelPPOActor(actor_config(autocast_dtype="fp32"), model)
        batch = {k: out.batch[k] for k in ("input_ids", "attention_mask", "position_ids", "responses")}
        fp32_logp, _ = actor.compute_log_prob(
            DataProto.from_dict(
                tensors=batch, meta_info={"micro_batch_size": 3, "temperature": 1.0, "use_dynamic_bsz": False}
            )
        )
        valid = out.batch["attention_mask"][:, -steps:].bool()
        diff = (rollout_logp - fp32_logp).abs()[valid]
        result[label] = {
            "tokens": int(valid.sum()),
            "max_abs_diff": float(diff.max()),
            "mean_abs_diff": float(diff.mean()),
            "mean_logp": float(fp32_logp[valid].mean()),
            "finite": bool(torch.isfinite(rollout_logp[valid]).all()),
        }
    return result


PROBES = {"update": probe_update, "overflow": probe_overflow, "stock": probe_stock, "logprob": probe_logprob}


def main(argv):
    import verl

    result = PROBES[argv[1]](*argv[2:])
    result["verl_file"] = verl.__file__
    print("PROBE_RESULT " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv)
