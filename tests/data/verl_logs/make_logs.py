"""Regenerate the constructed verl 0.4.1 logs in this folder (not run by the tests).

These logs were NOT recorded from a training run. They are constructed from verl 0.4.1's source so that
their format is exact: step lines come from verl's own formatter (``verl.utils.logger.aggregate_logger.
concat_dict_to_str``, 3 decimals), validation dumps from ``pprint`` as ``ray_trainer.py:933/1192`` call it
(with numpy 2 reprs), metric names and their order from ``RayPPOTrainer.fit`` and the FSDP workers, Ray's
``(TaskRunner pid=N)`` / ``(WorkerDict pid=N)`` prefixes. The numbers are plausible (the P40 and A10 scale of
the project's earlier device measurements (docs/benchmarks.md)), not measured. Needs the test venv (verl 0.4.1 and torch
importable).

    $ .venv/bin/python tests/data/verl_logs/make_logs.py
"""

from pathlib import Path
from pprint import pformat

import numpy as np
from verl.utils.logger.aggregate_logger import concat_dict_to_str

HERE = Path(__file__).parent
TR = "(TaskRunner pid=2841) "
WD = "(WorkerDict pid=3102) "


def lines_of(prefix, text):
    return [prefix + line for line in text.splitlines()]


def val_dump(kind, metrics, prefix):
    return lines_of(prefix, pformat(f"{kind} validation metrics: {metrics}"))


def ppo_step(step, epoch, val=None, save=False):
    """Metrics dict of one PPO step (critic, no KL), keys in the order RayPPOTrainer.fit inserts them."""
    s = step
    resp = 186.25 + 7.5 * s
    prompt = 118.4375
    n = 16
    tokens = int(round((resp + prompt) * n))
    gen, rew, olp, vals, adv, upc, upa = 21.734 - 0.41 * s, 0.0871, 3.1825, 2.9481, 0.0419, 7.8213, 8.3377 + 0.05 * s
    testing = 64.1187 if val is not None else None
    ckpt = 18.6042 if save else None
    step_t = gen + rew + olp + vals + adv + upc + upa + (testing or 0) + (ckpt or 0) + 0.2314
    score = [0.0625, 0.125, 0.1875, 0.25][(s - 1) % 4]
    m = {}
    m.update(
        {
            "global_seqlen/min": tokens,
            "global_seqlen/max": tokens,
            "global_seqlen/minmax_diff": 0,
            "global_seqlen/balanced_min": tokens,
            "global_seqlen/balanced_max": tokens,
            "global_seqlen/mean": float(tokens),
        }
    )
    m["actor/entropy"] = 0.5873120427131653 - 0.0121 * s
    m.update(
        {
            "critic/vf_loss": 0.08231 / s,
            "critic/vf_clipfrac": 0.0,
            "critic/vpred_mean": -0.01572 * s,
            "critic/grad_norm": 3.4471 / s,
            "perf/mfu/critic": 0.018834,
            "critic/lr": 1e-05,
        }
    )
    m.update(
        {
            "actor/pg_loss": 0.0123456 * (-1) ** s,
            "actor/pg_clipfrac": 0.00227 * s,
            "actor/ppo_kl": 4.113e-05 * s,
            "actor/pg_clipfrac_lower": 0.0,
            "actor/grad_norm": 0.9173 + 0.1 * s,
            "perf/mfu/actor": 0.021571,
            "perf/max_memory_allocated_gb": 12.962138175964355 + (0.04 if s > 1 else 0.0),
            "perf/max_memory_reserved_gb": 22.4296875,
            "perf/cpu_memory_used_gb": 41.83447265625,
            "actor/lr": 1e-06,
        }
    )
    if val is not None:
        m.update(val)
    m.update({"training/global_step": s, "training/epoch": epoch})
    m.update(
        {
            "critic/score/mean": score,
            "critic/score/max": 1.0,
            "critic/score/min": 0.0,
            "critic/rewards/mean": score,
            "critic/rewards/max": 1.0,
            "critic/rewards/min": 0.0,
            "critic/advantages/mean": 1.862645149230957e-09,
            "critic/advantages/max": 3.0618,
            "critic/advantages/min": -2.1044,
            "critic/returns/mean": score * 0.97,
            "critic/returns/max": 1.0,
            "critic/returns/min": 0.0,
            "critic/values/mean": -0.0153 * s,
            "critic/values/max": 0.2711,
            "critic/values/min": -0.3316,
            "critic/vf_explained_var": -0.4413 + 0.12 * s,
            "response_length/mean": resp,
            "response_length/max": 256.0,
            "response_length/min": 97.0,
            "response_length/clip_ratio": 0.125,
            "prompt_length/mean": prompt,
            "prompt_length/max": 201.0,
            "prompt_length/min": 78.0,
            "prompt_length/clip_ratio": 0.0,
        }
    )
    timing = {
        "generate_sequences": gen - 0.9124,
        "gen": gen,
        "reward": rew,
        "old_log_prob": olp,
        "values": vals,
        "adv": adv,
        "update_critic": upc,
        "update_actor": upa,
    }
    if testing is not None:
        timing["testing"] = testing
    if ckpt is not None:
        timing["save_checkpoint"] = ckpt
    timing["step"] = step_t
    m.update({f"timing_s/{k}": v for k, v in timing.items()})
    resp_tokens, all_tokens = resp * n, tokens
    for k in ["update_actor", "gen", "values", "adv", "update_critic"]:
        m[f"timing_per_token_ms/{k}"] = timing[k] * 1000 / (resp_tokens if k == "gen" else all_tokens)
    m.update({"perf/total_num_tokens": tokens, "perf/time_per_step": step_t, "perf/throughput": tokens / step_t})
    return m


