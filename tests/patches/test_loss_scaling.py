"""Patch 0024 (loss_scaling): fp16 actor and critic updates with dynamic loss scaling, against fp32, on CPU.

The probes (loss_scaling_probe.py) run verl's own DataParallelPPOActor.update_policy /
DataParallelPPOCritic.update_critic
from the patched copy of verl on FSDP1 modules (gloo, world size 1) of a tiny random Qwen2 and Qwen3 (2 layers,
hidden 64, vocabulary 300), with the t4/v100 profiles' FSDP mixed precision (param fp16, reduce and buffers fp32: fp32
masters, gradients and AdamW states), fp16 autocast (torch's CPU autocast runs Linear and matmul in fp16: the probe
checks it) and the batch of the trim-padding tests (4 rows, micro-batches of 2, gradient accumulation over 2).
Tolerances are the measured differences with a margin, stated in docs/fp16.md.
"""

import pytest

from speed_probes import run_speed_probe
from verl_patch_helpers import SERIES, copy_verl, partial_series, run_apply, series_names

pytestmark = pytest.mark.needs_gnu_patch

PROBE = SERIES.parent.parent.parent / "tests" / "patches" / "loss_scaling_probe.py"
ROLES = [(arch, role) for arch in ("qwen2", "qwen3") for role in ("actor", "critic")]


@pytest.fixture(scope="module")
def update(trees):
    return run_speed_probe(trees["patched"], "update", script=PROBE)


@pytest.fixture(scope="module")
def overflow(trees):
    return run_speed_probe(trees["patched"], "overflow", script=PROBE)


@pytest.fixture(scope="module")
def logprob(trees):
    return run_speed_probe(trees["patched"], "logprob", script=PROBE)


@pytest.fixture(scope="module")
def before_0024(tmp_path_factory):
    """The series up to 0023: verl without loss scaling."""
    base = tmp_path_factory.mktemp("before_0024")
    root = copy_verl(base / "verl")
    run_apply(
        "--series",
        partial_series(base / "series", series_names().index("0024-fp16-dynamic-loss-scaling.patch")),
        root,
        check_rc=0,
    )
    return root


def test_cpu_autocast_really_computes_in_fp16(update):
    assert update["cpu_autocast_fp16"] == "torch.float16"


@pytest.mark.parametrize("arch, role", ROLES)
def test_one_fp16_update_with_the_scaler_matches_the_fp32_update(update, arch, role):
    # the tiny Qwen2 critic's first update overflows at torch's initial scale 2**16 (its fp32 gradient norm is 23.8):
    # skipped, weights untouched, and the same update steps at 2**15, as training goes on; the others step at once
    overflowed = 1 if (arch, role) == ("qwen2", "critic") else 0
    for label in ("unclipped", "clipped"):
        res = update[f"{arch}_{role}"][label]
        assert res["skipped_before"] == overflowed and res["skipped_total"] == overflowed
        assert res["loss_scale"] == 65536.0 / 2**overflowed
        assert res["max_abs"] > 1e-3  # the update really moved the weights
        # measured (docs/fp16.md): relative L2 difference 0.0023-0.0069, cosine >= 0.999994
        assert res["rel_l2"] < 0.02, res
        assert res["cosine"] > 0.9999, res
        fp32_norm, fp16_norm = res["grad_norm"]
        assert fp16_norm == pytest.approx(fp32_norm, rel=0.01)  # the unscaled norm, not 2**16 times it


@pytest.mark.parametrize("arch, role", ROLES)
def test_clipping_acts_on_the_unscaled_gradients(update, arch, role):
    res = update[f"{arch}_{role}"]["clipped"]
    # grad_clip 0.05 < the gradient norm: both steps are clipped to norm 0.05 x lr 1 (SGD); clipping the scaled
    # gradients instead would leave the fp16 step 2**16 (or 2**15) times smaller
    assert res["grad_norm"][0] > 0.05
    fp32_step, fp16_step = res["step_norm"]
    assert fp32_step == pytest.approx(0.05, rel=1e-3)
    assert fp16_step == pytest.approx(0.05, rel=1e-2)


