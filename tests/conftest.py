"""Shared fixtures: a locally trained Qwen2.5-style tokenizer and a tiny random Qwen2 model (no hub access).

``benchmarks/`` is put on sys.path so tests can ``import make_model``, ``import gsm8k_synthetic`` and
``import sft_warmup``.
"""

import os
import shutil
import sys

import pytest

from slow_modules import SLOW_MODULES

_BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
if _BENCHMARKS not in sys.path:
    sys.path.insert(0, _BENCHMARKS)

# Never reach for the hub from tests, whatever the environment says.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


_TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config, items):
    """Mark every test of :data:`SLOW_MODULES` ``slow``."""
    for item in items:
        if os.path.relpath(str(item.path), os.path.dirname(_TESTS)) in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)


def pytest_runtest_setup(item):
    """``@pytest.mark.needs_gnu_patch``: skip where GNU patch is missing (patches/apply.py runs it), except in CI,
    where .ci/run installs it and a missing one must fail rather than skip."""
    if item.get_closest_marker("needs_gnu_patch") and shutil.which("patch") is None and not os.environ.get("CI"):
        pytest.skip("GNU patch not installed")


@pytest.fixture(scope="session")
def qwen_style_tokenizer_dir(tmp_path_factory):
    """Directory with a byte-level BPE tokenizer (Qwen2TokenizerFast files, Qwen2.5 ChatML template), trained
    once per session on the built-in corpus (a few seconds)."""
    import make_model

    out = tmp_path_factory.mktemp("qwen_style_tokenizer")
    make_model.train_tokenizer(str(out))
    return str(out)


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory, qwen_style_tokenizer_dir):
    """Directory with a random-weight tiny Qwen2ForCausalLM (2 layers, hidden 64, fp32) plus the session
    tokenizer: loadable with AutoTokenizer / AutoModelForCausalLM.from_pretrained."""
    import make_model

    out = tmp_path_factory.mktemp("tiny_qwen2")
    make_model.make_model(str(out), shape="tiny", tokenizer_dir=qwen_style_tokenizer_dir, seed=0)
    return str(out)


@pytest.fixture(scope="session")
def tiny_qwen2_no_eos_dir(tmp_path_factory, qwen_style_tokenizer_dir):
    """The tiny Qwen2 of ``tiny_qwen2_dir`` (same seed) without an EOS id: config.json and generation_config.json
    have no eos_token_id and no pad_token_id, the tokenizer keeps <|im_end|> and <|endoftext|> (issue 29; as
    transformers 4.51.3 saves a random Qwen3 made from a config without them)."""
    import make_model

    out = tmp_path_factory.mktemp("tiny_qwen2_no_eos")
    make_model.make_model(str(out), shape="tiny", tokenizer_dir=qwen_style_tokenizer_dir, seed=0, no_eos=True)
    return str(out)


# the model families the CPU tests run on (issue 26): a tiny random model of each, same tokenizer
MODEL_FAMILIES = ("qwen2", "qwen3", "llama")
_FAMILY_SHAPES = {"qwen2": "tiny", "qwen3": "tiny-qwen3", "llama": "tiny-llama"}


@pytest.fixture(scope="session")
def tiny_family_dirs(tmp_path_factory, qwen_style_tokenizer_dir, tiny_qwen2_dir):
    """family -> directory of a tiny random model (2 layers, hidden 64, fp32) with the session tokenizer: qwen2 (the
    ``tiny_qwen2_dir``), qwen3 (head_dim 32 apart from hidden/heads, q/k norms, tied), llama (untied lm_head), and
    ``"llama-no-eos"``: the llama model with no eos id anywhere (config.json and generation_config.json), as some
    base checkpoints ship."""
    import json

    import make_model

    dirs = {"qwen2": tiny_qwen2_dir}
    for family in MODEL_FAMILIES[1:]:
        out = tmp_path_factory.mktemp(f"tiny_{family}")
        make_model.make_model(str(out), shape=_FAMILY_SHAPES[family], tokenizer_dir=qwen_style_tokenizer_dir, seed=0)
        dirs[family] = str(out)
    no_eos = tmp_path_factory.mktemp("tiny_llama_no_eos")
    make_model.make_model(str(no_eos), shape="tiny-llama", tokenizer_dir=qwen_style_tokenizer_dir, seed=0)
    for name in ("config.json", "generation_config.json"):
        path = no_eos / name
        content = json.loads(path.read_text())
        content.pop("eos_token_id", None)
        path.write_text(json.dumps(content, indent=2, sort_keys=True) + "\n")
    dirs["llama-no-eos"] = str(no_eos)
    return dirs


@pytest.fixture(params=MODEL_FAMILIES)
def tiny_family_dir(request, tiny_family_dirs):
    """Each family's tiny model in turn (a test taking it runs once per family)."""
    return tiny_family_dirs[request.param]
