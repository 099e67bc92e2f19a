"""Make a Qwen2.5-style tokenizer and a random-weight model (Qwen2, Qwen3 or Llama) locally, with no hub access.

* ``train_tokenizer(output_dir)`` trains a byte-level BPE tokenizer with the ``tokenizers`` library on a built-in
  corpus (generated English word problems and numbers) and saves it as a ``Qwen2TokenizerFast``: tokenizer.json,
  tokenizer_config.json (Qwen2.5-Instruct's ChatML ``chat_template``), special_tokens_map.json, vocab.json and
  merges.txt. Special tokens: ``<|endoftext|>`` (pad, and bos id for the model config), ``<|im_start|>``,
  ``<|im_end|>`` (eos), appended after the BPE vocabulary as Qwen does. Digits are split one by one.
* ``make_model(output_dir, shape)`` writes a random-weight ``Qwen2ForCausalLM`` (``Qwen3ForCausalLM``,
  ``LlamaForCausalLM`` for those shapes; safetensors, config.json, generation_config.json) plus those tokenizer
  files: the directory works as ``--model`` for verl
  (``AutoTokenizer``/``AutoModelForCausalLM.from_pretrained(local_dir)``).

Shapes (:data:`SHAPES`): those of :data:`BUILT_IN_MODELS` (``qwen2.5-0.5b`` ... ``qwen2.5-7b``, ``qwen3-0.6b`` ...
``qwen3-4b``, ``llama-3.2-1b``, ``llama-3.2-3b``) are the hub models' configs, their architecture taken from
:data:`verlfit.model_shape.BUILTIN_SHAPES` (vocabulary rows as the real model's even though the local tokenizer is
smaller, so memory and compute are the real model's); ``tiny``, ``tiny-qwen3``, ``tiny-llama`` (CPU tests) and
``small`` (learning check) use vocab = tokenizer size.

Needs ``torch``, ``transformers`` (with ``jinja2`` for the chat template), ``tokenizers`` and ``safetensors``: all
in the images (docker/common.lock, docker/torch-*.lock); imported only when a function needs them.
Used by ``verlfit bench``; the command line is ``benchmarks/make_model.py``::

    python benchmarks/make_model.py --shape qwen2.5-0.5b --output DIR
    python benchmarks/make_model.py --tokenizer-only --output DIR
    python benchmarks/make_model.py --shape tiny --output DIR --generation-sampling-defaults

Deterministic: the same arguments give the same files byte for byte.
"""

from __future__ import annotations

import random
import copy
import json
import os
import shutil
from typing import Iterable, List, Optional

from verlfit import synthetic_gsm8k
from verlfit.model_shape import BUILTIN_SHAPES

__all__ = [
    "QWEN25_CHAT_TEMPLATE",
    "DEFAULT_SYSTEM_PROMPT",
    "SPECIAL_TOKENS",
    "TOKENIZER_FILES",
    "SHAPES",
    "BUILT_IN_MODELS",
    "SAMPLING_DEFAULTS",
    "builtin_corpus",
    "train_tokenizer",
    "model_config",
    "make_model",
    "DEFAULT_VOCAB_SIZE",
    "QWEN_VOCAB_ROWS",
    "read_corpus_jsonl",
    "special_ids",
]

DEFAULT_SYSTEM_PROMPT = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

# Qwen2.5-Instruct's chat template (tokenizer_config.json of Qwen/Qwen2.5-*-Instruct), tools branch included.
QWEN25_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    '<args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
    "            {{- tool_call.name }}\n"
    '            {{- \'", "arguments": \' }}\n'
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]  # Qwen's order (151643, 151644, 151645 there)

# Qwen2's pre-tokenizer regex (tokenizer.json of Qwen/Qwen2.5-*): single digits already, Digits() below makes it
# explicit and independent of the regex.
QWEN2_SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json", "merges.txt"]

DEFAULT_VOCAB_SIZE = 8192
QWEN_VOCAB_ROWS = 151936

