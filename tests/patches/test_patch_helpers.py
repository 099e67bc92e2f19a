"""The helper modules the series adds, loaded in-process from a patched copy of verl by file path:
the flash-attn bert_padding fallback (0001), the autocast dtype mapping (0003), the GPU memory limit (0006)."""

import ast
import types

import pytest
import torch

from verl_patch_helpers import load_module_from


@pytest.fixture(scope="module")
def fallback(trees):
    return load_module_from(
        trees["patched"] / "verl" / "utils" / "bert_padding_fallback.py", "verlfit_test_bert_padding_fallback"
    )


@pytest.fixture(scope="module")
def autocast(trees):
    return load_module_from(trees["patched"] / "verl" / "utils" / "autocast_config.py", "verlfit_test_autocast_config")


@pytest.fixture(scope="module")
def memlimit(trees):
    return load_module_from(
        trees["patched"] / "verl" / "utils" / "gpu_memory_limit.py", "verlfit_test_gpu_memory_limit"
    )


# ---------------------------------------------------------------------------------------------- 0001


def _random_padded(seed, batch=4, seqlen=9, dim=(3, 2)):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, seqlen, *dim, generator=g)
    mask = torch.zeros(batch, seqlen, dtype=torch.long)
    lengths = [seqlen, 1, 5, 3][:batch]
    for b, n in enumerate(lengths):
        if b % 2:  # left padding (verl's prompts) ...
            mask[b, seqlen - n :] = 1
        else:  # ... and right padding
            mask[b, :n] = 1
    return hidden, mask, lengths


