"""``verlfit plan``: predicted peak GPU memory of each phase of a verl 0.4.1 PPO/GRPO step, and the fitting
search that sizes micro-batches and turns on gradient checkpointing and offload only when needed.

The package, one file per part (formulas, sources and derivations: ``docs/plan.md``):

* :mod:`verlfit.plan.memory`: the memory model: its constants with their sources, :class:`PlanRequest`,
  :class:`PhaseMemory`, :class:`Plan`, :func:`predict`.
* :mod:`verlfit.plan.fit`: :func:`auto_fit`, :func:`smallest_change` and :func:`fit_for_train` (``verlfit train --plan auto``).
* :mod:`verlfit.plan.request`: building a :class:`PlanRequest` from a profile, ``verlfit train``'s settings or
  ``verlfit plan``'s options (:class:`PlanOptions`).
* :mod:`verlfit.plan.render`: a plan as JSON-ready data or a table.
* :mod:`verlfit.plan.sizes`: which model sizes more GPUs open up (``--gpus N``).
* :mod:`verlfit.plan.time`: the time model, reading the same :class:`PlanRequest` with the card facts it needs.
* :mod:`verlfit.plan.train_estimate`: the time estimate of a ``verlfit train`` run.

The ``verlfit plan`` subcommand itself is :mod:`verlfit.commands.plan`.

The names below are re-exported so ``from verlfit.plan import predict`` keeps working.
"""

from verlfit.plan.memory import (
    ADAM_STATE_BYTES,
    ADAM_STEP_TEMP_BYTES,
    ALLOCATOR_HEADROOM_BYTES,
    BACKWARD_WORKSPACE_LAYERS,
    CALIBRATION_NOTE,
    COMPONENT_TITLES,
    COMPONENTS,
    CUDA_CONTEXT_BYTES,
    DEFAULT_MARGIN,
    DTYPE_BYTES,
    EAGER_SCORE_BYTES,
    ENTROPY_LOSS_BYTES,
    FINAL_NORM_BYTES,
    FRAGMENTATION_RESERVE_BYTES,
    GIB,
    GRAD_BYTES,
    GRAD_UNIT_TRANSIENT_BYTES,
    LAYER_ACTIVATION_BYTES,
    LAYERS_IN_FLIGHT,
    LOGPROB_LOGIT_BYTES,
    MASTER_BYTES,
    NO_GRAD_LAYER_BYTES,
    PHASE_TITLES,
    PHASES,
    REF_LOGIT_BYTES,
    ROW_LOOP_COPIES,
    SAMPLING_BYTES_PER_VOCAB,
    UPDATE_LOGIT_BYTES,
    PhaseMemory,
    Plan,
    PlanRequest,
    forward_activation_bytes,
    format_gib,
    gib,
    kv_cache_bytes,
    layer_activation_bytes,
    mask_bytes,
    predict,
    training_activation_bytes,
    unsupported_reason,
    update_moments,
    usable_memory_bytes,
    validate_request,
)
from verlfit.plan.request import PlanOptions, request_for_profile, request_from_options, request_from_settings
from verlfit.plan.fit import KEEPABLE, FitDecision, auto_fit, fit_for_train, smallest_change
from verlfit.plan.render import plan_to_dict, render_table

__all__ = [name for name in dir() if not name.startswith("_")]
