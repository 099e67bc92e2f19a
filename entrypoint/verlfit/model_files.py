"""Does a local model directory hold what verl loads from it? A config, weights whose headers the
``safetensors`` library reads and whose sizes fit the config, and a tokenizer.

verl 0.4.1 loads the actor, reference and critic with ``from_pretrained(local_path)`` and the tokenizer with
``AutoTokenizer`` (``verl/utils/fs.py`` ``copy_to_local``, ``fsdp_workers.py``): a directory that lacks any of
them fails minutes into a run, inside a Ray worker. :func:`inspect_model_dir` finds that out in milliseconds
(safetensors headers only: no tensor is read).

Weights, in the order transformers 4.51 looks for them (``modeling_utils.py``, ``_get_resolved_checkpoint_files``):
``model.safetensors.index.json`` with its shards, ``model.safetensors``, ``pytorch_model.bin.index.json`` with its
shards, ``pytorch_model.bin``. A file that is a Git LFS pointer (a clone made without ``git lfs``: a text of about
130 bytes starting ``version https://git-lfs.github.com/spec/v1``, the LFS specification's first line) is named as such.

Tokenizer: ``AutoTokenizer`` builds a fast tokenizer from ``tokenizer.json``, or converts it from the slow
tokenizer's files: ``vocab.json`` + ``merges.txt`` (byte-level BPE: Qwen2, GPT-2), ``tokenizer.model``
(SentencePiece: Llama, Mistral) or ``vocab.txt`` (WordPiece).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from verlfit.errors import VerlfitError
from verlfit.model_shape import KNOWN_MODEL_TYPES, load_model_shape

LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/v1"  # Git LFS specification, "The pointer"
TOKENIZER_FILE_SETS = (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",), ("vocab.txt",))
# stored parameters may exceed the config's count by a tied lm_head saved anyway and by small buffers
# (older checkpoints keep rotary inv_freq); 5% either side is "within reason" for those, far below the
# gap of a wrong or half-copied model
PARAMETER_TOLERANCE = 0.05


@dataclass(frozen=True)
class ModelFiles:
    """What :func:`inspect_model_dir` found.

    Attributes:
        weights: the weight files, in load order (shards in index order).
        tensors: tensors in the safetensors headers (None for pickle ``.bin`` weights, which are not opened).
        parameters: elements of those tensors (None for ``.bin``).
        expected_parameters: the actor's parameter count from ``config.json`` (:mod:`verlfit.model_shape`),
            None for a model type whose layout it does not count.
        tokenizer: the tokenizer files that ``AutoTokenizer`` will use.
    """

    weights: tuple[str, ...]
    tensors: int | None
    parameters: int | None
    expected_parameters: int | None
    tokenizer: tuple[str, ...]

    def describe(self) -> str:
        weights = self.weights[0] if len(self.weights) == 1 else f"{len(self.weights)} shards ({self.weights[0]} ..)"
        if self.parameters is None:
            counted = "pickle weights: not opened"
        else:
            counted = f"{self.tensors} tensors, {self.parameters:,} parameters" + (
                f"; config.json: {self.expected_parameters:,}" if self.expected_parameters is not None else ""
            )
        return f"config.json, weights {weights} ({counted}), tokenizer {' + '.join(self.tokenizer)}"


def is_lfs_pointer(path: Path) -> bool:
    """Whether ``path`` is a Git LFS pointer file instead of the content it stands for."""
    with open(path, "rb") as handle:
        return handle.read(len(LFS_POINTER_PREFIX)) == LFS_POINTER_PREFIX


def _lfs_error(directory: Path, files: list[Path]) -> VerlfitError:
    names = ", ".join(path.name for path in files)
    return VerlfitError(
        f"{directory}: {names} {'is a Git LFS pointer' if len(files) == 1 else 'are Git LFS pointers'} (a small "
        "text file), not the content: the clone was made without git lfs",
        fix=f"run `git lfs pull` in {directory} (install git-lfs first), or download the model with huggingface-cli "
        f"download MODEL --local-dir {directory}",
        exit_code=2,
    )


def _safetensors_header(path: Path) -> tuple[int, int]:
    """(tensors, elements) of one safetensors file, from its header (the library checks the header covers the file)."""
    from safetensors import SafetensorError, safe_open  # lazy: only where weights are read or written

    try:
        with safe_open(str(path), framework="np") as handle:
            shapes = [handle.get_slice(name).get_shape() for name in handle.keys()]
    except (SafetensorError, OSError) as error:
        raise VerlfitError(
            f"{path} is not a readable safetensors file: {error}",
            fix=f"download {path.name} again (a copy that stopped early is cut short)",
            exit_code=2,
        ) from None
    elements = 0
    for shape in shapes:
        count = 1
        for size in shape:
            count *= size
        elements += count
    return len(shapes), elements


def _shards(directory: Path, index_name: str) -> list[Path]:
    index = directory / index_name
    if is_lfs_pointer(index):
        raise _lfs_error(directory, [index])
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        shards = list(dict.fromkeys(weight_map.values()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as error:
        raise VerlfitError(
            f"{index} is not a weight index (a JSON object with a weight_map): {type(error).__name__}: {error}",
            fix=f"download {index_name} again",
            exit_code=2,
        ) from None
    if not shards or not all(isinstance(name, str) for name in shards):
        raise VerlfitError(f"{index}: weight_map names no shard files", fix=f"download {index_name} again", exit_code=2)
    missing = [name for name in shards if not (directory / name).is_file()]
    if missing:
        raise VerlfitError(
            f"{directory}: {index_name} names {len(shards)} weight shard{'s' if len(shards) > 1 else ''}; "
            f"missing: {', '.join(missing)}",
            fix="copy every shard listed in the index into the directory "
            "(huggingface-cli download MODEL --local-dir DIR)",
            exit_code=2,
        )
    return [directory / name for name in shards]


def _weight_files(directory: Path) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (directory / index_name).is_file():
            return _shards(directory, index_name)
        single = directory / index_name.replace(".index.json", "")
        if single.is_file():
            return [single]
    others = sorted(path.name for path in directory.glob("*.safetensors"))
    hint = (
        f" (found {', '.join(others)}, but no model.safetensors.index.json to say which are the model's)"
        if others
        else ""
    )
    raise VerlfitError(
        f"{directory} has no weights: neither model.safetensors, model.safetensors.index.json with its shards, "
        f"nor pytorch_model.bin{hint}",
        fix="copy the model's weight files next to config.json "
        f"(huggingface-cli download MODEL --local-dir {directory}), or pass --model a complete model directory",
        exit_code=2,
    )


def _counted_shape(directory: Path):
    """The :class:`verlfit.model_shape.ModelShape` of ``directory``'s config.json when its layout is one
    :mod:`verlfit.model_shape` counts exactly, else None (no count to hold the weights against)."""

    try:
        shape = load_model_shape(str(directory))
    except VerlfitError:
        return None  # another layout (GPT-2's n_layer, ...)
    return shape if shape.model_type in KNOWN_MODEL_TYPES else None


def _tokenizer_files(directory: Path) -> tuple[str, ...]:
    for names in TOKENIZER_FILE_SETS:
        if all((directory / name).is_file() for name in names):
            pointers = [directory / name for name in names if is_lfs_pointer(directory / name)]
            if pointers:
                raise _lfs_error(directory, pointers)
            return names
    raise VerlfitError(
        f"{directory} has no tokenizer: AutoTokenizer needs tokenizer.json, or vocab.json + merges.txt, or "
        "tokenizer.model (or vocab.txt)",
        fix=f"copy the tokenizer files of the model's repository into {directory} "
        "(tokenizer.save_pretrained(DIR) writes them)",
        exit_code=2,
    )


def inspect_model_dir(directory: str | Path) -> ModelFiles:
    """Check that ``directory`` holds a model verl can load, and say what it holds.

    Raises:
        VerlfitError: naming the directory and what is missing or broken: no ``config.json`` or an unreadable one;
            no weights; a shard named by the index that is absent; a Git LFS pointer instead of a file (fix:
            ``git lfs pull``); a safetensors file whose header does not read or does not cover the file; weights
            whose element count is outside :data:`PARAMETER_TOLERANCE` of the config's parameter count (between the
            count with the embedding tied and untied); no tokenizer files.
    """
    directory = Path(directory)
    config = directory / "config.json"
    if not config.is_file():
        raise VerlfitError(
            f"{directory} exists but has no config.json",
            fix="point --model at a Hugging Face model directory (config.json, weights, tokenizer)",
            exit_code=2,
        )
    if is_lfs_pointer(config):
        raise _lfs_error(directory, [config])
    try:
        json.loads(config.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise VerlfitError(
            f"{config} is not valid JSON: {error}", fix="download config.json again", exit_code=2
        ) from None
    weights = _weight_files(directory)
    pointers = [path for path in weights if is_lfs_pointer(path)]
    if pointers:
        raise _lfs_error(directory, pointers)
    shape = _counted_shape(directory)
    expected = shape.actor_parameters if shape is not None else None
    tensors = parameters = None
    if all(path.suffix == ".safetensors" for path in weights):
        tensors = parameters = 0
        for path in weights:
            count, elements = _safetensors_header(path)
            tensors, parameters = tensors + count, parameters + elements
        if shape is not None:
            untied = shape.actor_parameters + (shape.embedding_parameters if shape.tie_word_embeddings else 0)
            low, high = expected * (1 - PARAMETER_TOLERANCE), untied * (1 + PARAMETER_TOLERANCE)
            if not low <= parameters <= high:
                raise VerlfitError(
                    f"{directory}: the weights hold {parameters:,} parameters in {tensors} tensors, but config.json "
                    f"describes a {shape.model_type} of {expected:,}: the weights are incomplete or belong to another "
                    "model",
                    fix="download the model again so that config.json and the weights come from the same repository",
                    exit_code=2,
                )
    tokenizer = _tokenizer_files(directory)
    return ModelFiles(tuple(path.name for path in weights), tensors, parameters, expected, tokenizer)
