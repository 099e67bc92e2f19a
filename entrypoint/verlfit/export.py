"""``verlfit export RUN_DIR``: a checkpoint of a run as a Hugging Face model directory.

verl 0.4.1 saves a checkpoint of step N as (``ray_trainer.py:806-839``, ``fsdp_checkpoint_manager.py:159-305``)::

    RUN_DIR/checkpoints/
      global_step_N/
        actor/  model_world_size_W_rank_R.pt   one FSDP SHARDED_STATE_DICT per rank R < W (DTensor shards)
                optim_world_size_W_rank_R.pt   extra_state_world_size_W_rank_R.pt
                fsdp_config.json               {"FSDP_version": 1, "world_size": W}   (written by rank 0)
                huggingface/                   config.json, tokenizer files, generation_config.json when the
                                               model had one (no weights unless checkpoint.save_contents has hf_model)
        critic/ the same for the critic (PPO only)
        data.pt                                the dataloader state, written after actor and critic
      latest_checkpointed_iteration.txt        N, written last (ray_trainer.py:837-839)

so a checkpoint is complete when its step is at most the step in ``latest_checkpointed_iteration.txt`` (verl
writes the marker only after the whole save, and saves one step at a time) and its files are all there: a
``global_step_N`` above the marker, or without ``data.pt``, a rank's shard or ``fsdp_config.json``, was cut off
mid-save (Ctrl-C, a full disk, a killed container).

The weights are merged by verl's own merger (``verl/model_merger``, what ``python -m verl.model_merger merge
--backend fsdp --local_dir .../actor --target_dir OUT`` runs): its ``FSDPModelMerger`` reads the world size from
``fsdp_config.json``, loads every rank's shard and joins the DTensor shards by their placement. What verlfit adds,
because the merger as shipped does not do it:

* the dtype: the merger casts every tensor to bfloat16 (``fsdp_model_merger.py`` ``_load_and_merge_state_dicts``),
  which rounds the fp32 weights a P40 run trained (verl keeps fp32 master weights under FSDP mixed precision on
  both profiles) to 8 bits of mantissa. verlfit keeps the checkpoint's dtype unless ``--dtype`` asks otherwise: for a
  LoRA base stored in 16 bits (patch 0026) the base's, the adapter merged into it in fp32 and the sum cast once; an
  adapter written alone (``--adapter-only``) stays fp32;
* LoRA: the merger writes ``lora_adapter/`` with ``lora_alpha: 0`` ("not set", ``base_model_merger.py``
  ``save_lora_adapter``) beside the *unmerged* base weights. verlfit takes ``lora_alpha`` from the run's
  ``config.yaml`` (``--lora-alpha`` where it has none; a differing one is refused) and either merges the adapter
  into the base with PEFT (``merge_and_unload``, the default) or writes a PEFT adapter directory
  (``--adapter-only``); a base stored in NF4 (patch 0028) is dequantised first, from the packed weights and the
  quantisation constants the patch saves beside the shards (:func:`dequantised_nf4`), so the adapter is merged into
  the base it was trained on;
* the critic: its ``huggingface/config.json`` names the actor's ``*ForCausalLM`` architecture (verl saves the
  config it loaded, ``fsdp_workers.py:910``), so the merger would build the wrong class; verlfit builds
  ``AutoModelForTokenClassification`` (``num_labels=1``, verl's value model) when the weights have a ``score`` head;
* the checks above (complete checkpoint, step) and the write policy of :mod:`verlfit.output_files`: the model
  folder is built beside the output and switched in when complete; never over the run directory, a folder holding
  it, files verlfit did not write or the current directory; an earlier export there is replaced by a re-run of
  the same export, or with ``--force``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import re
import shutil
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from verlfit import output_files
from verlfit.checkpoints import TRACKER, read_marker, saved_steps
from verlfit.checks.stack import require
from verlfit.errors import VerlfitError, os_error_words
from verlfit.run_files import CHECKPOINTS_DIR, CONFIG_FILE, is_run_directory, load_run

EXPORT_DIR = "export"  # default output: RUN_DIR/export/global_step_N
DTYPES = {"float32": 4, "bfloat16": 2, "float16": 2}  # bytes per parameter
_SHARD = re.compile(r"model_world_size_(\d+)_rank_(\d+)\.pt")

# Known messages that bury export's and eval's result lines, all harmless here; silenced by exact message, nothing
# broader:
# - torch/distributed/device_mesh.py:396 (logger.warning, torch 2.6/2.7): every shard verl saved pickles its
#   DeviceMesh, and unpickling it outside the training process groups logs this once per shard;
# - verl/__init__.py:18 `import pkg_resources` (setuptools' UserWarning, once per process);
# - transformers' Qwen2/Qwen3 decoder layers (modeling_qwen2.py:240, logger.warning_once) when the config has a
#   sliding_window and the attention is not flash_attention_2 (Qwen2.5's config.json sets sliding_window while
#   use_sliding_window is false, so the window is never used).
NOISY_LOGS = (
    (
        "torch.distributed.device_mesh",
        r"It seems like pickling/unpickling of the DeviceMesh occurred before the PGs were created",
    ),
    *(
        (f"transformers.models.{name}.modeling_{name}", r"Sliding Window Attention is enabled but not implemented for")
        for name in ("qwen2", "qwen3", "qwen2_vl", "qwen2_5_vl")
    ),
)
NOISY_WARNINGS = (
    (UserWarning, r"pkg_resources is deprecated as an API"),
    # bitsandbytes 0.48's CPU dequantisation (an NF4 base, patch 0028) on torch >= 2.7
    (FutureWarning, r"_check_is_size will be removed"),
)


class _DropMessage(logging.Filter):
    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


@contextmanager
def quiet_known_warnings() -> Iterator[None]:
    """While inside, the messages of :data:`NOISY_LOGS` (logging records of those loggers whose message starts
    with the pattern) and :data:`NOISY_WARNINGS` (``warnings.filterwarnings`` by category and message) are
    dropped; every other log record and warning passes. Restored on the way out."""
    added = []
    with warnings.catch_warnings():
        for category, message in NOISY_WARNINGS:
            warnings.filterwarnings("ignore", message=message, category=category)
        for name, pattern in NOISY_LOGS:
            logger, drop = logging.getLogger(name), _DropMessage(pattern)
            logger.addFilter(drop)
            added.append((logger, drop))
        try:
            yield
        finally:
            for logger, drop in added:
                logger.removeFilter(drop)


@dataclass(frozen=True)
class Checkpoint:
    """One complete verl checkpoint: ``path`` is ``RUN_DIR/checkpoints/global_step_<step>``."""

    run_dir: Path
    step: int
    path: Path
    world_size: int
    has_critic: bool

    def role_dir(self, role: str) -> Path:
        return self.path / role


def _missing_files(role_dir: Path) -> tuple[int | None, list[str]]:
    """(world size, files of one role's checkpoint that are missing)."""
    missing = []
    world_size = None
    config = role_dir / "fsdp_config.json"
    try:
        world_size = int(json.loads(config.read_text())["world_size"])
    except FileNotFoundError:
        missing.append("fsdp_config.json")
    except (OSError, ValueError, KeyError, TypeError):
        missing.append("fsdp_config.json (unreadable)")
    if world_size is None:
        shards = [
            int(m.group(1)) for m in map(_SHARD.fullmatch, os.listdir(role_dir) if role_dir.is_dir() else []) if m
        ]
        world_size = max(shards) if shards else None
    if world_size is not None:
        missing += [
            f"model_world_size_{world_size}_rank_{rank}.pt"
            for rank in range(world_size)
            if not (role_dir / f"model_world_size_{world_size}_rank_{rank}.pt").is_file()
        ]
    else:
        missing.append("model_world_size_W_rank_R.pt")
    if not (role_dir / "huggingface" / "config.json").is_file():
        missing.append("huggingface/config.json")
    return world_size, missing


def _step_missing(path: Path) -> tuple[int | None, bool, list[str]]:
    """(actor world size, whether a critic was saved, the files missing) of the checkpoint directory ``path``."""
    world_size, missing = _missing_files(path / "actor")
    has_critic = (path / "critic").is_dir()
    if has_critic:
        missing += [f"critic/{name}" for name in _missing_files(path / "critic")[1]]
    missing = [m if m.startswith("critic/") else f"actor/{m}" for m in missing]
    if not (path / "data.pt").is_file():
        missing.append("data.pt")
    return world_size, has_critic, missing


def complete_steps(root: Path, steps: list[int], marker: int | None) -> list[int]:
    """The steps of ``steps`` that can be exported: at or below verl's marker and with no file missing."""
    return [s for s in steps if marker is not None and s <= marker and not _step_missing(root / f"global_step_{s}")[2]]


def _marker_state(root: Path) -> str:
    """Why :func:`verlfit.checkpoints.read_marker` gave no step: the marker is missing, or holds no step number."""
    return "holds no step number" if (root / TRACKER).exists() else "is missing"


def _step_names(steps: list[int]) -> str:
    return ", ".join(f"global_step_{s}" for s in steps)


def _choose_fix(complete: list[int], run_dir: Path, marker: int | None = 0) -> str:
    """``marker`` None (verl's marker missing or naming no step): ``verlfit train --resume`` refuses such a run too
    (:func:`verlfit.train.run_directory.resume_plan`: verl would start again from step 0), so the fix is not a
    resume."""
    if complete:
        return f"pass --step with one of the complete steps: {_step_names(complete)}"
    if marker is None:
        return (
            "no step is complete, and without verl's marker `verlfit train --resume` refuses the run too (verl would "
            "start again from step 0): start a new run with another --run-dir"
        )
    return f"no step is complete: resume the run to save one (verlfit train --resume {run_dir})"


def parse_step(text: str) -> int | str:
    """``"latest"``, or the step number of ``"N"`` or ``"global_step_N"`` (the checkpoint directory's name).

    Raises:
        ValueError: anything else.
    """
    if text == "latest":
        return text
    number = text[len("global_step_") :] if text.startswith("global_step_") else text
    if not number.isdigit():
        raise ValueError(f"{text!r}: a step number (N or global_step_N) or latest")
    return int(number)


def find_checkpoint(run_dir: str | os.PathLike, step: int | str = "latest") -> Checkpoint:
    """The complete checkpoint of ``run_dir`` at ``step`` (a whole number, ``"global_step_N"``, or ``"latest"``: the
    marker's step).

    Raises:
        VerlfitError: ``run_dir`` is not a directory; it has no checkpoint; the checkpoint is incomplete (above
            verl's marker, or files missing); ``step`` was not saved (or was pruned by ``--keep-checkpoints``) or is
            above the marker (exit status 2, naming the complete steps).
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise VerlfitError(
            f"{run_dir} is not a directory; pass a run directory made by verlfit train",
            fix="verlfit export runs/<name>",
            exit_code=2,
        )
    if isinstance(step, str):
        try:
            step = parse_step(step)
        except ValueError as error:
            raise VerlfitError(f"--step {error}", fix="pass --step N, global_step_N or latest", exit_code=2) from None
    root = run_dir / CHECKPOINTS_DIR
    steps = saved_steps(root)
    marker = read_marker(root)
    if not steps:
        if not root.is_dir() and (run_dir / "config.json").is_file():
            raise VerlfitError(
                f"{run_dir} is a model folder (config.json), not a run directory: it is in Hugging Face's format "
                "already, with nothing to export",
                fix=f"use it as it is (verlfit eval {run_dir}, or verlfit train --model {run_dir}); verlfit export "
                "takes a run directory made by verlfit train",
                exit_code=2,
            )
        if not root.is_dir() and not is_run_directory(run_dir):
            raise VerlfitError(
                f"{run_dir} is not a run directory: it has no {CHECKPOINTS_DIR}/ folder and no run record",
                fix="pass verlfit export the directory verlfit train created, e.g. verlfit export runs/<name>",
                exit_code=2,
            )
        raise VerlfitError(
            f"{run_dir} has no checkpoint ({root} holds no global_step_N directory)",
            fix="train with --save-freq N (verl saves every N steps and at the last step; -1 saves none)",
            exit_code=2,
        )
    complete = complete_steps(root, steps, marker)
    # verl's marker there but damaged (text that is no step): which save finished is unknown, so a step counts as
    # complete when every file of it is there (a shard cut short is then named when it is read: load_shard)
    damaged_marker = marker is None and (root / TRACKER).exists()
    if damaged_marker:
        complete = [s for s in steps if not _step_missing(root / f"global_step_{s}")[2]]
    if step == "latest":
        if damaged_marker:
            raise VerlfitError(
                f"{root / TRACKER} (verl's marker, written after a checkpoint is saved) holds no step number, so "
                f"which checkpoint is the latest is unknown; saved: {_step_names(steps)}"
                + (f" ({_step_names(complete)} with every file)" if complete else " (none with every file)"),
                fix=_choose_fix(complete, run_dir, marker),
                exit_code=2,
            )
        if marker is None:
            raise VerlfitError(
                f"{run_dir} has no complete checkpoint: {root / TRACKER} (verl's marker, written after a "
                f"checkpoint is saved) {_marker_state(root)}; {_step_names(steps)} "
                f"{'was' if len(steps) == 1 else 'were'} cut off mid-save",
                fix=_choose_fix([], run_dir, marker),
                exit_code=2,
            )
        step = marker
    elif step not in steps:
        raise VerlfitError(
            f"{run_dir} has no checkpoint of step {step}; saved: {_step_names(steps)}"
            + (f" (complete: {', '.join(map(str, complete))})" if complete else " (none complete)"),
            fix=_choose_fix(complete, run_dir, marker),
            exit_code=2,
        )
    path = root / f"global_step_{step}"
    if (marker is None and not damaged_marker) or (marker is not None and step > marker):
        said = _marker_state(root) if marker is None else f"says step {marker}"
        raise VerlfitError(
            f"{path} is incomplete: verl's marker {root / TRACKER} {said}, so the save of step {step} did not finish",
            fix=_choose_fix(complete, run_dir, marker) + (", or resume the run" if complete else ""),
            exit_code=2,
        )
    world_size, has_critic, missing = _step_missing(path)
    if missing:
        others = [s for s in complete if s != step]
        raise VerlfitError(
            f"{path} is incomplete: missing {', '.join(missing)}",
            fix=(_choose_fix(others, run_dir) + ", or resume the run to save a new checkpoint")
            if others
            else _choose_fix([], run_dir),
            exit_code=2,
        )
    return Checkpoint(run_dir=run_dir, step=step, path=path, world_size=world_size, has_critic=has_critic)


def load_shard(path: Path, map_location="cpu", fix: str | None = None) -> dict:
    """``torch.load`` of one verl shard (``weights_only=False``: it holds DTensors and their DeviceMesh).

    Raises:
        VerlfitError: the file is truncated or not a torch checkpoint (torch raises OSError, RuntimeError,
            pickle.UnpicklingError or EOFError for those), naming ``path``; ``fix`` is the advice given.
    """
    import torch  # lazy: seconds to import; only where tensors are made

    try:
        return torch.load(path, map_location=map_location, weights_only=False)
    except (OSError, RuntimeError, pickle.UnpicklingError, EOFError, ValueError) as error:
        raise VerlfitError(
            f"cannot read the shard {path} ({type(error).__name__}: {error}): the file is damaged (truncated or not "
            "a torch checkpoint)",
            fix=fix or "export another checkpoint of the run (--step N)",
            exit_code=2,
        ) from error


def older_steps_fix(checkpoint: "Checkpoint") -> str:
    """The advice for a damaged checkpoint: the other complete steps of its run to pass as ``--step N``."""
    root = checkpoint.run_dir / CHECKPOINTS_DIR
    marker = read_marker(root)
    others = [s for s in complete_steps(root, saved_steps(root), marker) if s != checkpoint.step]
    if others:
        return f"export another complete checkpoint with --step: {_step_names(others)}"
    return (
        f"no other checkpoint is saved (only global_step {checkpoint.step}): resume the run "
        f"(verlfit train --resume {checkpoint.run_dir}) to save a new one"
    )


def merged_state_dict(role_dir: Path, dtype=None, fix: str | None = None) -> dict:
    """The full state dict of one role's FSDP checkpoint, merged by verl's ``FSDPModelMerger``.

    Same as ``python -m verl.model_merger merge --backend fsdp --local_dir ROLE_DIR``'s merge, but the tensors keep
    their dtype (the merger casts to bfloat16) or are cast to ``dtype``. Keys are the module's own (``model.*``,
    ``lm_head.weight``; ``base_model.model.*`` with ``lora_A/lora_B.default.weight`` for a LoRA run).

    Raises:
        VerlfitError: a damaged shard (:func:`load_shard`, with ``fix``); a mesh that is not plain FSDP.
    """
    import torch  # lazy: seconds to import; only where tensors are made
    from torch.distributed.tensor import DTensor  # lazy: seconds to import; only where tensors are made

    # lazy: imports torch; only where verl's own config or scorers are read
    from verl.model_merger.base_model_merger import ModelMergerConfig

    # lazy: imports torch; only where verl's own config or scorers are read
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    config = ModelMergerConfig(
        operation="merge",
        backend="fsdp",
        local_dir=str(role_dir),
        target_dir=None,
        hf_model_config_path=str(role_dir / "huggingface"),
    )
    merger = FSDPModelMerger(config)
    world_size = merger._get_world_size()
    shards = [
        load_shard(role_dir / f"model_world_size_{world_size}_rank_{rank}.pt", "cpu", fix) for rank in range(world_size)
    ]
    mesh, mesh_dim_names = merger._extract_device_mesh_info(shards[0], world_size)
    total_shards, mesh_shape = merger._calculate_shard_configuration(mesh, mesh_dim_names)
    if total_shards != world_size or len(mesh_shape) != 1:
        raise VerlfitError(
            f"{role_dir}: a device mesh of {mesh_shape} ({mesh_dim_names}) is not a plain FSDP checkpoint",
            fix="merge it with python -m verl.model_merger merge --backend fsdp",
            exit_code=2,
        )
    merged = {}
    for key in sorted(shards[0]):
        parts = [shard.pop(key) for shard in shards]
        if isinstance(parts[0], DTensor):
            placements = tuple(parts[0].placements)
            if mesh_dim_names[0] in ("dp", "ddp"):
                placements = placements[1:]
            tensor = merger._merge_by_placement([p._local_tensor for p in parts], placements[0])
        else:
            tensor = torch.cat(parts, dim=0)  # verl's rule for plain tensors
        merged[key] = tensor if dtype is None else tensor.to(dtype)
    return merged


def split_lora(state_dict: dict) -> tuple[dict, dict, int, list[str]]:
    """(base state dict, adapter state dict in PEFT's saved form, rank r, target module names).

    Key mapping as verl's ``save_lora_adapter`` (``base_model_merger.py``): ``.lora_A.default.weight`` ->
    ``.lora_A.weight`` for the adapter; ``base_model.model.`` and ``.base_layer`` dropped for the base.
    """
    adapter, base, targets, rank = {}, {}, set(), None
    for name, tensor in state_dict.items():
        if "lora_" in name:
            key = name.replace(".default.weight", ".weight")
            adapter[key] = tensor
            targets.add(key.split(".")[-3])
            if ".lora_A." in key:
                rank = tensor.shape[0]
        else:
            base[
                name.replace("base_model.model.", "", 1)
                .replace(".base_layer.weight", ".weight")
                .replace(".base_layer.bias", ".bias")
            ] = tensor
    return base, adapter, rank or 0, sorted(targets)


def lora_alpha_of(run_dir: Path, role: str) -> float:
    """``lora_alpha`` the run trained with, from its ``config.yaml`` (verl's resolved config, written by verlfit train).

    Raises:
        VerlfitError: no readable ``config.yaml`` with the key (pass ``--lora-alpha``).
    """
    from omegaconf import OmegaConf  # lazy: only where verl's config is composed

    key = "critic.model.lora_alpha" if role == "critic" else "actor_rollout_ref.model.lora_alpha"
    path = run_dir / CONFIG_FILE
    try:
        value = OmegaConf.select(OmegaConf.load(path), key)
    except (OSError, ValueError) as error:
        raise VerlfitError(
            f"the checkpoint holds a LoRA adapter but {path} (the run's verl config) cannot be read ({error}): "
            "lora_alpha is not in the checkpoint",
            fix="pass --lora-alpha (the run's actor_rollout_ref.model.lora_alpha)",
            exit_code=2,
        ) from error
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise VerlfitError(f"{path} has no number at {key}", fix="pass --lora-alpha", exit_code=2)
    return float(value)


def _alpha(run_dir: Path, role: str, given: float | None) -> float:
    """The ``lora_alpha`` to merge ``role``'s adapter with: the run's own (:func:`lora_alpha_of`), ``given``
    (``--lora-alpha``) where the run's config.yaml does not say it.

    Raises:
        VerlfitError: exit status 2: ``given`` differs from the run's own, naming both; no alpha at all
            (:func:`lora_alpha_of`).
    """
    if given is None:
        return lora_alpha_of(run_dir, role)
    try:
        recorded = lora_alpha_of(run_dir, role)
    except VerlfitError:  # no readable config.yaml with the key: what --lora-alpha is for
        return given
    if recorded != given:
        key = "critic.model.lora_alpha" if role == "critic" else "actor_rollout_ref.model.lora_alpha"
        raise VerlfitError(
            f"--lora-alpha {given:g} differs from the lora_alpha {recorded:g} the run trained its {role} with "
            f"({run_dir / CONFIG_FILE}, {key}): the adapter would be scaled by {given:g}/rank instead of "
            f"{recorded:g}/rank, a model the run never trained",
            fix="leave out --lora-alpha (export reads the run's own; the option is for a run without config.yaml)",
            exit_code=2,
        )
    return given


def _model_class(state_dict: dict, config):
    # lazy: imports torch; only where a model or tokenizer is loaded
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    if "score.weight" in state_dict:  # verl's value model (critic): AutoModelForTokenClassification, num_labels=1
        config.num_labels = state_dict["score.weight"].shape[0]
        config.architectures = (
            [config.architectures[0].replace("ForCausalLM", "ForTokenClassification")] if config.architectures else None
        )
        return AutoModelForTokenClassification
    return AutoModelForCausalLM


def _build_model(state_dict: dict, config, dtype):
    """A transformers model holding exactly ``state_dict`` (strict: a missing or extra key raises)."""
    from accelerate import init_empty_weights  # lazy: imports torch; only where a model is loaded

    cls = _model_class(state_dict, config)
    config.torch_dtype = dtype
    with init_empty_weights():  # parameters on meta, buffers (rotary inv_freq) real
        model = cls.from_config(config, torch_dtype=dtype)
    model.load_state_dict(state_dict, strict=True, assign=True)
    model.tie_weights()
    return model


NF4_QUANT_STATE_FILE = "nf4_quant_state.safetensors"  # patch 0028's save_quant_states (verl/utils/frozen_base_nf4.py)


def packed_nf4_weights(state_dict: dict) -> list[str]:
    """The keys of ``state_dict`` that hold a LoRA base Linear's weight packed in NF4 (patch 0028): bitsandbytes packs
    a weight into a ``(n, 1)`` tensor, a shape no real Linear weight has (``in_features`` 1)."""
    return [
        key
        for key, tensor in state_dict.items()
        if key.endswith(".base_layer.weight") and tensor.dim() == 2 and tensor.shape[1] == 1
    ]


def dequantised_nf4(state_dict: dict, packed: list[str], role_dir: Path) -> dict:
    """``state_dict`` with each packed NF4 weight (:func:`packed_nf4_weights`) replaced by its dequantised values
    (``bitsandbytes.functional.dequantize_4bit``, in the dtype the run packed it as: FSDP's ``param_dtype``) from the
    quantisation constants patch 0028 saves beside the shards (:data:`NF4_QUANT_STATE_FILE`): the base the adapter
    was trained on, exactly.

    Raises:
        VerlfitError: exit status 2: the constants file is missing or lacks a packed weight's (a checkpoint not
            written by patch 0028's save, or copied without it), or bitsandbytes is not installed.
    """
    path = role_dir / NF4_QUANT_STATE_FILE
    if not path.is_file():
        raise VerlfitError(
            f"{role_dir}: the base was stored in NF4 (--frozen-base-dtype nf4; {len(packed)} packed weights such as "
            f"{packed[0]}) and the checkpoint has no {NF4_QUANT_STATE_FILE} (the quantisation constants patch 0028 "
            "saves beside the shards), so verlfit cannot rebuild the base the adapter was trained on",
            fix="export the adapter with --adapter-only and apply it to the base model (PEFT), as QLoRA adapters are "
            "used; its outputs then differ from the trained model's by the base's quantisation",
            exit_code=2,
        )
    try:
        import bitsandbytes.functional as nf4  # lazy: imports torch; only for an NF4 base
    except ImportError as error:
        raise VerlfitError(
            f"{role_dir}: the base was stored in NF4 and dequantising it needs bitsandbytes: {error}",
            fix="pip install bitsandbytes (the verlfit images have it), or export with --adapter-only",
            exit_code=2,
        ) from error
    from safetensors.torch import load_file  # lazy: only where weights are read or written

    from safetensors import SafetensorError  # lazy: only where weights are read or written

    unusable = f"{path} cannot dequantise this checkpoint's NF4 base"
    fix = "export the adapter with --adapter-only (apply it to the base model with PEFT)"
    try:
        constants = load_file(str(path))
    except (SafetensorError, OSError) as error:
        raise VerlfitError(f"{unusable}: it does not read ({error})", fix=fix, exit_code=2) from error
    out = dict(state_dict)
    for key in packed:
        prefix = key + "."
        own = {name[len(prefix) :]: tensor for name, tensor in constants.items() if name.startswith(prefix)}
        if not own:
            raise VerlfitError(f"{unusable}: it holds no quantisation constants for {key}", fix=fix, exit_code=2)
        try:
            state = nf4.QuantState.from_dict(own, device="cpu")
            out[key] = nf4.dequantize_4bit(state_dict[key], state)
        except (ValueError, KeyError, RuntimeError) as error:  # constants of another weight, or damaged
            raise VerlfitError(
                f"{unusable}: its constants for {key} do not match the packed weight ({error})", fix=fix, exit_code=2
            ) from error
    return out


def base_dtype(base: dict):
    """The dtype of most of a checkpoint's (base) weights, by elements: what the model was stored in (fp32 for full
    fine-tuning and stock LoRA; bf16 or fp16 for a LoRA base stored in 16 bits, patch 0026, whose few trained fp32
    tensors, such as the critic's value head, do not decide it)."""
    counts: dict = {}
    for tensor in base.values():
        counts[tensor.dtype] = counts.get(tensor.dtype, 0) + tensor.numel()
    return max(counts, key=counts.get)


def _save_role(
    role_dir: Path,
    out: Path,
    dtype,
    adapter_only: bool,
    lora_alpha: float | None,
    base_model: str | None,
    role: str,
    fix: str | None = None,
) -> str:
    """Write one role (actor or critic) to ``out``; return what it wrote ("model", "adapter", or for an NF4 base
    "model: the adapter merged into its NF4 base as dequantised in training (DTYPE), saved in DTYPE")."""
    import torch  # lazy: seconds to import; only where tensors are made

    # lazy: imports torch; only where a model or tokenizer is loaded
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    hf_dir = role_dir / "huggingface"
    state_dict = merged_state_dict(role_dir, fix=fix)
    packed = packed_nf4_weights(state_dict)
    if packed and not adapter_only:
        state_dict = dequantised_nf4(state_dict, packed, role_dir)
    config = AutoConfig.from_pretrained(hf_dir)
    base, adapter, rank, targets = split_lora(state_dict)
    # the model's dtype: --dtype, else the base's (a LoRA base stored in 16 bits, patch 0026, keeps them; its fp32
    # adapter and value head follow the base); an adapter written alone keeps its own (fp32) unless --dtype
    stored = base_dtype(base)
    target = dtype if dtype is not None else stored
    base = {k: v.to(target) for k, v in base.items()}
    if dtype is not None:
        adapter = {k: v.to(dtype) for k, v in adapter.items()}
    out.mkdir(parents=True, exist_ok=True)  # the actor: the folder being built itself
    AutoTokenizer.from_pretrained(hf_dir).save_pretrained(out)
    if adapter:
        # lazy: imports torch; only where adapters are merged
        from peft import LoraConfig, TaskType, get_peft_model, set_peft_model_state_dict

        task = TaskType.TOKEN_CLS if "score.weight" in base else TaskType.CAUSAL_LM
        # the base's name only in an adapter written alone (adapter_config.json tells PEFT what to load it on); a
        # merge builds its base from this checkpoint's huggingface/ folder, and a config naming the run's --model
        # there made PEFT warn that base_model_name_or_path "was renamed"
        lora = LoraConfig(
            r=rank,
            lora_alpha=lora_alpha,
            target_modules=targets,
            task_type=task,
            bias="none",
            base_model_name_or_path=base_model if adapter_only else None,
        )
        if adapter_only:
            lora.save_pretrained(out)
            from safetensors.torch import save_file  # lazy: only where weights are read or written

            save_file({k: v.contiguous() for k, v in adapter.items()}, str(out / "adapter_model.safetensors"))
            return "adapter"
        # merged in fp32 (the base upcast exactly, the adapter as trained), then cast once to the target dtype: a
        # 16-bit merge would round the adapter's delta before adding it
        merge_dtype = torch.float32 if target in (torch.bfloat16, torch.float16) else target
        merge_base = {k: v.to(merge_dtype) for k, v in base.items()}
        peft_model = get_peft_model(_build_model(merge_base, config, merge_dtype), lora)
        result = set_peft_model_state_dict(peft_model, {k: v.to(merge_dtype) for k, v in adapter.items()})
        if result.unexpected_keys:
            raise VerlfitError(f"{role_dir}: adapter keys PEFT does not know: {result.unexpected_keys[:3]}")
        model = peft_model.merge_and_unload().to(target)
        model.config.torch_dtype = target
    else:
        if adapter_only:
            raise VerlfitError(
                f"--adapter-only: {role_dir} holds no LoRA adapter (a full fine-tuning run)",
                fix="leave out --adapter-only to export the full model",
                exit_code=2,
            )
        model = _build_model(base, config, target)
    if model.can_generate() and (hf_dir / "generation_config.json").is_file():
        model.generation_config = GenerationConfig.from_pretrained(hf_dir)
    with torch.no_grad():
        model.save_pretrained(out, safe_serialization=True)
    if packed:
        # the adapter met the dequantised values in training too: the merged model is the trained one, not the
        # original model's weights plus the adapter
        names = [str(d).replace("torch.", "") for d in (stored, target)]
        return (
            f"model: the adapter merged into its NF4 base as dequantised in training ({names[0]}), saved in {names[1]}"
        )
    return "model"


def _needed_bytes(checkpoint: Checkpoint, roles: list[str], dtype_name: str | None) -> int:
    """Bytes the output needs, about: the shards' size, scaled to ``dtype_name`` (shards hold fp32: 4
    bytes/parameter)."""
    total = sum(
        f.stat().st_size for role in roles for f in checkpoint.role_dir(role).glob("model_world_size_*_rank_*.pt")
    )
    return total if dtype_name is None else total * DTYPES[dtype_name] // 4


def _disk_full(where: Path, needed: int | None = None) -> VerlfitError:
    free = shutil.disk_usage(where).free
    need = f"; the model needs about {needed / 2**30:.2f} GiB" if needed else ""
    return VerlfitError(
        f"not enough disk space at {where}: {free / 2**30:.2f} GiB free{need}",
        fix="free space there, or pass --output on another disk (or --dtype bfloat16 for half the size)",
    )


@dataclass
class ExportResult:
    checkpoint: Checkpoint
    output: Path
    written: dict  # role -> "model" or "adapter"
    replaced: str = ""  # what of verlfit's earlier output there this export replaced (output_files.replaced_text)


def export(
    run_dir,
    step: int | str = "latest",
    output=None,
    dtype: str | None = None,
    adapter_only: bool = False,
    critic: bool = False,
    force: bool = False,
    lora_alpha: float | None = None,
) -> ExportResult:
    """Export the actor (and, with ``critic``, the critic into ``OUTPUT/critic``) of one checkpoint.

    Output (default ``RUN_DIR/export/global_step_N``): ``config.json``, ``generation_config.json`` (when the model
    had one), ``model.safetensors`` (or shards with an index), tokenizer files, verlfit's marker; with
    ``adapter_only`` ``adapter_config.json`` + ``adapter_model.safetensors`` instead of the weights. Checked and
    written by :mod:`verlfit.output_files` (built beside ``output``, switched in when complete); on any failure
    the folder being built and every folder this call created above ``output`` are removed (none that existed
    before). ``force``: replace what verlfit wrote at ``output`` before.

    Raises:
        VerlfitError: torch, transformers or verl missing (:func:`verlfit.checks.stack.require`); see
            :func:`find_checkpoint`; an output the write policy refuses (:func:`verlfit.output_files.check_output`,
            exit status 2); ``critic`` for a run
            without one; the disk is full (with the free space); ``adapter_only`` for a full run; ``lora_alpha``
            for a run without LoRA, or other than the run's config.yaml records (exit status 2); a damaged shard
            (named, with the other saved steps); any other OSError while writing (naming the path).
    """

    require("export")  # before torch is imported: the same words as train and eval
    with quiet_known_warnings():
        return _export(run_dir, step, output, dtype, adapter_only, critic, force, lora_alpha)


def _write_error(where: Path, error: OSError, needed: int | None = None) -> VerlfitError:
    if error.errno == errno.ENOSPC:
        return _disk_full(where, needed)

    cause = os_error_words(error)
    return VerlfitError(
        f"cannot export to {where}: {cause}" + (f" ({error.filename})" if error.filename else ""),
        fix="pass --output a directory you can write (and with room for the model)",
    )


def _export(run_dir, step, output, dtype, adapter_only, critic, force, lora_alpha) -> ExportResult:
    import torch  # lazy: seconds to import; only where tensors are made

    checkpoint = find_checkpoint(run_dir, step)
    if dtype is not None and dtype not in DTYPES:
        raise VerlfitError(f"--dtype {dtype}: not one of {', '.join(DTYPES)}", exit_code=2)
    if critic and not checkpoint.has_critic:
        raise VerlfitError(
            f"--critic: {checkpoint.path} has no critic (a GRPO run trains none)", fix="leave out --critic", exit_code=2
        )
    out = (
        Path(output)
        if output is not None
        else checkpoint.run_dir / EXPORT_DIR / (f"global_step_{checkpoint.step}" + ("-adapter" if adapter_only else ""))
    )
    target = output_files.check_output(
        out, "verlfit export", force=force, inputs=[checkpoint.run_dir], own_place=(EXPORT_DIR, "*")
    )
    roles = ["actor"] + (["critic"] if critic else [])
    damaged = older_steps_fix(checkpoint)
    lora_roles = [role for role in roles if _has_lora(checkpoint, role, damaged)]
    if lora_alpha is not None and not lora_roles:
        raise VerlfitError(
            f"--lora-alpha {lora_alpha:g}: {checkpoint.path} holds no LoRA adapter (a full fine-tuning run), so there "
            "is no alpha to apply",
            fix="leave out --lora-alpha",
            exit_code=2,
        )
    alphas = {role: _alpha(checkpoint.run_dir, role, lora_alpha) if role in lora_roles else None for role in roles}
    created = output_files.prepare_parent(target)
    needed = _needed_bytes(checkpoint, roles, dtype)
    if shutil.disk_usage(target.path.parent).free < needed:
        output_files.remove_created(created)
        raise _disk_full(out.parent, needed)
    info = recorded_run(checkpoint.run_dir)
    base_model = info.get("settings", {}).get("model") if isinstance(info.get("settings"), dict) else None

    def build(folder: Path) -> dict:
        written = {}
        try:
            for role in roles:
                written[role] = _save_role(
                    checkpoint.role_dir(role),
                    folder if role == "actor" else folder / "critic",
                    getattr(torch, dtype) if dtype else None,
                    adapter_only,
                    alphas[role],
                    base_model,
                    role,
                    damaged,
                )
        except OSError as error:
            raise _write_error(out.parent, error, needed) from error
        return written

    written = output_files.write_folder(target, build, created)
    return ExportResult(checkpoint=checkpoint, output=out, written=written, replaced=output_files.replaced_text(target))


def _has_lora(checkpoint: Checkpoint, role: str, fix: str | None = None) -> bool:
    """Whether the role's rank-0 shard holds LoRA adapter weights (loaded on the meta device: no tensor data)."""
    role_dir = checkpoint.role_dir(role)
    shard = load_shard(role_dir / f"model_world_size_{checkpoint.world_size}_rank_0.pt", "meta", fix)
    return any("lora_" in key for key in shard)


def recorded_run(run_dir: Path) -> dict:
    """The run's ``run.json`` record (:func:`verlfit.run_files.load_run`), or ``{}`` where it has none or it cannot be
    read: export and eval take only optional facts from it (the base model's name, the profile, the reward
    function), and a checkpoint folder copied without its record still exports."""
    try:
        return load_run(run_dir)
    except VerlfitError:
        return {}