def _reference_unpad(hidden, mask):
    """By hand: flat positions of the ones, gathered rows, cumulative lengths."""
    batch, seqlen = mask.shape
    flat_mask = mask.reshape(-1)
    indices = torch.nonzero(flat_mask).squeeze(-1)
    flat = hidden.reshape(batch * seqlen, -1)
    gathered = torch.gather(flat, 0, indices[:, None].expand(-1, flat.shape[1])).reshape(-1, *hidden.shape[2:])
    lengths = mask.sum(-1)
    cu = torch.zeros(batch + 1, dtype=torch.int32)
    cu[1:] = torch.cumsum(lengths, 0).to(torch.int32)
    return gathered, indices, cu, int(lengths.max()), lengths.to(torch.int32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_unpad_input_matches_hand_reference(fallback, seed):
    hidden, mask, _ = _random_padded(seed)
    out = fallback.unpad_input(hidden, mask)
    assert len(out) == 5, "flash-attn 2.7 returns (hidden, indices, cu_seqlens, max_seqlen, used_seqlens)"
    ref = _reference_unpad(hidden, mask)
    assert torch.equal(out[0], ref[0])
    assert torch.equal(out[1], ref[1]) and out[1].dtype == torch.int64
    assert torch.equal(out[2], ref[2]) and out[2].dtype == torch.int32
    assert out[3] == ref[3] and isinstance(out[3], int)
    assert torch.equal(out[4], ref[4]) and out[4].dtype == torch.int32


def test_unpad_input_with_unused_mask(fallback):
    hidden, mask, _ = _random_padded(3)
    unused = torch.zeros_like(mask)
    unused[0, -1] = 0
    unused[1, 0] = 1  # allocated but unused slot in front of row 1's tokens
    out = fallback.unpad_input(hidden, mask, unused)
    ref = _reference_unpad(hidden, mask + unused)
    assert torch.equal(out[0], ref[0]) and torch.equal(out[1], ref[1]) and torch.equal(out[2], ref[2])
    assert torch.equal(out[4], mask.sum(-1).to(torch.int32)), "seqused counts attention_mask only"


@pytest.mark.parametrize("seed", [0, 1])
def test_pad_input_inverts_unpad_and_zero_fills(fallback, seed):
    hidden, mask, _ = _random_padded(seed)
    batch, seqlen = mask.shape
    rows, indices, *_ = fallback.unpad_input(hidden, mask)
    padded = fallback.pad_input(rows, indices, batch, seqlen)
    assert padded.shape == hidden.shape
    expected = hidden * mask.reshape(batch, seqlen, *([1] * (hidden.dim() - 2)))
    assert torch.equal(padded, expected)


def test_index_first_axis_and_gradients(fallback):
    hidden, mask, _ = _random_padded(4)
    flat = hidden.reshape(-1, *hidden.shape[2:]).clone().requires_grad_(True)
    indices = torch.nonzero(mask.reshape(-1)).squeeze(-1)
    picked = fallback.index_first_axis(flat, indices)
    ref = torch.gather(flat.detach().reshape(flat.shape[0], -1), 0, indices[:, None].expand(-1, 6)).reshape(
        picked.shape
    )
    assert torch.equal(picked.detach(), ref)
    picked.sum().backward()
    assert torch.equal(flat.grad, mask.reshape(-1, 1, 1).float().expand_as(flat))
    rows = torch.randn(len(indices), 3, requires_grad=True)
    fallback.pad_input(rows, indices, *mask.shape).sum().backward()
    assert torch.equal(rows.grad, torch.ones_like(rows))


def test_rearrange_patterns_verl_uses(fallback):
    x = torch.arange(2 * 3 * 4).reshape(2, 3, 4)
    assert torch.equal(fallback._rearrange_fallback(x, "b s ... -> (b s) ..."), x.reshape(6, 4))
    mrope = torch.arange(3 * 2 * 5).reshape(3, 2, 5)  # (c, b, s) for qwen2-vl position ids
    out = fallback._rearrange_fallback(mrope, "c b s ... -> (b s) c ...")
    assert out.shape == (10, 3)
    assert all(out[b * 5 + s, c] == mrope[c, b, s] for c in range(3) for b in range(2) for s in range(5))
    with pytest.raises(NotImplementedError, match="einops"):
        fallback._rearrange_fallback(x, "b s d -> d s b")


def test_remove_padding_round_trip_as_dp_actor_does_it(fallback):
    """dp_actor's use_remove_padding path: unpad ids, unpad positions, pad per-token outputs back."""
    ids = torch.tensor([[0, 0, 5, 6, 7], [8, 9, 10, 11, 12]])
    mask = (ids != 0).long()
    pos = torch.clip(torch.cumsum(mask, -1) - 1, min=0)
    ids_rmpad, indices, cu_seqlens, *_ = fallback.unpad_input(ids.unsqueeze(-1), mask)
    assert ids_rmpad.transpose(0, 1).tolist() == [[5, 6, 7, 8, 9, 10, 11, 12]]
    assert cu_seqlens.tolist() == [0, 3, 8]
    pos_rmpad = fallback.index_first_axis(
        fallback.rearrange(pos.unsqueeze(-1), "b s ... -> (b s) ..."), indices
    ).transpose(0, 1)
    assert pos_rmpad.tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]
    per_token = ids_rmpad.squeeze(-1).float()
    back = fallback.pad_input(per_token.unsqueeze(-1), indices=indices, batch=2, seqlen=5).squeeze(-1)
    assert torch.equal(back, (ids * mask).float())


# ---------------------------------------------------------------------------------------------- 0003


@pytest.mark.parametrize(
    "value,expected",
    [
        (None, (True, torch.bfloat16)),  # absent key: stock verl
        ("bf16", (True, torch.bfloat16)),
        ("bfloat16", (True, torch.bfloat16)),
        ("BF16", (True, torch.bfloat16)),
        ("fp16", (True, torch.float16)),
        ("float16", (True, torch.float16)),
        ("16", (True, torch.float16)),
        (16, (True, torch.float16)),
        ("fp32", (False, torch.float32)),
        ("float32", (False, torch.float32)),
        ("32", (False, torch.float32)),
        (32, (False, torch.float32)),
        (torch.float32, (False, torch.float32)),
        (torch.bfloat16, (True, torch.bfloat16)),
    ],
)
def test_autocast_settings_mapping(autocast, value, expected):
    assert autocast.autocast_settings(value) == expected