# Qwen2.5-Instruct's generation_config.json sampling fields (written only with --generation-sampling-defaults).
SAMPLING_DEFAULTS = {"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}

# The real models' shapes: the architecture (layers, hidden, heads, KV heads, head_dim, intermediate, vocabulary rows,
# tied embeddings, biases, model_type) is verlfit.model_shape's built-in shape of the hub id, the one place those
# numbers are written (sources: docs/plan.md section 9); the rest of each config.json is below. The tokenizer is the
# local one (its ids fit the real vocabulary's rows), and bos/eos ids come from it.
BUILT_IN_MODELS = {
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-1.5b": "Qwen/Qwen2.5-1.5B-Instruct",
    "qwen2.5-3b": "Qwen/Qwen2.5-3B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen3-0.6b": "Qwen/Qwen3-0.6B",
    "qwen3-1.7b": "Qwen/Qwen3-1.7B",
    "qwen3-4b": "Qwen/Qwen3-4B",
    "llama-3.2-1b": "meta-llama/Llama-3.2-1B-Instruct",
    "llama-3.2-3b": "meta-llama/Llama-3.2-3B-Instruct",
    "qwen2.5-14b": "Qwen/Qwen2.5-14B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
}
# Qwen/Qwen2.5-*-Instruct config.json: rope_theta 1e6, rms_norm_eps 1e-6, 32768 positions. max_window_layers (21, 21,
# 70, 28 below) is not checked against the hub's files; it and sliding_window act only with use_sliding_window=True,
# which these configs set False.
_QWEN25_REST = dict(
    max_position_embeddings=32768,
    sliding_window=32768,
    use_sliding_window=False,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
)
# Qwen/Qwen3-0.6B config.json: rope_theta 1e6, rms_norm_eps 1e-6, 40960 positions.
_QWEN3_REST = dict(
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
)
# meta-llama/Llama-3.2-*-Instruct config.json: rope_theta 500000, rms_norm_eps 1e-5, the llama3 rope scaling.
_LLAMA32_REST = dict(
    max_position_embeddings=131072,
    rope_theta=500000.0,
    rope_scaling=dict(
        rope_type="llama3",
        factor=32.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=8192,
    ),
    rms_norm_eps=1e-5,
    hidden_act="silu",
    attention_dropout=0.0,
    initializer_range=0.02,
    use_cache=True,
)
_REST = {
    "qwen2.5-0.5b": dict(_QWEN25_REST, max_window_layers=21),
    "qwen2.5-1.5b": dict(_QWEN25_REST, max_window_layers=21),
    "qwen2.5-3b": dict(_QWEN25_REST, max_window_layers=70),
    "qwen2.5-7b": dict(_QWEN25_REST, max_window_layers=28),
    "qwen3-0.6b": _QWEN3_REST,
    "qwen3-1.7b": _QWEN3_REST,
    "qwen3-4b": _QWEN3_REST,
    "llama-3.2-1b": _LLAMA32_REST,
    "llama-3.2-3b": _LLAMA32_REST,
    # max_window_layers: Qwen/Qwen2.5-14B's config.json as quoted (model_shape.py); inactive, as above
    "qwen2.5-14b": dict(_QWEN25_REST, max_window_layers=48),
    # meta-llama/Llama-3.1-8B's config.json: the llama3 rope scaling with factor 8 (3.2's: 32)
    "llama-3.1-8b": dict(_LLAMA32_REST, rope_scaling=dict(_LLAMA32_REST["rope_scaling"], factor=8.0)),
}


def _built_in_shape(shape: str) -> dict:
    """``shape``'s config fields: model_shape's built-in architecture of its hub id, then the rest of the config (a
    copy: transformers' config classes may rewrite a ``rope_scaling`` dict they are given)."""
    architecture = BUILTIN_SHAPES[BUILT_IN_MODELS[shape]]
    return {**architecture, **copy.deepcopy(_REST[shape])}


SHAPES = {
    **{shape: _built_in_shape(shape) for shape in BUILT_IN_MODELS},
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=None,
        max_position_embeddings=32768,
        max_window_layers=2,
        sliding_window=32768,
        use_sliding_window=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        hidden_act="silu",
        attention_dropout=0.0,
        initializer_range=0.02,
        use_cache=True,
    ),
    "small": dict(
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=None,
        max_position_embeddings=32768,
        max_window_layers=4,
        sliding_window=32768,
        use_sliding_window=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        hidden_act="silu",
        attention_dropout=0.0,
        initializer_range=0.02,
        use_cache=True,
    ),
    # tiny random models of the other families for the CPU tests (head_dim apart from hidden/heads for qwen3; an
    # untied lm_head for llama, as Llama 3.1 8B has)
    "tiny-qwen3": dict(
        model_type="qwen3",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        vocab_size=None,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        hidden_act="silu",
        attention_bias=False,
        attention_dropout=0.0,
        initializer_range=0.02,
        use_cache=True,
    ),
    "tiny-llama": dict(
        model_type="llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=None,
        max_position_embeddings=32768,
        rope_theta=500000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        hidden_act="silu",
        attention_bias=False,
        mlp_bias=False,
        attention_dropout=0.0,
        initializer_range=0.02,
        use_cache=True,
    ),
}
DEFAULT_DTYPE = {
    "qwen2.5-0.5b": "bfloat16",
    "qwen2.5-1.5b": "bfloat16",
    "qwen2.5-3b": "bfloat16",
    "qwen2.5-7b": "bfloat16",
    "tiny": "float32",
    "small": "float32",
    "qwen3-0.6b": "bfloat16",
    "qwen3-1.7b": "bfloat16",
    "qwen3-4b": "bfloat16",
    "llama-3.2-1b": "bfloat16",
    "llama-3.2-3b": "bfloat16",
    "qwen2.5-14b": "bfloat16",
    "llama-3.1-8b": "bfloat16",
    "tiny-qwen3": "float32",
    "tiny-llama": "float32",
}
# model_type -> (config class, causal LM class) in transformers (4.51 has all three)
FAMILIES = {
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
}