@pytest.mark.parametrize("arch, role", ROLES)
def test_the_scaler_alone_changes_nothing_in_fp32(update, arch, role):
    # multiplying by 2**16 and by its reciprocal are exact in fp32 (no overflow here)
    assert update[f"{arch}_{role}"]["fp32_scaler_bit_identical"] is True


def test_without_the_key_verl_is_stock(update):
    assert update["absent"] == {
        "actor": False,
        "critic": False,
        "scaler": True,
        "same_loss_object": True,
        "metric_keys": [],
    }


@pytest.mark.parametrize("role", ["actor", "critic"])
@pytest.mark.parametrize("value", ["inf", "nan"])
def test_an_overflowing_update_is_skipped_and_leaves_weights_and_adam_state_bit_identical(overflow, role, value):
    res = overflow[f"{role}_{value}"]
    # the probe starts at scale 1024 (loss_scaling.init_scale), so the first, clean update steps
    assert res["first"] == {
        f"{role}/loss_scale": 1024.0,
        f"{role}/skipped_updates": 0.0,
        f"{role}/skipped_updates_total": 0.0,
    }
    assert res["weights_bit_identical"] is True
    assert res["optimizer_state_bit_identical"] is True
    assert res["adam_steps"] == [1.0]  # AdamW stepped once, for the clean update only
    assert res["skipped"] == {
        f"{role}/loss_scale": 512.0,
        f"{role}/skipped_updates": 1.0,
        f"{role}/skipped_updates_total": 1.0,
    }
    assert res["skipped_grad_norm"] in ("inf", "nan")
    # the next clean update steps again at the lowered scale
    assert res["next"] == {
        f"{role}/loss_scale": 512.0,
        f"{role}/skipped_updates": 0.0,
        f"{role}/skipped_updates_total": 1.0,
    }
    assert res["next_moved"] is True


@pytest.mark.parametrize("role", ["actor", "critic"])
def test_a_run_whose_every_update_overflows_stops_with_a_clear_message(overflow, role):
    res = overflow[f"{role}_stop"]
    assert res["scales"] == [512.0, 256.0]  # two skipped updates reported, the third in a row raises
    assert (
        res["raised"]
        == f"verlfit loss scaling: the last 3 {role} updates all overflowed in fp16 (inf/nan gradients at every loss"
        " scale from 1024 down to 256); stopping instead of training on nothing. fp16 cannot hold this model's"
        " activations or gradients: train in fp32 (verlfit --profile p40), or lower the learning rate"
        f" ({role}.loss_scaling.max_consecutive_skips sets the limit)"
    )
    assert res["weights_untouched"] is True


def test_before_0024_an_always_overflowing_fp16_run_goes_on_without_a_word(before_0024):
    res = run_speed_probe(before_0024, "stock", script=PROBE)
    # no loss scaler, no metric, no stop: five updates skipped by verl's own non-finite grad-norm check, silently
    assert res == {
        "has_loss_scaler": False,
        "updates": 5,
        "metric_keys": [],
        "weights_untouched": True,
        "verl_file": res["verl_file"],
    }


@pytest.mark.parametrize("decoder", ["generate", "static_decode"])
def test_fp16_rollout_log_probs_stay_within_the_stated_bound_of_the_fp32_recomputation(logprob, decoder):
    res = logprob[decoder]
    assert res["tokens"] > 40 and res["finite"] is True
    # measured on this tiny random model (docs/fp16.md): max 0.0072 (generate) and 0.0153 (static decoder), mean 0.0024
    # and 0.0027 nats per token over 72 sampled tokens
    assert res["max_abs_diff"] < 0.05, res
    assert res["mean_abs_diff"] < 0.01, res
