"""verlfit train --gpus N: per-GPU sizes in the dry run, mixed cards and too few GPUs refused, CUDA_VISIBLE_DEVICES
read in PCI bus order, and NCCL's peer-to-peer fallback from a fake NVML (issue 18)."""

import pynvml
import pytest

from command_lines import parse_train as parse
from fakes import FakeNvml
from verlfit import cli, gpu
from verlfit.errors import VerlfitError
from verlfit.commands.train import prepare_launch

P40 = ("Tesla P40", (6, 1), 25_637_224_448)
A10 = ("NVIDIA A10", (8, 6), 24_146_608_128)
SIZED_KEYS = (
    "ppo_micro_batch_size_per_gpu",
    "log_prob_micro_batch_size_per_gpu",
    "tensor_model_parallel_size",
    "rollout.micro_batch_size",
    "n_gpus_per_node",
    "nnodes",
)


_real_query = gpu.query_gpus


def test_dry_run_with_two_gpus_prints_the_gpu_count_and_per_gpu_micro_batches(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    sized = {}
    for gpus in (1, 2):
        plan = prepare_launch(parse(["--profile", "p40", "--dry-run", "--gpus", str(gpus)]), environ={})
        sized[gpus] = [o for o in plan.overrides if any(key in o for key in SIZED_KEYS)]
    # batch 32, mini-batch 16: 16 responses per mini-batch on one GPU, 8 on each of two (verl divides by the GPUs)
    assert sized[2] == [
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "critic.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "+actor_rollout_ref.rollout.micro_batch_size=16",
        "trainer.n_gpus_per_node=2",
        "trainer.nnodes=1",
    ]
    assert sized[1] == [
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8",
        "critic.ppo_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "+actor_rollout_ref.rollout.micro_batch_size=32",
        "trainer.n_gpus_per_node=1",
        "trainer.nnodes=1",
    ]
    from fakes import write_raw_gsm8k

    assert (
        cli.main(["train", "--dry-run", "--profile", "p40", "--gpus", "2", "--data", write_raw_gsm8k(tmp_path / "raw")])
        == 0
    )
    out = capsys.readouterr().out
    assert "micro-batches per GPU: actor 8, critic 8, log-prob 8, HF rollout 16 prompts\n" in out
    assert "note: plan: actor micro-batch 8: the largest possible (8 responses per GPU)\n" in out
    assert "    trainer.n_gpus_per_node=2 \\\n" in out


def test_mixed_cards_are_refused_before_ray_naming_both_kinds_and_the_selection(monkeypatch, capsys):
    nvml = FakeNvml([P40, A10])
    from verlfit.train import gpus as train_gpus  # the name train's GPU lookup calls

    monkeypatch.setattr(train_gpus, "query_gpus", lambda nvml_module=None: _real_query(nvml))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cli.main(["train", "--profile", "p40", "--gpus", "2"]) == 2
    err = capsys.readouterr().err
    assert (
        "this machine has GPUs of 2 kinds (NVML indices, as nvidia-smi numbers them): Tesla P40 (compute capability"
        " 6.1, 23.9 GiB): GPU 0; NVIDIA A10 (compute capability 8.6, 22.5 GiB): GPU 1;" in err
    )
    assert (
        "fix: run on one kind: CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 for the Tesla P40 or"
        " CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 for the NVIDIA A10" in err
    )


def test_the_selection_the_refusal_names_picks_that_card_for_the_profile():
    # before: the profile was chosen from NVML's GPU 0 (the P40) whatever CUDA_VISIBLE_DEVICES said
    report = _real_query(FakeNvml([P40, A10]))
    plan = prepare_launch(
        parse(["--profile", "auto", "--dry-run", "--plan", "off"]),
        environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1"},
        gpu_report=report,
    )
    assert (plan.profile_name, plan.gpu_description) == ("a10", "NVIDIA A10 (compute capability 8.6, 22.5 GiB)")


def test_more_gpus_than_visible_are_refused_naming_the_count():
    report = _real_query(FakeNvml([P40, P40]))
    with pytest.raises(VerlfitError) as error:
        prepare_launch(parse(["--profile", "p40", "--gpus", "4", "--plan", "off"]), environ={}, gpu_report=report)
    assert (error.value.message, error.value.fix, error.value.exit_code) == (
        "--gpus 4 asks for more GPUs than are visible: this machine has 2",
        "use --gpus 2 or less",
        2,
    )
    with pytest.raises(
        VerlfitError, match="--gpus 2 asks for more GPUs than are visible: CUDA_VISIBLE_DEVICES=0 leaves 1 visible"
    ):
        prepare_launch(
            parse(["--profile", "p40", "--gpus", "2", "--plan", "off"]),
            environ={"CUDA_VISIBLE_DEVICES": "0"},
            gpu_report=report,
        )


def test_gpus_without_peer_to_peer_get_nccl_p2p_disable_and_the_users_setting_wins():
    blocked = _real_query(FakeNvml([P40, P40], p2p={(0, 1): pynvml.NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED}))
    plan = prepare_launch(parse(["--profile", "p40", "--gpus", "2", "--plan", "off"]), environ={}, gpu_report=blocked)
    assert plan.environment == {
        "VLLM_DTYPE": "float32",
        "TRITON_MAX_SHARED_MEMORY": "49152",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "NCCL_P2P_DISABLE": "1",
    }
    assert (
        "NVML reports no peer-to-peer access between GPU 0-1: NCCL_P2P_DISABLE=1 for the workers, so NCCL goes through"
        " host memory (slower, but no hang); set NCCL_P2P_DISABLE or NCCL_P2P_LEVEL yourself to override" in plan.notes
    )
    mine = prepare_launch(
        parse(["--profile", "p40", "--gpus", "2", "--plan", "off"]),
        environ={"NCCL_P2P_DISABLE": "0"},
        gpu_report=blocked,
    )
    assert "NCCL_P2P_DISABLE" not in mine.environment  # the user's own value reaches verl through os.environ
    assert (
        "NVML reports no peer-to-peer access between GPU 0-1; your NCCL_P2P_DISABLE=0 is kept (verlfit would set"
        " NCCL_P2P_DISABLE=1)" in mine.notes
    )
    one = prepare_launch(parse(["--profile", "p40", "--gpus", "1", "--plan", "off"]), environ={}, gpu_report=blocked)
    assert "NCCL_P2P_DISABLE" not in one.environment
    nodes = prepare_launch(
        parse(["--profile", "p40", "--gpus", "2", "--nodes", "2", "--plan", "off"]), environ={}, gpu_report=blocked
    )
    from verlfit.overrides import CUDA_GRAPH_SEVERAL_GPUS_NOTE

    # the last two: this one, then the p40 profile's CUDA graph turned off on several GPUs
    assert nodes.notes[-2:] == [
        (
            "with --nodes, the workers of a running Ray cluster take their environment from `ray start`, not from"
            " verlfit: start every node with NCCL_P2P_DISABLE=1 too"
        ),
        CUDA_GRAPH_SEVERAL_GPUS_NOTE,
    ]
    reachable = prepare_launch(
        parse(["--profile", "p40", "--gpus", "2", "--plan", "off"]),
        environ={},
        gpu_report=_real_query(FakeNvml([P40, P40])),
    )
    assert "NCCL_P2P_DISABLE" not in reachable.environment
