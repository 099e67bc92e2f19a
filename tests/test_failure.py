"""verlfit.failure: a failed run's log read into what failed, where, and how big a checkpoint is."""

from pathlib import Path

from fakes import DIED_LOG, DISK_LOG, OOM_LOG
from verlfit.failure import diagnose, disk_full_seen_by_verlfit, explain
from verlfit.plan.time import checkpoint_disk_bytes
from verlfit.model_shape import load_model_shape
from verlfit.plan.memory import GIB, PlanRequest


def test_out_of_memory_names_the_phase_method_and_torch_figures():
    failure = diagnose(OOM_LOG)
    assert failure.kind == "out_of_memory"
    assert failure.phase == "actor_update"
    assert failure.worker_method == "actor_rollout_update_actor"
    assert failure.role == "actor_rollout"
    assert failure.facts == {"tried": "2.32 GiB", "capacity": "22.50 GiB", "free": "1.05 GiB"}
    assert failure.detail.startswith("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.32 GiB")


def test_full_disk_during_a_checkpoint_save():
    failure = diagnose(DISK_LOG)
    assert (failure.kind, failure.phase, failure.role) == ("disk_full", "checkpoint", "actor_rollout")
    assert failure.detail == "OSError: [Errno 28] No space left on device"


def test_dead_worker_names_the_method_ray_printed_after_the_error():
    failure = diagnose(DIED_LOG)
    assert (failure.kind, failure.phase, failure.role) == ("worker_died", "values", "critic")


KILLED_LOG = (Path(__file__).parent / "data" / "verl_logs" / "ray_worker_killed_h200.log").read_text().splitlines()


def test_a_killed_worker_is_placed_by_the_trainers_call_when_ray_names_only_the_class():
    # recorded on the H200: Ray's ActorDiedError names the WorkerDict class, the driver's traceback the call
    failure = diagnose(KILLED_LOG)
    assert (failure.kind, failure.phase, failure.worker_method, failure.role) == (
        "worker_died",
        "rollout",
        "actor_rollout_generate_sequences",
        "actor_rollout",
    )
    assert (
        failure.detail == "ray.exceptions.RayTaskError(ActorDiedError): ray::TaskRunner.run() (pid=15857, ip=192.0.2.2,"
        " actor_id=adee72229480e4faa05254e001000000, repr=<main_ppo.TaskRunner object at 0x7f21e7f08b30>)"
    )
    message, fix = explain(failure, run_dir="$RUNS/fault-worker", checkpoint_step=5)
    assert (
        message == "a verl worker process died during the rollout (HF generate), in the actor/rollout worker (verl's"
        " actor_rollout_generate_sequences): killed by a signal, or by the kernel's out-of-memory killer (host RAM:"
        " see `dmesg | grep -i 'killed process'`)"
    )
    assert fix == "verlfit train --resume $RUNS/fault-worker continues from step 5"