_WORDS = (
    "the a an and or but so then after before when while because if of to in on at for with from by about into "
    "over under between each every all some many few more less most least than as is are was were be been has have "
    "had do does did will would can could should must may might shall it its he she they them their his her we our "
    "you your I me my this that these those there here what which who whom how why where much total altogether "
    "left remaining each per times twice half third quarter double triple price cost costs paid pays buy buys "
    "bought sell sells sold spend spends spent save saves saved earn earns earned give gives gave take takes took "
    "make makes made find finds found need needs needed want wants wanted get gets got put puts eat eats ate "
    "read reads wrote write writes walk walks walked run runs ran drive drives drove day days week weeks month "
    "months year years hour hours minute minutes second seconds dollar dollars cent cents money store shop school "
    "class student students teacher friend friends family mother father brother sister children child boy girl "
    "people person box boxes bag bags basket baskets bottle bottles cup cups glass glasses page pages mile miles "
    "meter meters kilogram kilograms pound pounds liter liters gallon gallons piece pieces slice slices number "
    "numbers answer question problem step think final output let us first next last new old big small large "
    "long short high low fast slow early late morning afternoon evening night today tomorrow yesterday Monday "
    "Tuesday Wednesday Thursday Friday Saturday Sunday January February March April May June July August "
    "September October November December farm farmer cow cows chicken chickens dog dogs cat cats fish bird birds "
    "tree trees garden car cars bus train ticket tickets pizza cake pie sandwich water milk juice coffee tea "
    "rate speed distance time work worker workers job company hundred thousand million percent percentage "
    "average sum difference product equal equals remaining rest other another same different only also just "
    "still already again together alone whole part parts group groups team teams game games point points score "
    "scores win wins won lose loses lost play plays played movie movies song songs house houses room rooms "
    "floor floors wall walls door doors window windows table tables chair chairs bed beds shirt shirts shoe shoes "
    "Qwen created Alibaba Cloud helpful assistant system user"
).split()


def builtin_corpus(n_problems: int = 3000, seed: int = 1234) -> List[str]:
    """The tokenizer's training text: generated word problems (questions and answers with ``<<a+b=c>>`` and
    ``#### N``), verl's GSM8K instruction, the default system prompt, number lists and plain English word runs.
    Deterministic."""

    rng = random.Random(f"verlfit-tokenizer-corpus:{seed}")
    lines: List[str] = list(synthetic_gsm8k.iter_corpus_lines(n_problems, seed=seed))
    instruction = 'Let\'s think step by step and output the final answer after "####".'
    lines += [instruction, DEFAULT_SYSTEM_PROMPT, "system\n" + DEFAULT_SYSTEM_PROMPT] * 200
    lines += ["user\n" + q + " " + instruction for q in lines[0:400:2]]
    lines += ["assistant\n" + a for a in lines[1:400:2]]
    for _ in range(2000):
        lines.append(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 18))).capitalize() + ".")
    for _ in range(500):
        lines.append(" ".join(f"{rng.randint(0, 10 ** rng.randint(1, 7)):,}" for _ in range(8)))
        lines.append(
            f"${rng.randint(1, 999)}.{rng.randint(0, 99):02d} and {rng.randint(1, 100)}% of "
            f"{rng.randint(1, 5000)} is {rng.randint(1, 5000)}."
        )
    return lines


