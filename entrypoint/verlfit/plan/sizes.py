"""Which model sizes more GPUs open up (``verlfit plan --gpus N``, N > 1): :func:`size_rows` auto-fits the built-in
Qwen2.5 shapes at one GPU and at N with the request's card, dtype, rollout, batch and lengths."""

from __future__ import annotations

import dataclasses
from verlfit.arguments import DEFAULT_SAMPLES
from verlfit.model_shape import load_model_shape
from verlfit.plan.fit import auto_fit, offloaded_parts
from verlfit.plan.memory import DEFAULT_MARGIN

# the sizes `verlfit plan --gpus N` (N > 1) compares at N GPUs and at 1: Qwen2.5 shapes
# (verlfit.model_shape.BUILTIN_SHAPES)
SIZE_MODELS = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-3B-Instruct")


def size_rows(request, margin: float = DEFAULT_MARGIN) -> list[dict]:
    """Which model sizes ``request.gpus`` cards open up: for each of :data:`SIZE_MODELS` and each algorithm, the
    auto-fitted (:func:`verlfit.plan.fit.auto_fit`) full-parameter plan at 1 GPU and at ``request.gpus``, with the
    request's card, dtype, rollout, batch and lengths. GRPO takes the request's samples when it is GRPO, else
    :data:`verlfit.arguments.DEFAULT_SAMPLES`; each algorithm its own reference default.

    Returns:
        One dict per (model, algorithm): ``model``, ``algorithm``, ``samples``, and per GPU count (``"1"``,
        ``"<N>"``) ``{"fits": bool, "required_bytes": peak + allocator headroom per GPU, "offload": [pieces]}``.
    """

    rows = []
    for model in SIZE_MODELS:
        for algorithm in ("ppo", "grpo"):
            same = algorithm == request.algorithm
            samples = 1 if algorithm == "ppo" else (request.rollout_n if same else DEFAULT_SAMPLES)
            row = {"model": model, "algorithm": algorithm, "samples": samples}
            for gpus in (1, request.gpus):
                trial = dataclasses.replace(
                    request,
                    shape=load_model_shape(model),
                    algorithm=algorithm,
                    rollout_n=samples,
                    use_reference=request.use_reference if same else None,
                    gpus=gpus,
                    # full-parameter, as the table says: a LoRA request's adapters and base storage are not carried
                    lora_rank=0,
                    critic_lora_rank=None,
                    frozen_base_dtype=None,
                )
                decision = auto_fit(trial, margin=margin)
                chosen = decision.request
                offload = offloaded_parts(chosen)
                row[str(gpus)] = {
                    "fits": decision.fits,
                    "required_bytes": decision.plan.required_bytes,
                    "offload": offload,
                }
            rows.append(row)
    return rows