def test_each_worker_group_of_the_trainer_names_its_role():
    calls = {
        "self.critic_wg.update_critic(batch)": ("critic_update_critic", "critic_update", "critic"),
        "self.ref_policy_wg.compute_ref_log_prob(batch)": ("ref_compute_ref_log_prob", "ref_log_prob", "ref"),
        "self.actor_rollout_wg.save_checkpoint(actor_local_path, actor_remote_path, self.global_steps)": (
            "actor_rollout_save_checkpoint",
            "checkpoint",
            "actor_rollout",
        ),
    }
    for call, expected in calls.items():
        failure = diagnose(
            [f"    {call}", "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
        )
        assert (failure.worker_method, failure.phase, failure.role) == expected


def test_rays_task_name_wins_over_the_trainers_call():
    failure = diagnose(["    actor_output = self.actor_rollout_wg.update_actor(batch)", *DIED_LOG])
    assert failure.worker_method == "critic_compute_values"


def test_verlfits_own_full_disk_takes_the_phase_of_the_last_method_named():
    failure = disk_full_seen_by_verlfit(
        DISK_LOG[:2], "verlfit could not write to /r: [Errno 28] No space left on device"
    )
    assert (failure.kind, failure.phase, failure.worker_method) == (
        "disk_full",
        "checkpoint",
        "actor_rollout_save_checkpoint",
    )
    assert disk_full_seen_by_verlfit(["step:1"], "x").phase is None


def test_an_oom_outranks_the_dead_actors_ray_reports_after_it():
    failure = diagnose(DIED_LOG[:1] + OOM_LOG + DIED_LOG[1:])
    assert failure.kind == "out_of_memory"
    assert failure.phase == "actor_update"


def test_a_log_with_no_known_failure_is_not_diagnosed():
    assert diagnose(["(TaskRunner pid=1) step:1 - actor/pg_loss:0.1", "KeyError: 'foo'"]) is None


def test_checkpoint_bytes_of_the_qwen25_half_billion_shape():
    shape = load_model_shape()
    ppo = PlanRequest(shape=shape, gpu_memory_bytes=22 * GIB, algorithm="ppo")
    grpo = PlanRequest(shape=shape, gpu_memory_bytes=22 * GIB, algorithm="grpo")
    role = 32 * 1024**2
    # 4 bytes of fp32 weights + 8 bytes of AdamW state per parameter, plus the huggingface/ files
    assert checkpoint_disk_bytes(grpo) == 494_032_768 * 12 + role
    assert checkpoint_disk_bytes(ppo) == 494_032_768 * 12 + role + 494_033_665 * 12 + role
    assert round(checkpoint_disk_bytes(ppo) / GIB, 1) == 11.1


# LoRA rank 32, all-linear (verl's default targets), counted by hand from the Qwen2.5 configs (q, k, v, o, gate, up,
# down: rank * (in + out) each, per decoder layer; the critic adds its trained value head copy, hidden + 1)
ADAPTER_1P5B = 32 * 28 * ((1536 + 1536) + 2 * (1536 + 256) + (1536 + 1536) + 2 * (1536 + 8960) + (8960 + 1536))
ADAPTER_3B = 32 * 36 * ((2048 + 2048) + 2 * (2048 + 256) + (2048 + 2048) + 2 * (2048 + 11008) + (11008 + 2048))


def test_checkpoint_bytes_of_a_lora_run_count_the_frozen_base_and_the_adapters_only_in_adam():
    role = 32 * 1024**2
    ppo = PlanRequest(
        shape=load_model_shape("Qwen/Qwen2.5-1.5B-Instruct"), gpu_memory_bytes=22 * GIB, algorithm="ppo", lora_rank=32
    )
    assert ADAPTER_1P5B == 36_929_536
    actor = 4 * (1_543_714_304 + ADAPTER_1P5B) + 8 * ADAPTER_1P5B + role
    critic = 4 * (1_543_715_841 + ADAPTER_1P5B + 1537) + 8 * (ADAPTER_1P5B + 1537) + role
    adapter_file = 4 * ADAPTER_1P5B  # lora_adapter/adapter_model.safetensors, the actor's only
    assert checkpoint_disk_bytes(ppo) == actor + critic + adapter_file == 13_450_874_896
    assert round(checkpoint_disk_bytes(ppo) / GIB, 1) == 12.5  # the device record: "~12 GiB a checkpoint"

    grpo = PlanRequest(
        shape=load_model_shape("Qwen/Qwen2.5-3B-Instruct"), gpu_memory_bytes=22 * GIB, algorithm="grpo", lora_rank=32
    )
    assert (
        checkpoint_disk_bytes(grpo)
        == 4 * (3_085_938_688 + ADAPTER_3B) + 8 * ADAPTER_3B + role + 4 * ADAPTER_3B
        == 13_335_183_360
    )


def test_checkpoint_bytes_of_a_fully_trained_run_are_unchanged_beside_lora():
    shape = load_model_shape("Qwen/Qwen2.5-1.5B-Instruct")
    full = PlanRequest(shape=shape, gpu_memory_bytes=22 * GIB, algorithm="ppo")
    assert checkpoint_disk_bytes(full) == 1_543_714_304 * 12 + 1_543_715_841 * 12 + 2 * 32 * 1024**2 == 37_116_270_604
    # a LoRA actor beside a fully trained critic (--critic-lora-rank 0): the critic keeps 12 bytes a parameter
    mixed = PlanRequest(shape=shape, gpu_memory_bytes=22 * GIB, algorithm="ppo", lora_rank=32, critic_lora_rank=0)
    assert (
        checkpoint_disk_bytes(mixed)
        == 4 * (1_543_714_304 + ADAPTER_1P5B)
        + 8 * ADAPTER_1P5B
        + 1_543_715_841 * 12
        + 2 * 32 * 1024**2
        + 4 * ADAPTER_1P5B
    )


ADAPTER_7B = 32 * 28 * ((3584 + 3584) + 2 * (3584 + 512) + (3584 + 3584) + 2 * (3584 + 18944) + (18944 + 3584))


def test_checkpoint_bytes_count_the_frozen_base_as_stored():
    """Patch 0026 keeps a LoRA base in 16 bits and 0028 in NF4, and FSDP's state dict saves it so (measured on the
    tiny model: tests/patches/test_frozen_base.py, test_frozen_base_nf4.py): 2 bytes a frozen parameter, or the
    NF4 base's bytes as the planner counts it (verlfit.plan.memory.frozen_base_bytes), not stock verl's 4."""
    role = 32 * 1024**2
    ppo = PlanRequest(
        shape=load_model_shape("Qwen/Qwen2.5-1.5B-Instruct"),
        gpu_memory_bytes=22 * GIB,
        algorithm="ppo",
        lora_rank=32,
        frozen_base_dtype="bfloat16",
    )
    actor = 2 * 1_543_714_304 + 12 * ADAPTER_1P5B + role
    critic = 2 * 1_543_715_841 + 12 * (ADAPTER_1P5B + 1537) + role
    assert checkpoint_disk_bytes(ppo) == actor + critic + 4 * ADAPTER_1P5B == 7_276_014_606
    assert round(checkpoint_disk_bytes(ppo) / GIB, 1) == 6.8  # stock verl's fp32 base: 12.5 (above)

    assert ADAPTER_7B == 80_740_352
    nf4 = PlanRequest(
        shape=load_model_shape("Qwen/Qwen2.5-7B-Instruct"),
        gpu_memory_bytes=22 * GIB,
        dtype="bfloat16",
        algorithm="grpo",
        lora_rank=32,
        frozen_base_dtype="nf4",
    )
    # the base: 5,546,851,072 bytes (frozen_base_bytes' docstring: the a10 profile's 7B actor), then the adapters
    # (fp32 weights and AdamW states) and the adapter file
    assert checkpoint_disk_bytes(nf4) == 5_546_851_072 + 12 * ADAPTER_7B + role + 4 * ADAPTER_7B == 6_872_251_136
    assert round(checkpoint_disk_bytes(nf4) / GIB, 1) == 6.4  # stock: 29.6


def test_an_oom_under_a_per_process_limit_names_the_limit_not_the_cards_free_memory():
    # the device's fault_oom, recorded in
    # benchmarks/results/2026-12-01-h200-p40-lora-graph-memory-faults/graph-memory-lora-fault-oom/fault-oom.console.gz:
    # an H200 capped at 22.5 GiB as a P40; the message quoted "91.22 GiB of 139.80 GiB free", which is not what ran out
    lines = [
        "(WorkerDict pid=4972) Traceback (most recent call last):",
        "ray::WorkerDict.actor_rollout_compute_log_prob() (pid=4972)",
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9.27 GiB. GPU 0 has a total capacity of"
            " 139.80 GiB of which 91.22 GiB is free. Including non-PyTorch memory, this process has 22.66 GiB memory in"
            " use. 22.50 GiB allowed; Of the allocated memory 21.39 GiB is allocated by PyTorch, and 58.39 MiB is"
            " reserved by PyTorch but unallocated."
        ),
    ]
    failure = diagnose(lines)
    assert failure.facts == {
        "tried": "9.27 GiB",
        "capacity": "139.80 GiB",
        "free": "91.22 GiB",
        "allowed": "22.50 GiB",
        "allocated": "21.39 GiB",
    }
    message, _ = explain(failure, None, "/runs/r")
    assert (
        message
        == "verl ran out of GPU memory in the old log-prob pass (verl's actor_rollout_compute_log_prob): torch asked"
        " for 9.27 GiB with 21.39 GiB of the 22.50 GiB allowed to this process already allocated (the card itself"
        " had 91.22 GiB of 139.80 GiB free)"
    )