def _build_tokenizer(texts: Iterable[str], vocab_size: int):
    # lazy: only where a tokenizer is trained or loaded
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.post_processor = None
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),  # the specials are appended after the BPE vocabulary
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(list(texts), trainer=trainer)
    from tokenizers import AddedToken  # lazy: only where a tokenizer is trained or loaded

    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def train_tokenizer(
    output_dir: str,
    texts: Optional[Iterable[str]] = None,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    model_max_length: int = 131072,
):
    """Train a Qwen2.5-style byte-level BPE tokenizer on ``texts`` (default: ``builtin_corpus()``), save it in
    ``output_dir`` and return the loaded ``PreTrainedTokenizerFast`` (a ``Qwen2TokenizerFast``).

    ``vocab_size`` counts the three special tokens; the BPE vocabulary may end smaller when the corpus runs out
    of merges. Special ids: ``<|endoftext|>`` = n, ``<|im_start|>`` = n+1, ``<|im_end|>`` = n+2 (n = BPE size).
    """
    # lazy: imports torch; only where a model or tokenizer is loaded
    from transformers import AutoTokenizer, Qwen2TokenizerFast

    if vocab_size > QWEN_VOCAB_ROWS:
        raise ValueError(f"vocab_size {vocab_size} > {QWEN_VOCAB_ROWS}: ids must fit the Qwen2.5 embedding")
    os.makedirs(output_dir, exist_ok=True)
    raw = _build_tokenizer(builtin_corpus() if texts is None else texts, vocab_size)
    hf = Qwen2TokenizerFast(
        tokenizer_object=raw,
        unk_token=None,
        bos_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        errors="replace",
        split_special_tokens=False,
        add_prefix_space=False,
    )
    hf.chat_template = QWEN25_CHAT_TEMPLATE
    hf.save_pretrained(output_dir)
    # vocab.json + merges.txt: lets the slow Qwen2Tokenizer load too, as with the real checkpoints.
    raw.model.save(output_dir)
    _normalize_tokenizer_config(output_dir)
    return AutoTokenizer.from_pretrained(output_dir)


def _normalize_tokenizer_config(output_dir: str) -> None:
    """Make tokenizer_config.json Qwen2.5-like and stable (sorted keys, class name of the real checkpoints)."""
    path = os.path.join(output_dir, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    cfg["tokenizer_class"] = "Qwen2Tokenizer"
    cfg["add_bos_token"] = False
    cfg["bos_token"] = None
    cfg["unk_token"] = None
    cfg["errors"] = "replace"
    cfg["chat_template"] = QWEN25_CHAT_TEMPLATE
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False, sort_keys=True)
        f.write("\n")


def read_corpus_jsonl(paths: Iterable[str]) -> List[str]:
    """``builtin_corpus()`` plus the ``question`` and ``answer`` of every row of the JSON-lines files ``paths``
    (extra tokenizer training text, e.g. the real GSM8K's train.jsonl); blank lines are skipped.

    Raises:
        OSError: a file cannot be read. json.JSONDecodeError: a line is not JSON.
    """
    texts = builtin_corpus()
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    row = json.loads(line)
                    texts += [row.get("question", ""), row.get("answer", "")]
    return texts


def special_ids(tokenizer) -> dict:
    """``{token: id}`` of ``SPECIAL_TOKENS`` in ``tokenizer``.

    Raises:
        ValueError: a special token is missing or its id does not fit Qwen2.5's 151936 embedding rows.
    """
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    for t, i in ids.items():
        if i is None or i == tokenizer.unk_token_id:
            raise ValueError(f"tokenizer lacks {t}")
        if i >= QWEN_VOCAB_ROWS:
            raise ValueError(f"{t} has id {i} >= {QWEN_VOCAB_ROWS}")
    return ids


def model_config(shape: str, tokenizer, dtype: Optional[str] = None, no_eos: bool = False):
    """The config (``Qwen2Config``, or the ``Qwen3Config`` / ``LlamaConfig`` of those shapes) for ``shape`` with bos/eos
    ids taken from ``tokenizer``; ``no_eos``: without ``eos_token_id`` (None, as a config made without one)."""
    import transformers  # lazy: imports torch; only where a model or tokenizer is loaded

    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r}; choose from {sorted(SHAPES)}")
    kw = dict(SHAPES[shape])
    config_class, model_class = FAMILIES[kw.pop("model_type", "qwen2")]
    ids = special_ids(tokenizer)
    if kw["vocab_size"] is None:
        kw["vocab_size"] = len(tokenizer)
    if max(ids.values()) >= kw["vocab_size"]:
        raise ValueError(f"special token ids {ids} do not fit vocab_size {kw['vocab_size']}")
    dtype = dtype or DEFAULT_DTYPE[shape]
    cfg = getattr(transformers, config_class)(
        bos_token_id=ids[ENDOFTEXT],
        eos_token_id=None if no_eos else ids[IM_END],
        torch_dtype=dtype,
        architectures=[model_class],
        **kw,
    )
    return cfg