def ppo_finished():
    val0 = {"val-core/openai/gsm8k/reward/mean@1": np.float64(0.004548900682335102)}
    val2 = {"val-core/openai/gsm8k/reward/mean@1": np.float64(0.06595905989385899)}
    val4 = {"val-core/openai/gsm8k/reward/mean@1": np.float64(0.10538286580742987)}
    out = [
        (
            "2025-07-08 10:00:01,123\tINFO worker.py:1888 -- Started a local Ray instance. View the dashboard at"
            " \x1b[1m\x1b[32m127.0.0.1:8265 \x1b[39m\x1b[22m"
        ),
        TR + "TaskRunner hostname: 6f3c2a1b9d0e, PID: 2841",
        *lines_of(
            TR,
            pformat(
                {
                    "actor_rollout_ref": {
                        "actor": {"ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 4, "use_kl_loss": False},
                        "rollout": {"name": "hf", "n": 1, "dtype": "float32"},
                    },
                    "trainer": {
                        "logger": ["console"],
                        "total_training_steps": 4,
                        "test_freq": 2,
                        "save_freq": 4,
                        "project_name": "verlfit",
                        "experiment_name": "ppo-p40",
                    },
                },
                width=80,
            ),
        ),
        TR + "Using dataset class: RLHFDataset",
        TR + "dataset len: 7473",
        TR + "dataset len: 1319",
        TR + "Size of train dataloader: 467, Size of val dataloader: 1",
        TR + "Total training steps: 4",
        WD + "Model config after override: Qwen2Config {",
        WD + '  "architectures": [',
        WD + '    "Qwen2ForCausalLM"',
        WD + "  ],",
        WD + "}",
        WD + "Qwen2ForCausalLM contains 494.03M parameters",
        WD + "/usr/local/lib/python3.10/dist-packages/torch/distributed/fsdp/_init_utils.py:444: UserWarning: FSDP is"
        " switching to use `NO_SHARD` instead of ShardingStrategy.FULL_SHARD since the world size is 1.",
        WD + "  warnings.warn(",
        WD + "Total steps: 4, num_warmup_steps: 0",
        WD + "Actor use_remove_padding=False",
        TR + "Training from scratch",
        TR + "test_gen_batch meta info: {'eos_token_id': 151645, 'pad_token_id': 151643, 'recompute_log_prob': False,"
        " 'do_sample': False, 'validate': True}",
        TR + "validation generation end",
        TR + "[prompt] system",
        TR + "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
        TR + "user",
        TR + "Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her"
        " friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck"
        " egg. How much in dollars does she make every day at the farmers' market? Let's think step by step and"
        ' output the final answer after "####".',
        TR + "assistant",
        TR + "[response] Let's break it down.",
        TR + "step:1 - eggs laid: 16",
        TR + "step:2 - eggs left: 16 - 3 - 4 = 9",
        TR + "So she makes 9 * 2 = 18 dollars. #### 18",
        TR + "[ground_truth] 18",
        TR + "[score] 1.0",
        TR + "len reward_extra_infos_dict['reward']: 1319",
        *val_dump("Initial", val0, TR),
        TR + concat_dict_to_str(val0, step=0),
    ]
    vals = {2: val2, 4: val4}
    for step in range(1, 5):
        if step in vals:
            out += [
                TR + "test_gen_batch meta info: {'eos_token_id': 151645, 'pad_token_id': 151643, 'recompute_log_prob':"
                " False, 'do_sample': False, 'validate': True}",
                TR + "validation generation end",
                TR + "len reward_extra_infos_dict['reward']: 1319",
            ]
        if step == 4:
            out += [
                TR + "local_global_step_folder: checkpoints/verlfit/ppo-p40/global_step_4",
                WD + "[rank-0]: Saving model to"
                " /runs/ppo-p40/checkpoints/global_step_4/actor/model_world_size_1_rank_0.pt",
                WD + "[rank-0]: Saving checkpoint to"
                " /runs/ppo-p40/checkpoints/global_step_4/actor/model_world_size_1_rank_0.pt",
                WD + "[rank-0]: Saving extra_state to"
                " /runs/ppo-p40/checkpoints/global_step_4/actor/extra_state_world_size_1_rank_0.pt",
            ]
        out.append(TR + concat_dict_to_str(ppo_step(step, 0, val=vals.get(step), save=step == 4), step=step))
    out += val_dump("Final", val4, TR)
    out.append(
        "(TaskRunner pid=2841) \rTraining Progress:   0%|          | 0/4 [00:00<?, ?it/s]\rTraining Progress:  25%|██▌ "
        "      | 1/4 [00:44<02:13, 44.40s/it]\rTraining Progress:  50%|█████     | 2/4 [02:31<02:39,"
        " 79.85s/it]\rTraining Progress:  75%|███████▌  | 3/4 [03:14<01:01, 61.43s/it]\rTraining Progress:"
        " 100%|██████████| 4/4 [04:54<00:00, 73.62s/it]"
    )
    return out


def grpo_step(step):
    """One GRPO step on an A10 (vLLM rollout, KL loss with a reference model, no critic)."""
    s = step
    n_seq = 64
    resp, prompt = 201.359375 + 3.1 * s, 117.71875
    tokens = int(round((resp + prompt) * n_seq))
    t = {
        "generate_sequences": 6.2187 + 0.1 * s,
        "reshard": 0.8834,
        "gen": 7.3307 + 0.1 * s,
        "reward": 0.2413,
        "old_log_prob": 1.9127,
        "ref": 1.7702,
        "adv": 0.0611,
        "update_actor": 6.0134 + 0.02 * s,
    }
    t["step"] = sum(v for k, v in t.items() if k not in ("generate_sequences", "reshard")) + 0.1172
    score = [0.203125, 0.234375, 0.265625, 0.28125][(s - 1) % 4]
    m = {
        "global_seqlen/min": tokens,
        "global_seqlen/max": tokens,
        "global_seqlen/minmax_diff": 0,
        "global_seqlen/balanced_min": tokens,
        "global_seqlen/balanced_max": tokens,
        "global_seqlen/mean": float(tokens),
        "actor/entropy": 0.41875 - 0.0093 * s,
        "actor/kl_loss": 0.00118 * s,
        "actor/kl_coef": 0.001,
        "actor/pg_loss": -0.00421 * s,
        "actor/pg_clipfrac": 0.00131,
        "actor/ppo_kl": -2.2e-05,
        "actor/pg_clipfrac_lower": 0.0,
        "actor/grad_norm": 0.3318,
        "perf/mfu/actor": 0.1032,
        "perf/max_memory_allocated_gb": 18.7417 + 0.01 * s,
        "perf/max_memory_reserved_gb": 20.5625,
        "perf/cpu_memory_used_gb": 23.114,
        "actor/lr": 1e-06,
        "training/global_step": s,
        "training/epoch": 0,
        "critic/score/mean": score,
        "critic/score/max": 1.0,
        "critic/score/min": 0.0,
        "critic/rewards/mean": score,
        "critic/rewards/max": 1.0,
        "critic/rewards/min": 0.0,
        "critic/advantages/mean": -0.0143,
        "critic/advantages/max": 1.7889,
        "critic/advantages/min": -1.7889,
        "critic/returns/mean": -0.0143,
        "critic/returns/max": 1.7889,
        "critic/returns/min": -1.7889,
        "response_length/mean": resp,
        "response_length/max": 512.0,
        "response_length/min": 61.0,
        "response_length/clip_ratio": 0.015625,
        "prompt_length/mean": prompt,
        "prompt_length/max": 190.0,
        "prompt_length/min": 79.0,
        "prompt_length/clip_ratio": 0.0,
    }
    m.update({f"timing_s/{k}": v for k, v in t.items()})
    for k in ["gen", "ref", "update_actor", "adv"]:
        m[f"timing_per_token_ms/{k}"] = t[k] * 1000 / (resp * n_seq if k == "gen" else tokens)
    m.update({"perf/total_num_tokens": tokens, "perf/time_per_step": t["step"], "perf/throughput": tokens / t["step"]})
    return m


def coloured(pid, name="TaskRunner"):
    return f"\x1b[36m({name} pid={pid})\x1b[0m "


def grpo_interrupted():
    tr, wd = coloured(5120), coloured(5377, "WorkerDict")
    val0 = {"val-core/openai/gsm8k/reward/mean@1": np.float64(0.2850644427596664)}
    out = [
        tr + "TaskRunner hostname: a10-box, PID: 5120",
        tr + "Total training steps: 10",
        wd + "INFO 07-08 11:00:52 [config.py:717] This model supports multiple tasks: {'generate', 'reward', 'embed',"
        " 'score', 'classify'}. Defaulting to 'generate'.",
        wd
        + "WARNING 07-08 11:00:58 [utils.py:2273] Methods determine_num_available_blocks,device_config not implemented"
        " in <vllm.v1.worker.gpu_worker.Worker object at 0x7f1b2c0d5e10>",
        tr + "Training from scratch",
        *val_dump("Initial", val0, tr),
        tr + concat_dict_to_str(val0, step=0),
    ]
    for step in range(1, 4):
        out.append(
            wd + "INFO 07-08 11:0%d:%02d [executor_base.py:210] It took 0.412 seconds to wake up tags ['weights',"
            " 'kv_cache']." % (1 + step // 2, 10 * step)
        )
        out.append(tr + concat_dict_to_str(grpo_step(step), step=step))
    out.append(
        wd + "INFO 07-08 11:02:31 [executor_base.py:210] It took 0.409 seconds to wake up tags ['weights', 'kv_cache']."
    )
    out.append(wd + "INFO 07-08 11:02:38 [block_pool.py:264] Successfully reset prefix cache")
    return out, wd + "INFO 07-08 11:02:39 [executor_base.py:204] It took 0.2"


def partial_step():
    """Two PPO steps, then the third step's line cut mid-value (the file ends without a newline)."""
    out = [TR + "Total training steps: 6"]
    for step in (1, 2):
        out.append(TR + concat_dict_to_str(ppo_step(step, 0), step=step))
    third = TR + concat_dict_to_str(ppo_step(3, 0), step=3)
    return out, third[: third.index("timing_s/update_actor:") + len("timing_s/update_actor:") + 2]


def ppo_resumed():
    """A PPO run of 6 steps saving every 2, in two sessions: the first killed (SIGKILL, nothing printed) during step 6
    after its checkpoint of step 4; the second resumed from that checkpoint, so it trains step 5 again."""
    val = lambda x: {"val-core/openai/gsm8k/reward/mean@1": np.float64(x)}  # noqa: E731
    gen = (
        TR + "test_gen_batch meta info: {'eos_token_id': 151645, 'pad_token_id': 151643, 'recompute_log_prob': False,"
        " 'do_sample': False, 'validate': True}"
    )
    folder = "/runs/ppo-p40/checkpoints/global_step_{}"
    first = [
        TR + "Total training steps: 6",
        TR + "Training from scratch",
        gen,
        TR + "validation generation end",
        *val_dump("Initial", val(0.004548900682335102), TR),
        TR + concat_dict_to_str(val(0.004548900682335102), step=0),
    ]
    for step in range(1, 6):
        if step % 2 == 0:
            first.append(TR + f"local_global_step_folder: {folder.format(step)}")
        first.append(TR + concat_dict_to_str(ppo_step(step, 0, save=step % 2 == 0), step=step))
    second = [
        TR + "Total training steps: 6",
        TR + f"Load from checkpoint folder: {folder.format(4)}",
        TR + "Setting global step to 4",
        TR + f"Resuming from {folder.format(4)}",
        gen,
        TR + "validation generation end",
        *val_dump("Initial", val(0.0712), TR),
        TR + concat_dict_to_str(val(0.0712), step=4),
    ]
    for step in (5, 6):
        if step == 6:
            second += [gen, TR + "validation generation end", TR + f"local_global_step_folder: {folder.format(6)}"]
        metrics = ppo_step(
            step + 10, 0, val=val(0.0913) if step == 6 else None, save=step == 6
        )  # other values than the first session's
        metrics["training/global_step"] = step
        second.append(TR + concat_dict_to_str(metrics, step=step))
    second += val_dump("Final", val(0.0913), TR)
    return first, second


def write(name, lines, tail=""):
    text = "\n".join(lines) + "\n" + tail
    (HERE / name).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    write("ppo_p40_finished.log", ppo_finished())
    write("grpo_a10_interrupted.log", *grpo_interrupted())
    write("ppo_partial_step_line.log", *partial_step())
    first, second = ppo_resumed()
    write("ppo_resumed_first_session.log", first)
    write("ppo_resumed_second_session.log", second)