def test_fp16_loss_scalings_stop_is_named_with_its_figures_and_the_fix():
    # patch 0024's RuntimeError as Ray relays it from the critic worker (verl/utils/loss_scaling.py's exact text)
    lines = [
        "(WorkerDict pid=4242) WARN: critic update skipped: inf/nan gradients at loss scale 2; scale now 1",
        "ray.exceptions.RayTaskError(RuntimeError): ray::WorkerDict.critic_update_critic() (pid=4242, ip=10.0.0.1)",
        (
            "RuntimeError: verlfit loss scaling: the last 20 critic updates all overflowed in fp16 (inf/nan gradients"
            " at every loss scale from 65536 down to 0.125); stopping instead of training on nothing. fp16 cannot hold"
            " this model's activations or gradients: train in fp32 (verlfit --profile p40), or lower the learning rate"
            " (critic.loss_scaling.max_consecutive_skips sets the limit)"
        ),
    ]
    failure = diagnose(lines)
    assert (failure.kind, failure.phase, failure.worker_method) == (
        "fp16_overflow",
        "critic_update",
        "critic_update_critic",
    )
    assert failure.facts == {"updates": 20, "role": "critic", "from_scale": "65536", "to_scale": "0.125"}
    message, fix = explain(failure)
    assert (
        message
        == "fp16 loss scaling stopped the run in the critic update (verl's critic_update_critic): the last 20 critic"
        " updates all overflowed (inf/nan gradients at every loss scale from 65536 down to 0.125), so fp16 cannot"
        " hold this run's gradients"
    )
    assert fix == "train it in fp32 (verlfit train --profile p40: slower on this card) or with a lower --critic-lr"
