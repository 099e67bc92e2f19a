"""The shape of a decoder-only transformer, read from a Hugging Face ``config.json``, and its exact
parameter counts as verl builds the actor (``AutoModelForCausalLM``) and the critic
(``AutoModelForTokenClassification`` with one label, ``verl/utils/model.py`` ``load_valuehead_model``).

Counting rule, per decoder layer (Llama/Qwen2/Qwen3/Mistral layout, ``transformers`` 4.51):

* attention: ``q_proj`` hidden x (heads * head_dim), ``k_proj`` and ``v_proj`` hidden x (kv_heads *
  head_dim), ``o_proj`` (heads * head_dim) x hidden; biases on q/k/v for Qwen2 (``modeling_qwen2.py``:
  ``bias=True`` on q/k/v, ``bias=False`` on o), on all four when a Llama-style config sets
  ``attention_bias``; Qwen3 adds a per-head RMSNorm on q and k (``head_dim`` weights each);
* MLP (SwiGLU): ``gate_proj`` and ``up_proj`` hidden x intermediate, ``down_proj`` intermediate x
  hidden (biases only with Llama's ``mlp_bias``);
* two RMSNorm weight vectors of ``hidden``.

Plus the token embedding (vocab x hidden), the final RMSNorm (hidden) and ``lm_head`` (vocab x hidden,
shared with the embedding when ``tie_word_embeddings``). The critic replaces ``lm_head`` with
``score = nn.Linear(hidden, 1)`` (weight and bias: hidden + 1 parameters).

Check: Qwen2.5-0.5B (24 layers, hidden 896, 14 heads, 2 KV heads, intermediate 4864, vocab 151936,
tied) gives 494,032,768 parameters, the number its model card and ``model.num_parameters()`` report.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from verlfit.errors import VerlfitError

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"

# model_type values whose layer layout the counting rule above describes
KNOWN_MODEL_TYPES = ("qwen2", "qwen3", "llama", "mistral")
# config keys that make a model a mixture of experts (transformers 4.51: qwen2_moe/qwen3_moe num_experts, mixtral
# num_local_experts, deepseek_v2/v3 n_routed_experts, ...): the rule above counts one dense MLP per layer, so such a
# config is refused (it would plan ~1.9B for Qwen1.5-MoE-A2.7B's ~14.3B)
EXPERT_KEYS = (
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "moe_num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
)


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs to know about a decoder-only transformer.

    Attributes:
        name: where the shape came from (a path, or a built-in model id).
        model_type: the config's ``model_type`` (e.g. ``"qwen2"``).
        num_layers: ``num_hidden_layers``.
        hidden_size: ``hidden_size``.
        num_attention_heads: query heads.
        num_key_value_heads: key/value heads (grouped-query attention when fewer than the query heads).
        intermediate_size: MLP inner width.
        vocab_size: rows of the embedding and of ``lm_head``.
        tie_word_embeddings: ``lm_head`` shares the embedding's weight.
        head_dim: per-head width; ``hidden_size // num_attention_heads`` unless the config says otherwise.
        qkv_bias: biases on q/k/v projections.
        o_bias: bias on the attention output projection.
        mlp_bias: biases on the three MLP projections.
        qk_norm: a per-head RMSNorm on q and k (Qwen3).
        context_length: ``max_position_embeddings``, the most positions (prompt and response together) the model was
            trained for; None where the config gives none.
    """

    name: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    head_dim: int
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    context_length: int | None = None

    @property
    def q_dim(self) -> int:
        """Width of the concatenated query heads (``heads * head_dim``)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the concatenated key (or value) heads (``kv_heads * head_dim``)."""
        return self.num_key_value_heads * self.head_dim

    @property
    def layer_parameters(self) -> int:
        """Parameters of one decoder layer."""
        h, q, kv, i = self.hidden_size, self.q_dim, self.kv_dim, self.intermediate_size
        attention = h * q + 2 * h * kv + q * h
        if self.qkv_bias:
            attention += q + 2 * kv
        if self.o_bias:
            attention += h
        if self.qk_norm:
            attention += 2 * self.head_dim
        mlp = 3 * h * i + ((2 * i + h) if self.mlp_bias else 0)
        norms = 2 * h
        return attention + mlp + norms

    @property
    def embedding_parameters(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def body_parameters(self) -> int:
        """Embedding + all decoder layers + final norm: the base model without any head."""
        return self.embedding_parameters + self.num_layers * self.layer_parameters + self.hidden_size

    @property
    def actor_parameters(self) -> int:
        """Parameters of ``AutoModelForCausalLM`` (the actor and the reference policy)."""
        lm_head = 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size
        return self.body_parameters + lm_head

    @property
    def critic_parameters(self) -> int:
        """Parameters of ``AutoModelForTokenClassification`` with ``num_labels=1`` (verl's critic)."""
        return self.body_parameters + self.hidden_size + 1


def expert_keys(config: dict) -> list[str]:
    """The :data:`EXPERT_KEYS` a parsed ``config.json`` sets (to anything but None, 0 or False): a mixture of
    experts, which :func:`shape_from_config` refuses; empty for a dense model."""
    return [key for key in EXPERT_KEYS if config.get(key) not in (None, 0, False)]


def shape_from_config(config: dict, name: str = "config.json", experts: bool = False) -> ModelShape:
    """Build a :class:`ModelShape` from a parsed HF ``config.json``. ``experts``: let a mixture of experts pass (its
    shape counts one MLP per layer), for a caller that counts nothing with it (:func:`check_model_config`).

    Raises:
        VerlfitError: naming ``name`` and the missing key when the config lacks one of
            ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``, ``intermediate_size``,
            ``vocab_size``.
    """
    if not isinstance(config, dict):
        raise VerlfitError(f"{name}: expected a JSON object, got {type(config).__name__}", exit_code=2)
    if "text_config" in config and "num_hidden_layers" not in config:
        config = {
            **config["text_config"],
            "tie_word_embeddings": config.get("tie_word_embeddings", config["text_config"].get("tie_word_embeddings")),
        }
    if expert_keys(config) and not experts:
        experts = expert_keys(config)
        raise VerlfitError(
            f"{name}: a mixture-of-experts model ({', '.join(f'{key}={config[key]!r}' for key in experts)}, "
            f"model_type {config.get('model_type', 'unknown')!r}): verlfit counts parameters and memory for dense "
            "models only (one MLP per layer), and would under-count this one by the experts it leaves out",
            fix="train a dense model (e.g. Qwen/Qwen3-1.7B, meta-llama/Llama-3.2-1B-Instruct, "
            "Qwen/Qwen2.5-1.5B-Instruct), or use --plan off and size micro-batches yourself",
            exit_code=2,
        )
    required = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
    missing = [key for key in required if key not in config]
    if missing:
        raise VerlfitError(
            f"{name}: not a decoder-only transformer config: missing {', '.join(missing)} (transformers would fill "
            "in its class's defaults, another model's sizes, and the weights would not load)",
            fix="download config.json again from the model's repository (huggingface-cli download MODEL config.json "
            "--local-dir DIR), or pass --model a Qwen2, Qwen3, Llama or Mistral model",
            exit_code=2,
        )
    not_positive = [
        key
        for key in (*required, "num_key_value_heads", "head_dim")
        if config.get(key) is not None
        and not (isinstance(config[key], int) and not isinstance(config[key], bool) and config[key] > 0)
    ]
    if not_positive:
        what = "must be a positive whole number" if len(not_positive) == 1 else "must be positive whole numbers"
        raise VerlfitError(
            f"{name}: {', '.join(f'{key}={config[key]!r}' for key in not_positive)} {what} (counts of layers, "
            "heads and widths)",
            fix="download config.json again from the model's repository (huggingface-cli download MODEL config.json "
            "--local-dir DIR): a config whose sizes are not whole numbers describes no model the weights fit",
            exit_code=2,
        )
    model_type = str(config.get("model_type", "unknown"))
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads") or heads
    if "head_dim" not in config and config["hidden_size"] % heads:
        raise VerlfitError(
            f"{name}: hidden_size={config['hidden_size']} is not a multiple of num_attention_heads={heads}, and no "
            "head_dim is given",
            fix="check the model's config.json",
            exit_code=2,
        )
    if heads % kv_heads:
        raise VerlfitError(
            f"{name}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads} "
            "(grouped-query attention shares each KV head among whole groups)",
            fix="check the model's config.json",
            exit_code=2,
        )
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    context = config.get("max_position_embeddings")
    attention_bias = bool(config.get("attention_bias", False))
    return ModelShape(
        name=name,
        model_type=model_type,
        num_layers=config["num_hidden_layers"],
        hidden_size=config["hidden_size"],
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=config["intermediate_size"],
        vocab_size=config["vocab_size"],
        # transformers' PretrainedConfig default is True; Llama/Mistral configs write False explicitly
        tie_word_embeddings=bool(config.get("tie_word_embeddings", True)),
        head_dim=head_dim,
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=False if model_type == "qwen2" else attention_bias,
        mlp_bias=bool(config.get("mlp_bias", False)),
        qk_norm=model_type == "qwen3",
        context_length=context if isinstance(context, int) and not isinstance(context, bool) and context > 0 else None,
    )


# Built-in shapes, so `verlfit plan` works offline for the default model and its larger siblings.
# Values are those of the models' config.json on the hub (Qwen2.5 family, model_type qwen2); the
# parameter counts they give are the models' reported totals (tests/test_model_shape.py checks 0.5B).
_QWEN25 = {
    "0.5B": dict(
        num_hidden_layers=24,
        hidden_size=896,
        num_attention_heads=14,
        num_key_value_heads=2,
        intermediate_size=4864,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "1.5B": dict(
        num_hidden_layers=28,
        hidden_size=1536,
        num_attention_heads=12,
        num_key_value_heads=2,
        intermediate_size=8960,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "3B": dict(
        num_hidden_layers=36,
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=2,
        intermediate_size=11008,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    # 7B: 152064 rows and an untied lm_head (Qwen/Qwen2.5-7B-Instruct's config.json on the hub: vocab_size 152064,
    # tie_word_embeddings false; docs/plan.md, "Built-in model shapes")
    "7B": dict(
        num_hidden_layers=28,
        hidden_size=3584,
        num_attention_heads=28,
        num_key_value_heads=4,
        intermediate_size=18944,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
    # 14B: untied like the 7B (Qwen/Qwen2.5-14B's config.json as a public copy quotes it, found with the code search:
    # an sglang model-config table; the Instruct model shares the architecture)
    "14B": dict(
        num_hidden_layers=48,
        hidden_size=5120,
        num_attention_heads=40,
        num_key_value_heads=8,
        intermediate_size=13824,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
}
BUILTIN_SHAPES: dict[str, dict] = {}
for _size, _values in _QWEN25.items():
    for _suffix in ("", "-Instruct"):
        # max_position_embeddings: the hub configs' 32768, as verlfit.synthetic_model's copies of them
        BUILTIN_SHAPES[f"Qwen/Qwen2.5-{_size}{_suffix}"] = {
            "model_type": "qwen2",
            "max_position_embeddings": 32768,
            **_values,
        }
# Qwen3 dense (model_type qwen3: q/k RMSNorm per head, head_dim 128 whatever hidden/heads, no attention bias, tied):
# the hub's config.json of Qwen/Qwen3-0.6B and Qwen3-4B as public copies quote them (found with the code search,
# e.g. a model card copy of Qwen3-4B's config.json, transformers_version 4.51.0), 1.7B from two independent
# re-implementations (levanter's qwen3_1_7b, a test table of Qwen3_1_7B); base models share the "-Base" shapes.
_QWEN3 = {
    "0.6B": dict(
        num_hidden_layers=28,
        hidden_size=1024,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "1.7B": dict(
        num_hidden_layers=28,
        hidden_size=2048,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=6144,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
    "4B": dict(
        num_hidden_layers=36,
        hidden_size=2560,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=9728,
        vocab_size=151936,
        tie_word_embeddings=True,
    ),
}
for _size, _values in _QWEN3.items():
    for _suffix in ("", "-Base"):
        BUILTIN_SHAPES[f"Qwen/Qwen3-{_size}{_suffix}"] = {
            "model_type": "qwen3",
            "attention_bias": False,
            "max_position_embeddings": 40960,  # the hub configs', as verlfit.synthetic_model's copies of them
            **_values,
        }
# Llama 3.2 text models (model_type llama, tied, no biases): meta-llama/Llama-3.2-1B(-Instruct) and -3B(-Instruct)
# config.json as public copies quote them (the code search: a transformers LlamaConfig of Llama-3.2-1B-Instruct
# with its hub commit hash, an sglang table of Llama-3.2-3B's config.json).
_LLAMA32 = {
    "1B": dict(
        num_hidden_layers=16,
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
    ),
    "3B": dict(
        num_hidden_layers=28,
        hidden_size=3072,
        num_attention_heads=24,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=8192,
        vocab_size=128256,
        tie_word_embeddings=True,
    ),
}
# Llama 3.1 8B (untied, no biases): meta-llama/Llama-3.1-8B's config.json as the same sglang table quotes it.
_LLAMA31 = {
    "8B": dict(
        num_hidden_layers=32,
        hidden_size=4096,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=14336,
        vocab_size=128256,
        tie_word_embeddings=False,
    ),
}
_LLAMA_REST = {
    "model_type": "llama",
    "attention_bias": False,
    "mlp_bias": False,
    "max_position_embeddings": 131072,  # the hub configs', as verlfit.synthetic_model's copies of them
}
for _size, _values in _LLAMA32.items():
    for _suffix in ("", "-Instruct"):
        BUILTIN_SHAPES[f"meta-llama/Llama-3.2-{_size}{_suffix}"] = {**_LLAMA_REST, **_values}
for _size, _values in _LLAMA31.items():
    for _suffix in ("", "-Instruct"):
        BUILTIN_SHAPES[f"meta-llama/Llama-3.1-{_size}{_suffix}"] = {**_LLAMA_REST, **_values}


def check_model_argument(model: str, option: str = "--model") -> None:
    """Refuse a ``--model`` that names a model's ``config.json`` (or any file) instead of its folder: verl loads the
    weights and tokenizer from the folder (``AutoModelForCausalLM.from_pretrained``), which a file is not.

    Raises:
        VerlfitError: exit status 2, with the folder to pass instead.
    """
    path = Path(os.path.expanduser(model))
    if path.is_file():
        folder = path.parent if str(path.parent) not in ("", ".") else Path(".")
        what = "a model's config.json" if path.name == "config.json" else "a file"
        raise VerlfitError(
            f"{option} {model} is {what}, not a model folder: verl loads the weights and the tokenizer from the folder",
            fix=f"pass {option} {folder} (the folder holding config.json, the weights and the tokenizer)",
            exit_code=2,
        )


def load_model_shape(model: str = DEFAULT_MODEL, hub_cache_lookup=None) -> ModelShape:
    """Find the shape of ``model`` without any network access.

    Looks, in order, at: a ``config.json`` file; a directory holding ``config.json``; the built-in
    shapes (:data:`BUILTIN_SHAPES`, e.g. ``Qwen/Qwen2.5-0.5B-Instruct``); the local Hugging Face
    cache for a hub id (``huggingface_hub.try_to_load_from_cache``, no download).

    Args:
        model: a path or a hub id.
        hub_cache_lookup: ``f(repo_id, filename) -> path | None``; default
            ``huggingface_hub.try_to_load_from_cache`` (tests pass a fake).

    Raises:
        VerlfitError: when no config is found, or the file is not a usable config.
    """
    path = Path(os.path.expanduser(model))
    if path.is_file():
        return _read_config(path, str(path))
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise VerlfitError(
                f"{path} has no config.json",
                fix="pass the model directory (with config.json) or the config.json file",
                exit_code=2,
            )
        return _read_config(config, str(path))
    if model in BUILTIN_SHAPES:
        return shape_from_config(BUILTIN_SHAPES[model], name=f"{model} (built-in shape)")
    if hub_cache_lookup is None:
        try:
            # lazy: only on the paths that reach the hub
            from huggingface_hub import try_to_load_from_cache as hub_cache_lookup
        except ImportError:
            hub_cache_lookup = None
    if hub_cache_lookup is not None and model.count("/") == 1:
        try:
            cached = hub_cache_lookup(model, "config.json")
        except Exception:  # an invalid repo id, an unreadable cache: same as not cached
            cached = None
        if isinstance(cached, (str, os.PathLike)) and Path(cached).is_file():
            return _read_config(Path(cached), f"{model} (hub cache)")
    known = ", ".join(sorted(BUILTIN_SHAPES))
    if model.startswith(("/", ".", "~")) or os.sep + os.sep in model or model.count("/") > 1:
        raise VerlfitError(
            f"model {model!r}: no such file or directory",
            fix=f"check the path, or pass a hub id such as Qwen/Qwen2.5-0.5B-Instruct (built in: {known})",
            exit_code=2,
        )
    spelled = [name for name in BUILTIN_SHAPES if name.lower() == model.lower()]
    if spelled:  # the built-in table and the hub cache's folders match the case as typed
        raise VerlfitError(
            f"no config.json for model {model!r}: not a file, not a directory, not in the local hub cache; the "
            f"built-in shape {spelled[0]} is spelled in another case",
            fix=f"pass --model {spelled[0]}",
            exit_code=2,
        )
    raise VerlfitError(
        f"no config.json for model {model!r}: not a file, not a directory, not in the local hub cache",
        fix=f"download it first (huggingface-cli download {model} --include config.json puts it in the cache), "
        "pass --model a local directory, or use --plan off with verlfit train to size micro-batches yourself "
        f"(built in: {known})",
        exit_code=2,
    )


def check_model_config(model_dir: str | os.PathLike, name: str) -> None:
    """Refuse a model folder's ``config.json`` with the words ``verlfit plan`` and ``train`` refuse it with
    (:func:`load_model_shape`): not JSON, transformers cannot build it (:func:`check_transformers_builds`), a size
    missing or not a positive whole number (:func:`shape_from_config`). A mixture of experts passes: the caller
    (``verlfit eval``) loads and generates with it, it counts nothing. ``name`` leads each message.

    Raises:
        VerlfitError: exit status 2.
    """
    _read_config(Path(model_dir) / "config.json", name, experts=True)


def _read_config(path: Path, name: str, experts: bool = False) -> ModelShape:
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise VerlfitError(f"{path}: cannot read a JSON config ({error})", exit_code=2) from None
    check_transformers_builds(path, name)
    return shape_from_config(config, name=name, experts=experts)


def check_transformers_builds(config_path: Path, name: str) -> None:
    """Refuse a ``config.json`` that transformers' ``AutoConfig`` cannot build, as verl's first step of loading the
    actor and the critic does (``verl/utils/model.py``: ``AutoConfig.from_pretrained``): an unknown ``model_type``,
    none at all, one that needs ``trust_remote_code``. Values it builds but the planner cannot count (a missing
    ``hidden_size``, which transformers would default to another model's 4096; ``num_hidden_layers`` of -1 or
    ``"two"``) are :func:`shape_from_config`'s refusals. Without transformers installed (a host that only plans)
    nothing is checked here: the doctor's ``stack`` line says it is missing.

    Raises:
        VerlfitError: naming ``name``, with transformers' own words (its first sentence) and version.
    """
    try:
        import transformers  # lazy: imports torch; only where a model or tokenizer is loaded
        from transformers import AutoConfig  # lazy: imports torch; only where a model or tokenizer is loaded
    except ImportError:
        return
    try:
        AutoConfig.from_pretrained(str(config_path))
    except (ValueError, KeyError, TypeError, OSError) as error:
        words = str(error).strip().split("\n")[0].split(", or contain one of the following strings")[0]
        raise VerlfitError(
            f"{name}: transformers {transformers.__version__} cannot build this config.json ({words}), so verl "
            "could not load the model",
            fix="pass --model a model whose config.json transformers knows (model_type qwen2, qwen3, llama or "
            "mistral: those verlfit plans for), downloaded whole from its repository",
            exit_code=2,
        ) from None


def with_name(shape: ModelShape, name: str) -> ModelShape:
    """Return ``shape`` relabelled (for display)."""
    return replace(shape, name=name)