@pytest.mark.parametrize("value", ["int8", "fp64", "", "bf32", 8])
def test_autocast_settings_rejects_unknown(autocast, value):
    with pytest.raises(ValueError, match="unsupported autocast dtype"):
        autocast.autocast_settings(value)


# ---------------------------------------------------------------------------------------------- 0006


def test_memory_limit_bytes_and_fraction(memlimit):
    assert memlimit.ENV_VAR == "VERLFIT_GPU_MEMORY_LIMIT_GIB"
    assert memlimit.memory_limit_fraction(22.5, 24 * 1024**3) == (24159191040, 0.9375)
    limit, fraction = memlimit.memory_limit_fraction(22.5, 25_637_224_448)  # a P40's reported total
    assert limit == 24159191040 and fraction == pytest.approx(24159191040 / 25_637_224_448)
    assert memlimit.memory_limit_fraction(24, 24 * 1024**3) == (24 * 1024**3, 1.0)
    with pytest.raises(ValueError, match="exceeds"):
        memlimit.memory_limit_fraction(24.5, 24 * 1024**3)


@pytest.mark.parametrize("raw,expected", [(None, None), ("", None), ("  ", None), ("22.5", 22.5), ("8", 8.0)])
def test_memory_limit_parse(memlimit, raw, expected):
    assert memlimit.parse_limit_gib(raw) == expected


@pytest.mark.parametrize("raw", ["22.5GiB", "abc", "0", "-1", "nan", "inf"])
def test_memory_limit_parse_rejects(memlimit, raw):
    with pytest.raises(ValueError, match="VERLFIT_GPU_MEMORY_LIMIT_GIB"):
        memlimit.parse_limit_gib(raw)


class FakeCuda:
    def __init__(self, total, available=True):
        self.total, self.available, self.calls = total, available, []

    def is_available(self):
        return self.available

    def current_device(self):
        return 0

    def get_device_properties(self, device):
        return types.SimpleNamespace(total_memory=self.total)

    def set_per_process_memory_fraction(self, fraction, device=None):
        self.calls.append((fraction, device))


def test_apply_gpu_memory_limit(memlimit):
    cuda = FakeCuda(24 * 1024**3)
    assert memlimit.apply_gpu_memory_limit({"VERLFIT_GPU_MEMORY_LIMIT_GIB": "22.5"}, cuda=cuda) == 0.9375
    assert cuda.calls == [(0.9375, 0)]
    cuda = FakeCuda(24 * 1024**3)
    assert memlimit.apply_gpu_memory_limit({}, cuda=cuda) is None and cuda.calls == []
    cuda = FakeCuda(24 * 1024**3, available=False)
    assert (
        memlimit.apply_gpu_memory_limit({"VERLFIT_GPU_MEMORY_LIMIT_GIB": "8"}, cuda=cuda) is None and cuda.calls == []
    )
    cuda = FakeCuda(16 * 1024**3)
    with pytest.raises(ValueError, match="exceeds"):
        memlimit.apply_gpu_memory_limit({"VERLFIT_GPU_MEMORY_LIMIT_GIB": "22.5"}, cuda=cuda)
    assert cuda.calls == []


def test_every_fsdp_worker_applies_the_limit_once_its_process_group_exists(trees):
    source = (trees["patched"] / "verl" / "workers" / "fsdp_workers.py").read_text()
    tree = ast.parse(source)
    found = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None:
            continue
        calls = {}
        for node in ast.walk(init):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                calls.setdefault(name, node.lineno)
        if "init_process_group" in calls:
            found[cls.name] = calls
    assert set(found) == {"ActorRolloutRefWorker", "CriticWorker", "RewardModelWorker"}
    for name, calls in found.items():
        assert "apply_gpu_memory_limit" in calls, f"{name}.__init__ does not apply the memory limit"
        assert calls["apply_gpu_memory_limit"] > calls["init_process_group"], name