def make_model(
    output_dir: str,
    shape: str = "qwen2.5-0.5b",
    tokenizer_dir: Optional[str] = None,
    seed: int = 0,
    dtype: Optional[str] = None,
    generation_sampling_defaults: bool = False,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    no_eos: bool = False,
    device: Optional[str] = None,
) -> str:
    """Write a random-weight ``Qwen2ForCausalLM`` (``Qwen3ForCausalLM``, ``LlamaForCausalLM`` for those shapes) of
    ``shape`` with the tokenizer files to ``output_dir``.

    ``tokenizer_dir``: a directory made by ``train_tokenizer`` (its files are copied); if None, a tokenizer is
    trained into ``output_dir`` (``vocab_size``). ``dtype``: the saved weights' dtype (default bfloat16 for
    qwen2.5-0.5b as the real checkpoint, float32 otherwise). ``generation_sampling_defaults``: write
    Qwen2.5-Instruct's sampling fields into generation_config.json (``SAMPLING_DEFAULTS``). ``no_eos``: neither
    config.json nor generation_config.json has ``eos_token_id`` or ``pad_token_id`` (the tokenizer keeps
    ``<|im_end|>`` and ``<|endoftext|>``): what transformers 4.51.3 writes for a model made from a config without
    them, e.g. a random Qwen3 (issue 29); verl then gives the rollout no EOS id and no pad id. ``device``: where the
    weights are drawn (a torch device name; default the CPU): ``cuda`` draws a 14B's in seconds where the CPU takes
    minutes, with other values than the CPU's (each device deterministic for a seed). Returns output_dir.
    """
    import torch  # lazy: seconds to import; only where tensors are made
    import transformers  # lazy: imports torch; only where a model or tokenizer is loaded

    # lazy: imports torch; only where a model or tokenizer is loaded
    from transformers import AutoTokenizer, GenerationConfig

    os.makedirs(output_dir, exist_ok=True)
    if tokenizer_dir is None:
        tokenizer = train_tokenizer(output_dir, vocab_size=vocab_size)
    else:
        if os.path.abspath(tokenizer_dir) != os.path.abspath(output_dir):
            for name in TOKENIZER_FILES + ["added_tokens.json"]:
                src = os.path.join(tokenizer_dir, name)
                if os.path.exists(src):
                    shutil.copyfile(src, os.path.join(output_dir, name))
        tokenizer = AutoTokenizer.from_pretrained(output_dir)

    cfg = model_config(shape, tokenizer, dtype, no_eos=no_eos)
    torch_dtype = getattr(
        torch, cfg.torch_dtype if isinstance(cfg.torch_dtype, str) else str(cfg.torch_dtype).replace("torch.", "")
    )
    torch.manual_seed(seed)
    with torch.no_grad(), torch.device(device or "cpu"):
        model = getattr(transformers, FAMILIES[cfg.model_type][1])(cfg)
    model = model.to(torch_dtype)
    model.config.torch_dtype = torch_dtype

    ids = special_ids(tokenizer)
    gen = dict(bos_token_id=ids[ENDOFTEXT], eos_token_id=[ids[IM_END], ids[ENDOFTEXT]], pad_token_id=ids[ENDOFTEXT])
    if no_eos:
        del gen["eos_token_id"], gen["pad_token_id"]
    if generation_sampling_defaults:
        gen.update(SAMPLING_DEFAULTS)
    model.generation_config = GenerationConfig(**gen)
    model.save_pretrained(output_dir, safe_serialization=True)
    _strip_generation_config(output_dir, gen)
    return output_dir


def _strip_generation_config(output_dir: str, wanted: dict) -> None:
    """Rewrite generation_config.json with exactly ``wanted`` (plus transformers_version), so no default sampling
    field sneaks in."""
    import transformers  # lazy: imports torch; only where a model or tokenizer is loaded

    path = os.path.join(output_dir, "generation_config.json")
    out = dict(wanted)
    out["transformers_version"] = transformers.__version__
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(out, f, indent=2, sort_keys=True)
        f.write("\n")
