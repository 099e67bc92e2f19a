"""Step-time estimate of a verl 0.4.1 PPO/GRPO run on a named card: seconds per phase, per step and per run.

Each phase's time is work counted from the model shape (:class:`verlfit.model_shape.ModelShape`) divided by the
card's datasheet rate (:mod:`verlfit.cards`) and by an achieved-efficiency factor fitted to recorded H200 runs
(:data:`FACTORS`, ``benchmarks/calibrate_time.py``). The phases are verl's ``timing_s/*`` metrics:

* ``gen`` (HF rollout): prefill = one forward over the left-padded prompts (``max_prompt_length`` columns, or the
  micro-batch's longest prompt with patch 0021's rollout trim; logits of the last position only: transformers 4.51
  ``generate`` passes ``logits_to_keep=1``); decode = ``decode_steps`` steps (random weights never stop early, so
  ``max_response_length``), each reading all matmul weights, the KV cache (``3 + 2 g`` times:
  ``DynamicCache.update``'s ``torch.cat`` reads and writes it, ``repeat_kv`` reads it and writes ``g`` copies
  that SDPA reads, ``g`` = query heads per KV head: :func:`kv_cache_passes`) and the next-token logits. A decode
  step's GPU side is that work at the fitted ``decode_efficiency`` plus a floor per layer (``decode_gpu_per_layer_s``:
  the many small kernels of one step); HF ``generate``'s loop adds a CPU side that does not depend on the card
  (``benchmarks/decode_bench.py``: 22.2 ms a decode step at batch 32 on the H200, docs/benchmarks.md section 1.3;
  verl's FSDP-wrapped module adds FSDP's hooks per layer): ``decode_overhead_s + decode_overhead_per_layer_s *
  layers``. The two add up (the H200's HF step is the sum of the CUDA-graph replay's GPU time and the rest,
  benchmarks/results/2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench).
* ``gen`` with patch 0022 (``rollout.cuda_graph``): a StaticCache of the prompt columns generated from (the
  trimmed width with patch 0021, else ``max_prompt_length``) + ``max_response_length`` (``hf_rollout.py``:
  ``cache_len=prompt_length - lead + response_length``; until 2026-12-01 the untrimmed width), attended
  in
  full every step (cache moved ``1 + 2 g`` times: no ``torch.cat``); the eager warm-up step and the capture go
  through the HF loop (two steps), the rest are replays: the GPU side only. ``decode_efficiency`` and
  ``decode_gpu_per_layer_s`` rest on ``benchmarks/decode_bench.py``'s replays (no CPU side hides them there) with
  the HF records; the CPU terms on the HF records.
* ``old_log_prob``, ``ref``: actor forwards over ``S`` columns; ``values``: critic forward; ``update_critic``,
  ``update_actor``: forward + backward (2x the forward: weight and input gradients) + gradient checkpointing's
  second forward of the layers, plus AdamW's pass over parameters, gradients and both states per optimizer step.
* LoRA (PEFT ``get_peft_model``, verl 0.4.1 ``fsdp_workers.py:278-283`` actor, ``:945-956`` critic; the terms of
  :func:`verlfit.plan.memory.lora_adapter_work`): the frozen base's backward computes input gradients only (its flat
  parameters have ``requires_grad=False``: :mod:`verlfit.plan.memory`'s LoRA notes), so a base training pass is
  forward + 1x backward (+ the recompute), 2x the forward instead of 3x; each targeted Linear adds its adapter,
  ``B (A x)`` (PEFT ``lora.Linear.forward``: ``result + lora_B(lora_A(dropout(x))) * scaling``): ``2 rank (in + out)``
  FLOPs per token forward, 2x that backward (input and weight gradients of ``lora_A``, ``lora_B``), AdamW over the
  adapter parameters only. Its fixed cost: verl's LoRA wrap policy makes every ``lora_A`` and ``lora_B`` an FSDP unit
  of its own (``utils/fsdp_utils.py:98-104``), whose hooks run in every pass, and PEFT's forward adds its own small
  kernels: a fitted ``adapter_pass_overhead_s`` per targeted Linear per pass where the compute is fp32, and
  ``adapter_pass_overhead_16bit_s`` where it is fp16/bf16 (3.9x the fp32 one: FSDP's per-unit pre-forward, 466 us a
  call in the torch profiler, and its mixed-precision cast of every adapter unit: benchmarks/adapter_pass_probe.py,
  docs/benchmarks.md section 4.8). With patch 0027 (``TimeInputs.adapters_outside_fsdp``, verlfit's default for 16-bit
  LoRA on the HF rollout and one GPU) the adapters are not FSDP units: ``adapter_pass_overhead_outside_s`` per targeted
  Linear per pass (PEFT's own kernels and autocast's casts), fitted on one record, the Qwen2.5-7B a10 target. In the
  HF rollout loop (patch 0023's ``unwrap_fsdp``: no FSDP hooks, PEFT's forward as it is)
  ``adapter_decode_overhead_s`` per targeted Linear per decode step. Fitted on the LoRA records that ran alone
  (calibrate_time.VALID_RECORDS: the Qwen2.5-1.5B PPO with an fp32 base; the Qwen3-4B t4/a10, Qwen2.5-7B a10 and
  Qwen2.5-3B p40 targets with 16-bit bases).
  No ref model: the ref log-prob is the actor with its adapter disabled (``fsdp_workers.py:694-695, 729-731``), a base
  forward without the adapters' work. LoRA generation without ``unwrap_fsdp`` (FSDP's hooks on every adapter unit per
  token) is not modelled (:data:`LORA_GENERATION_NOTE`).
* ``unwrap_fsdp`` (patch 0023) without LoRA: its loop skips the decoder layers' FSDP hooks; no record has it on
  without a CUDA graph (which unwraps already), so it is estimated as the wrapped loop (an upper side). ``S`` =
  ``max_prompt_length + max_response_length``:
  verl pads every training pass to it (prompts left-padded by the dataset, responses right-padded by the rollout).
  With patch 0020 (``actor.trim_padding``, ``ref.trim_padding``, ``critic.trim_padding``: :class:`TimeInputs`
  ``trim_padding``) each micro-batch runs on the window of columns its rows use: ``S`` = the micro-batch's longest
  prompt + longest response (:data:`GSM8K_WINDOW_PROMPT_TOKENS`, ``max_response_length`` unless given). With
  ``pack_sequences`` (verl's ``use_remove_padding``: FlashAttention-2 varlen: the a10 profile's own path; not on a P40)
  the mean
  used lengths.
* FLOPs of one forward over ``T`` tokens of ``S`` columns: ``2 T (L * layer matmul params + head)`` + SDPA's score
  and value products ``4 T S q_dim L`` (the full ``S x S`` square: with a padding mask SDPA runs the masked kernel,
  not a causal one). ``head`` = vocab x hidden (the LM head: HF computes logits for every position) for the actor,
  hidden for the critic's ``score``.
* Offload moves bytes over PCIe at the card's datasheet link rate: optimizer offload 16 B per parameter per update
  (8 B of AdamW state in and out, ``fsdp_workers.py`` load/offload around ``update_actor``/``update_critic``), param
  offload 8 B per parameter (4 in, 4 out) per phase that uses the role. No recorded run with offload ran alone, so
  no efficiency is fitted for PCIe (the datasheet rate is used as is).
* ``save_checkpoint``: (4 B weights + 8 B AdamW state) per parameter of actor and critic (with LoRA: 4 B per
  parameter of the frozen base and the adapter, 8 B per adapter parameter: :func:`checkpoint_bytes`), at the fitted
  ``save_bytes_per_s`` (a disk rate of the H200 machine), once every ``save_freq`` steps.
* ``other``: the rest of ``timing_s/step`` (reward, advantages, Ray dispatch), a fitted constant.

Time of a phase = (FLOPs / peak FLOP/s + bytes / peak bandwidth) / efficiency + a fitted fixed cost per
micro-batch per layer (kernel launches: what dominates the tiny models), and with LoRA per adapted Linear. One
efficiency for fp32 and 16-bit passes (a fraction of the dtype's datasheet peak: fitted apart, the 16-bit one came out
above 1 on the H200, whose 16-bit FLOP term is small beside the fixed costs). Efficiencies and fixed costs are fitted
on the H200 and applied to every card: on P40/A10/L4 the result is a datasheet-based estimate, unverified on a
real card (``verlfit bench`` on such a card measures it).

Public API: :func:`estimate` ``(request, card, inputs=None) -> StepEstimate``; :class:`TimeInputs` (its switches
from :class:`verlfit.patch_switches.PatchSwitches`); :func:`estimate_lines`; :data:`FACTORS`. The model asks nothing
of the machine: ``verlfit plan`` resolves its card once (:func:`verlfit.plan.request.resolve_plan_run`), and
:mod:`verlfit.plan.train_estimate` gives ``verlfit train``'s and ``verlfit bench``'s estimate of a run.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from verlfit.cards import Card, Rates, get_card
from verlfit.errors import VerlfitError
from verlfit.model_shape import ModelShape
from verlfit.overrides import hf_rollout_only_note
from verlfit.patch_switches import ADAPTER_ROLES, TRAINING_ROLES
from verlfit.plan.memory import (
    NF4_BYTES_PER_WEIGHT,
    PlanRequest,
    adapter_parameters,
    frozen_base_bytes,
    nf4_weights,
    role_lora,
    root_unit_parameters,
)

# the phases whose passes run a role's adapters through FSDP (the ref log-prob disables the adapter): (phase, role)
OUTSIDE_FSDP_PHASES = (
    ("old_log_prob", "actor"),
    ("update_actor", "actor"),
    ("values", "critic"),
    ("update_critic", "critic"),
)

# ======================================================================================
# Fitted factors: written by `python benchmarks/calibrate_time.py --fit --write-factors` (reproducible: the script
# refits
# them from the records and tests/plan/test_time.py checks the fit gives these values). Records: the H200 runs of
# benchmarks/results/2026-11-29-h200-p40-main-job-learning-planner that had the GPU alone (calibrate_time.VALID_RECORDS:
# smoke-tuned/smoke-ppo, smoke-grpo, tuned-p40; public-recipe-tuned-grpo/main-grpo, public-recipe, tuned-p40;
# main-ppo-resumed-to-39/main-ppo steps 12-39; learning-check/learn-ppo, learn-grpo; main-ppo-steps-1-25/main-ppo steps
# 2-25; main-ppo-resumed-to-50-gputests/main-ppo steps 37-50; calibration-check-bf16/cal-a10-grpo-m16-256) and
# of 2026-12-01 call 2 (speed-today; speed-all's generation only), plus that call's decode_bench.json replays (the
# two graph_* factors), and of 2026-12-01's third session, call 5 (speed-today, speed-trims, speed-all: the main
# job alone, its trimmed records' generation only; lora-speed-trims_unwrap: Qwen2.5-1.5B LoRA PPO, steps 2-3), and
# issue 43's big LoRA targets alone with 16-bit bases (2026-12-03 and 2026-12-04: step 2 of each; calibrate_time's
# CHECK_RECORDS holds the one kept out of the fit).
# ======================================================================================
FACTORS = {
    "train_efficiency_float32": 0.8043,
    "train_efficiency_bfloat16": 0.8043,
    "pass_overhead_s": 0.008871,
    "pass_overhead_per_layer_s": 0.001392,
    "decode_efficiency": 0.5007,
    "decode_gpu_per_layer_s": 0.0002976,
    "decode_overhead_s": 0.004281,
    "decode_overhead_per_layer_s": 0.0005481,
    "save_bytes_per_s": 647200000.0,
    "other_s": 0.0192,
    "adapter_pass_overhead_s": 0.000446,
    "adapter_pass_overhead_16bit_s": 0.001721,
    "adapter_decode_overhead_s": 0.0001053,
    "adapter_pass_overhead_outside_s": 0.0006637,
}
# ======================================================================================

# derived: AdamW foreach reads+writes param (8), reads grad (4), reads+writes exp_avg and exp_avg_sq (16), sqrt temp (4)
ADAM_BYTES_PER_PARAM = 32
SAVE_BYTES_PER_PARAM = (
    12  # derived: fp32 weights (4) + AdamW exp_avg, exp_avg_sq (8) per parameter of each trained role
)
WEIGHT_BYTES_PER_PARAM = 4  # fp32 weights in the checkpoint's model shard
LORA_GENERATION_NOTE = (  # LoRA without patch 0023's unwrap_fsdp
    "LoRA generation is not modelled: through FSDP's hooks it measured 7-9x slower than this model's "
    "figure on the H200 "
    "(docs/benchmarks.md section 4.1); with patch 0023's unwrap_fsdp, which verlfit turns on for LoRA on one GPU, "
    "2.5x faster than that, measured only while sharing the GPU (section 4.2)"
)
# with +actor_rollout_ref.rollout.unwrap_fsdp=True (TimeInputs.unwrap_fsdp) LoRA generation is modelled, on one record
LORA_UNWRAPPED_GENERATION_NOTE = (
    "LoRA terms of the time estimate (generation through patch 0023's unwrap_fsdp, training passes) rest on few "
    "records alone on the H200: Qwen2.5-1.5B PPO (fp32), the Qwen3-4B, Qwen2.5-7B and Qwen2.5-3B targets (16-bit "
    "bases), the adapters outside FSDP on the 7B alone (docs/benchmarks.md sections 1.6 and 4.8)"
)
# LoRA on the vLLM rollout (the a10 profile's own path): patch 0023 (unwrap_fsdp) is the HF rollout's, never on here
LORA_VLLM_GENERATION_NOTE = (
    "LoRA generation on the vLLM rollout is not modelled: verl loads the adapter into vLLM's LoRA slots, and patch "
    "0023's unwrap_fsdp (the HF rollout's) does not apply; no LoRA run on vLLM has been measured"
)


def lora_generation_note(rollout: str, unwrap_fsdp: bool, frozen_base_dtype: str | None = None) -> str:
    """What the time estimate says of a LoRA actor's generation, for the rollout the run uses: on ``vllm``
    :data:`LORA_VLLM_GENERATION_NOTE`; on ``hf`` with patch 0023's ``unwrap_fsdp``
    :data:`LORA_UNWRAPPED_GENERATION_NOTE`,
    without it :data:`LORA_GENERATION_NOTE`; with an NF4 base (``frozen_base_dtype`` ``"nf4"``) also
    :data:`NF4_TIME_NOTE`."""
    if rollout == "vllm":
        return LORA_VLLM_GENERATION_NOTE
    note = LORA_UNWRAPPED_GENERATION_NOTE if unwrap_fsdp else LORA_GENERATION_NOTE
    return f"{note}; {NF4_TIME_NOTE}" if frozen_base_dtype == "nf4" else note


NF4_TIME_NOTE = (
    "the NF4 base's dequantisation (patch 0028) is counted from the bytes it reads and writes "
    "(plan/time.py frozen_base_cast_bytes), not fitted: one NF4 record alone, a Llama-3.1-8B on the t4 path, "
    "predicted -5% (docs/benchmarks.md section 4.10)"
)


VLLM_NOTE = (
    "vLLM rollout and FlashAttention-2's packed sequences (the a10 profile's own path) are not modelled: this estimate "
    "is the padded HF path's and likely overstates the a10 profile's step time (no vLLM run has been measured)"
)
OPTIMIZER_OFFLOAD_BYTES_PER_PARAM = 16  # derived: 8 B of AdamW state loaded before and offloaded after each update
PARAM_OFFLOAD_BYTES_PER_PARAM = 8  # derived: fp32 params loaded (4) and offloaded (4) around each phase
SAMPLING_BYTES_PER_VOCAB = 28  # the memory model's count (verlfit.plan): fp32 logits, scores, top-p sort, probabilities
EAGER_SCORE_PASSES = 4  # derived: eager attention writes the scores, softmax reads and writes them, AV reads them

PHASES = ("gen", "old_log_prob", "ref", "values", "update_critic", "update_actor", "save_checkpoint", "other")
PHASE_TITLES = {
    "gen": "generation (prefill + decode)",
    "old_log_prob": "old log-prob",
    "ref": "ref log-prob",
    "values": "values",
    "update_critic": "critic update",
    "update_actor": "actor update",
    "save_checkpoint": "checkpoint save (per step)",
    "other": "other (reward, advantages)",
}
UNVERIFIED_LABEL = "datasheet-based estimate, unverified on a real card"
CALIBRATED_LABEL = "estimate calibrated on recorded H200 runs (benchmarks/calibrate_time.py)"

# Measured mean used lengths: real GSM8K prompts with Qwen's chat template average 133 tokens (patch 0020's header,
# patches/verl-0.4.1/0020-trim-padding-training.patch); random-weight models fill the response (255 of 256; they never
# stop: docs/benchmarks.md section 1.3).
GSM8K_MEAN_PROMPT_TOKENS = 133
# The longest prompt of one HF rollout micro-batch of 32 GSM8K prompts (patch 0021's trimmed width), measured: the
# mean over steps 2-10 of verl's prompt_length/max in
# benchmarks/results/2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/speed-all (one
# rollout micro-batch of 32 = the batch; per step 203-293; GSM8K's longest prompt is 451 of 512 with the local
# tokenizer). A smaller rollout micro-batch has a shorter longest prompt: this is an upper-side value for it.
# benchmarks/calibrate_time.py `rollout_prompt_tokens` recomputes it from that record.
GSM8K_ROLLOUT_PROMPT_TOKENS = 230
# The window's prompt columns of one training micro-batch with patch 0020 (its longest prompt), derived from three
# records, not counted: the value at which the model's training phases (old log-prob, values, critic and actor
# update) of the main job with the trims (micro-batches 4/8/16, 512/256) sum to their measured seconds, each phase
# scaled by its measured/predicted on the untrimmed twin of the same session, with the fitted FACTORS
# (benchmarks/calibrate_time.py `window_prompt_tokens`, WINDOW_RECORDS):
# benchmarks/results/2026-12-01-h200-p40-faster-path-lora-export/speed-today-all-decode-bench/
# speed-all 3.77 s against speed-today 5.70 s, and
# 2026-12-01-h200-p40-lora-resume-faster-path-alone/speed-trims-alone/speed-trims 3.91 s and
# speed-all 3.67 s against speed-today 5.68 s. It is an effective width, below the real longest prompt (GSM8K
# mean 133, batch-32 longest ~230): phase by phase the same derivation gives old log-prob (micro-batch 8) 178,
# values 170 and critic update 167 (16), actor update 134 (4): the actor update saves more than the model's
# columns account for. The brief's first guess, time proportional to columns (0.66 x 768 - 256 = 250), ignores
# the attention square and the fixed per-pass costs.
GSM8K_WINDOW_PROMPT_TOKENS = 151


# Where the calibrated window (GSM8K_WINDOW_PROMPT_TOKENS, an effective width) sits between GSM8K's mean prompt
# (GSM8K_MEAN_PROMPT_TOKENS) and a batch's longest (GSM8K_ROLLOUT_PROMPT_TOKENS): (156 - 133) / (230 - 133) = 0.237.
# measured_lengths puts a run's own window at the same place between its own mean and longest prompt, so GSM8K's
# lengths give back exactly the defaults above.
WINDOW_POSITION = (GSM8K_WINDOW_PROMPT_TOKENS - GSM8K_MEAN_PROMPT_TOKENS) / (
    GSM8K_ROLLOUT_PROMPT_TOKENS - GSM8K_MEAN_PROMPT_TOKENS
)


@dataclass(frozen=True)
class TimeInputs:
    """What the time estimate needs beyond a :class:`PlanRequest`.

    Attributes:
        decode_steps: decode steps per generate call (tokens); None = ``max_response_length`` (models that never stop
            early, as random weights).
        trim_padding: the roles (of :data:`TRAINING_ROLES`) whose passes patch 0020 trims to the micro-batch's
            window of used columns (keys ``+actor_rollout_ref.actor.trim_padding``, ``...ref.trim_padding``,
            ``+critic.trim_padding``); True = all three, False = none. ``actor`` covers old log-prob and the actor
            update, ``ref`` the ref log-prob, ``critic`` values and the critic update.
        window_prompt_length, window_response_length: the window's columns with ``trim_padding``: the longest prompt
            and the longest response of a micro-batch (None = :data:`GSM8K_WINDOW_PROMPT_TOKENS` capped at the
            request's ``prompt_window``: ``max_prompt_length``, or the data's longest prompt when known; and
            ``max_response_length``: random weights always fill the response).
        rollout_trim_padding: patch 0021 (``+actor_rollout_ref.rollout.trim_padding``): each rollout micro-batch
            is generated from its prompts cut to the longest one.
        rollout_prompt_length: that longest prompt, tokens (None = :data:`GSM8K_ROLLOUT_PROMPT_TOKENS` capped at
            the request's ``prompt_window``).
        cuda_graph: patch 0022 (``+actor_rollout_ref.rollout.cuda_graph``): decode steps replayed as a CUDA graph.
        unwrap_fsdp: patch 0023 (``+actor_rollout_ref.rollout.unwrap_fsdp``): the HF rollout generates through
            the unwrapped module; with LoRA the generation's adapter terms are then modelled (without it they are
            not: :data:`LORA_GENERATION_NOTE`), without LoRA it changes nothing here (see the module's docstring).
        adapters_outside_fsdp: the roles (``actor``, ``critic``) whose LoRA adapters patch 0027 keeps out of FSDP
            (``+actor_rollout_ref.model.adapters_outside_fsdp``, ``+critic.model.adapters_outside_fsdp``): their
            training-style passes pay ``adapter_pass_overhead_outside_s`` per adapted Linear instead of the FSDP
            units' ``adapter_pass_overhead_s`` / ``adapter_pass_overhead_16bit_s``.
        static_cache_untrimmed: the StaticCache was ``max_prompt_length + max_response_length`` columns whatever
            the rollout trim (patch 0022 before 2026-12-01's second session; its records are calibrated with it).
        pack_sequences: training passes run over the used tokens only (verl's packed path,
            ``use_remove_padding=True``: needs FlashAttention-2, which verlfit's images do not have), not padded
            columns; it wins over ``trim_padding``.
        mean_prompt_length, mean_response_length: mean used tokens per sequence, for ``pack_sequences`` (None =
            :data:`GSM8K_MEAN_PROMPT_TOKENS` and ``max_response_length``).
        save_freq: steps between checkpoint saves (None or <= 0: no saves).
        lora_rank: the actor's LoRA rank (0 = full fine-tuning); None = the request's (``PlanRequest.lora_rank``).
        critic_lora_rank: the critic's; None = the request's (``PlanRequest.lora_rank_of("critic")``: the actor's
            rank unless the critic's is set).

    Raises:
        VerlfitError: a ``trim_padding`` role that is not one of :data:`TRAINING_ROLES`.
    """

    decode_steps: int | None = None
    trim_padding: bool | tuple[str, ...] = ()
    window_prompt_length: float | None = None
    window_response_length: float | None = None
    rollout_trim_padding: bool = False
    rollout_prompt_length: float | None = None
    cuda_graph: bool = False
    unwrap_fsdp: bool = False
    adapters_outside_fsdp: tuple[str, ...] = ()
    static_cache_untrimmed: bool = False
    pack_sequences: bool = False
    mean_prompt_length: float | None = None
    mean_response_length: float | None = None
    save_freq: int | None = None
    lora_rank: int | None = None
    critic_lora_rank: int | None = None

    def __post_init__(self):
        roles = (
            TRAINING_ROLES
            if self.trim_padding is True
            else ()
            if self.trim_padding is False
            else tuple(self.trim_padding)
        )
        unknown = [r for r in roles if r not in TRAINING_ROLES]
        if unknown:
            raise VerlfitError(
                f"time estimate: trim_padding role(s) {unknown} unknown", fix=f"use some of {', '.join(TRAINING_ROLES)}"
            )
        object.__setattr__(self, "trim_padding", tuple(r for r in TRAINING_ROLES if r in roles))
        unknown = [r for r in self.adapters_outside_fsdp if r not in ADAPTER_ROLES]
        if unknown:
            raise VerlfitError(
                f"time estimate: adapters_outside_fsdp role(s) {unknown} unknown",
                fix=f"use some of {', '.join(ADAPTER_ROLES)}",
            )
        # in ADAPTER_ROLES' order, as trim_padding in TRAINING_ROLES': equal inputs compare equal
        object.__setattr__(
            self, "adapters_outside_fsdp", tuple(r for r in ADAPTER_ROLES if r in self.adapters_outside_fsdp)
        )


@dataclass(frozen=True)
class PhaseWork:
    """The counted work of one phase, per GPU, per step.

    Attributes:
        flops: floating-point operations of the training-style passes (and prefill).
        bytes: device-memory bytes of those passes.
        passes_x_layers: micro-batch passes x layers (for the fixed per-pass cost that grows with the layers).
        passes: micro-batch passes (forward = 1, backward = 2, recompute = 1 per micro-batch; prefill = 1 per call).
        decode_steps: decode steps through the HF loop (generation only; with a CUDA graph the eager warm-up and
            the capture).
        decode_layer_steps: those steps x layers (the per-layer part of the HF loop's fixed cost).
        decode_flops, decode_bytes: those steps' FLOPs and bytes.
        graph_steps: decode steps replayed as a CUDA graph (patch 0022).
        graph_layer_steps: replays x layers (the replay's fitted GPU floor per layer).
        graph_flops, graph_bytes: the replays' FLOPs and bytes.
        pcie_bytes: offload traffic over the host link.
        save_bytes: checkpoint bytes (save only, per save).
        adapter_passes: LoRA's micro-batch passes x adapted Linears (training-style passes and prefill).
        adapter_passes_outside: the same for a role whose adapters patch 0027 keeps out of FSDP (then
            ``adapter_passes`` is 0): their fixed cost is PEFT's own kernels and autocast's casts, without FSDP's.
        adapter_decode_steps: LoRA's decode steps through the HF loop x adapted Linears.
    """

    flops: float = 0.0
    bytes: float = 0.0
    passes_x_layers: float = 0.0
    passes: float = 0.0
    decode_steps: float = 0.0
    decode_layer_steps: float = 0.0
    decode_flops: float = 0.0
    decode_bytes: float = 0.0
    graph_steps: float = 0.0
    graph_layer_steps: float = 0.0
    graph_flops: float = 0.0
    graph_bytes: float = 0.0
    pcie_bytes: float = 0.0
    save_bytes: float = 0.0
    adapter_passes: float = 0.0
    adapter_passes_outside: float = 0.0
    adapter_decode_steps: float = 0.0


@dataclass(frozen=True)
class StepEstimate:
    """Seconds per step on ``card``: ``phases`` maps a :data:`PHASES` name to seconds (only phases that run)."""

    card: Card
    phases: dict
    work: dict = field(default_factory=dict)

    @property
    def step_seconds(self) -> float:
        return sum(self.phases.values())

    @property
    def label(self) -> str:
        return CALIBRATED_LABEL if self.card.measured else UNVERIFIED_LABEL


# --------------------------------------------------------------------------------------
# counting (pure)
# --------------------------------------------------------------------------------------


def layer_matmul_parameters(shape: ModelShape) -> int:
    """Weights of one decoder layer's matmuls: q, k, v, o and the three SwiGLU projections (no biases, no norms)."""
    h, q, kv, i = shape.hidden_size, shape.q_dim, shape.kv_dim, shape.intermediate_size
    return h * q + 2 * h * kv + q * h + 3 * h * i


def forward_flops(
    shape: ModelShape, sequences: float, columns: float, head_width: int, head_positions: float | None = None
) -> tuple[float, float]:
    """FLOPs of one forward of ``sequences`` x ``columns`` tokens: (layers incl. attention, head).

    ``head_width`` is the head's output width (vocab for the LM head, 1 for the critic's score); ``head_positions``
    the positions per sequence the head runs on (default: all ``columns``).
    """
    tokens = sequences * columns
    layers = (
        2 * tokens * shape.num_layers * layer_matmul_parameters(shape)
        + 4 * tokens * columns * shape.q_dim * shape.num_layers
    )
    positions = columns if head_positions is None else head_positions
    head = 2 * sequences * positions * shape.hidden_size * head_width
    return float(layers), float(head)


def training_columns(request: PlanRequest, inputs: TimeInputs, role: str) -> tuple[float, float]:
    """(columns, response columns) one training pass of ``role`` (:data:`TRAINING_ROLES`) runs over per sequence:
    verl's padded ``max_prompt_length + max_response_length``; with ``pack_sequences`` the mean used lengths; with
    patch 0020 trimming ``role`` the window (longest prompt + longest response of a micro-batch)."""
    if inputs.pack_sequences:
        prompt = (
            inputs.mean_prompt_length
            if inputs.mean_prompt_length is not None
            else min(GSM8K_MEAN_PROMPT_TOKENS, request.max_prompt_length)
        )
        response = (
            inputs.mean_response_length if inputs.mean_response_length is not None else request.max_response_length
        )
    elif role in inputs.trim_padding:
        prompt = (
            inputs.window_prompt_length
            if inputs.window_prompt_length is not None
            else min(GSM8K_WINDOW_PROMPT_TOKENS, request.prompt_window)
        )
        response = (
            inputs.window_response_length if inputs.window_response_length is not None else request.max_response_length
        )
    else:
        return float(request.seq_len), float(request.max_response_length)
    return float(prompt + response), float(response)


def _role_parameters(shape: ModelShape, critic: bool) -> int:
    return shape.critic_parameters if critic else shape.actor_parameters


def frozen_base_cast_bytes(request: PlanRequest, role: str, generation: bool = False) -> float:
    """Bytes moved per pass (a forward, a backward, a recompute; with ``generation`` the rollout's prefill or one
    decode step) to give ``role``'s frozen LoRA base to compute, per GPU; 0 when it computes as stored.

    - patch 0026 on the P40 (stored 16-bit, computed fp32): FSDP casts each unit as it unshards it, the 16-bit read and
      the fp32 write of every weight; in generation every module of the base is cast for its forward (the layers'
      matmul weights and the LM head; the embedding casts its rows).
    - patch 0028 (NF4): each Linear of the layers is dequantised for its matmul, the packed read
      (:data:`verlfit.plan.memory.NF4_BYTES_PER_WEIGHT`) and the write in the compute dtype; on the P40 the 16-bit
      root is cast as above (the whole root unit in a pass, the LM head in generation). Derived from the tensors'
      sizes, not measured.
    """
    shape, cb = request.shape, request.compute_bytes
    critic = role == "critic"
    if request.dequantises_frozen_base(role):
        cast = nf4_weights(shape, role) * (NF4_BYTES_PER_WEIGHT + cb)
        if request.upcasts_frozen_base(role):
            root = shape.vocab_size * shape.hidden_size if generation else root_unit_parameters(shape, critic=critic)
            cast += root * (request.frozen_bytes + cb)
        return cast
    if not request.upcasts_frozen_base(role):
        return 0.0
    if generation:
        return (shape.num_layers * layer_matmul_parameters(shape) + shape.vocab_size * shape.hidden_size) * (
            request.frozen_bytes + cb
        )
    return _role_parameters(shape, critic) * (request.frozen_bytes + cb)


def _pass_work(
    request: PlanRequest,
    critic: bool,
    micro: int,
    train: bool,
    lora: bool,
    columns: float,
    response: float | None = None,
    adapter: tuple[int, int] = (0, 0),
    *,
    upcast_base: bool,
) -> PhaseWork:
    """Forward (``train=False``) or training pass over all per-GPU responses in micro-batches of ``micro``, each
    sequence ``columns`` wide with ``response`` response columns (default ``max_response_length``). ``lora``: the
    base is frozen (no weight gradients, no optimizer pass over it); ``adapter``:
    :func:`verlfit.plan.memory.lora_adapter_work` of the adapters that run in this pass ((0, 0) for the ref log-prob,
    whose adapter is disabled); ``upcast_base``: the role's frozen 16-bit base is cast to compute
    (:class:`verlfit.plan.memory.RoleLora`)."""
    shape = request.shape
    sequences = request.per_gpu_responses
    head_width = 1 if critic else shape.vocab_size
    layers, head = forward_flops(shape, sequences, columns, head_width)
    adapter_params, adapted = adapter
    adapter_flops = 2.0 * sequences * columns * adapter_params  # B (A x) per token: 2 rank (in + out) per Linear
    cb = request.compute_bytes
    params = _role_parameters(shape, critic)
    micro_batches = math.ceil(sequences / max(1, micro))
    response = request.max_response_length if response is None else response
    logits = (
        0.0 if critic else sequences * columns * shape.vocab_size * cb + 2 * sequences * response * shape.vocab_size * 4
    )
    eager = (
        EAGER_SCORE_PASSES * sequences * shape.num_attention_heads * columns * columns * cb * shape.num_layers
        if request.attention == "eager"
        else 0.0
    )
    role = "critic" if critic else "actor"
    upcast = frozen_base_cast_bytes(request, role) if lora and upcast_base else 0
    if not train:
        flops = layers + head + adapter_flops
        weight_reads = micro_batches * ((params + adapter_params) * cb + upcast)
        return PhaseWork(
            flops=flops,
            bytes=weight_reads + logits + eager,
            passes_x_layers=micro_batches * shape.num_layers,
            passes=micro_batches,
            adapter_passes=micro_batches * adapted,
        )
    backward = 1 if lora else 2  # a frozen base: input gradients only
    recompute = 1 if request.checkpointing_of(role) else 0
    # the adapters' backward: input and weight gradients of lora_A and lora_B (2x their forward), recomputed too
    flops = layers * (1 + backward + recompute) + head * (1 + backward) + adapter_flops * (1 + 2 + recompute)
    passes = 1 + backward + recompute
    optimizer_steps = max(1, sequences // max(1, request.per_gpu_mini_batch))
    trained = adapter_params if lora else params  # gradients and AdamW: the adapters only with LoRA
    bytes_ = (
        micro_batches * ((params + adapter_params) * cb + upcast) * passes
        + micro_batches * trained * 4
        + optimizer_steps * trained * ADAM_BYTES_PER_PARAM
        + logits * 2
        + eager * (1 + backward + recompute)
    )
    return PhaseWork(
        flops=flops,
        bytes=bytes_,
        passes_x_layers=micro_batches * shape.num_layers * passes,
        passes=micro_batches * passes,
        adapter_passes=micro_batches * passes * adapted,
    )


def _with_pcie(work: PhaseWork, pcie_bytes: float) -> PhaseWork:
    return dataclasses.replace(work, pcie_bytes=work.pcie_bytes + pcie_bytes)


def kv_cache_passes(shape: ModelShape, static: bool) -> int:
    """Times one decode step moves the whole KV cache: ``repeat_kv`` reads it and writes ``g`` copies (``g`` =
    query heads per KV head; transformers 4.51 ``integrations/sdpa_attention.py``, also the eager path), attention
    reads the copies: ``1 + 2 g``; a DynamicCache (HF ``generate``) adds ``torch.cat``'s read and write of it
    (``DynamicCache.update``), a StaticCache (patch 0022) writes the new column in place."""
    groups = shape.num_attention_heads // max(1, shape.num_key_value_heads)
    return 1 + 2 * groups + (0 if static else 2)


def decode_step_work(
    shape: ModelShape, batch: int, context: float, compute_bytes: int, static: bool
) -> tuple[float, float]:
    """(FLOPs, bytes) of one decode step of ``batch`` rows attending over ``context`` cached columns: every matmul
    weight and the LM head read once, ``2 batch (matmuls + head)`` + attention's ``4 batch context q_dim layers``
    FLOPs, the KV cache ``kv_cache_passes`` times, sampling over the vocabulary."""
    matmul = shape.num_layers * layer_matmul_parameters(shape) + shape.vocab_size * shape.hidden_size
    flops = 2 * batch * matmul + 4 * batch * context * shape.q_dim * shape.num_layers
    kv = batch * shape.num_layers * 2 * shape.kv_dim * context * compute_bytes * kv_cache_passes(shape, static)
    return float(flops), float(matmul * compute_bytes + kv + batch * shape.vocab_size * SAMPLING_BYTES_PER_VOCAB)


def decode_work(
    shape: ModelShape,
    batch: int,
    prompt_columns: float,
    steps: int,
    compute_bytes: int,
    cuda_graph: bool = False,
    cache_columns: float | None = None,
    adapter: tuple[int, int] = (0, 0),
    upcast_bytes: float = 0,
) -> PhaseWork:
    """Decode work of one generate call: ``steps`` steps of ``batch`` rows after a prompt of ``prompt_columns``.

    HF ``generate`` (``cuda_graph=False``): a DynamicCache that grows from ``prompt_columns`` (mean context
    ``prompt_columns + steps / 2``), every step through the HF loop. Patch 0022: a StaticCache of
    ``cache_columns`` (the prompt columns generated from + ``max_response_length``; default ``prompt_columns + steps``),
    attended in full every step; the eager warm-up step and the capture go through the loop (two steps), the
    other ``steps - 2`` are replays. ``adapter``: LoRA's :func:`verlfit.plan.memory.lora_adapter_work`: every step
    reads the adapters' weights and adds ``2 batch`` x their parameters in FLOPs; the steps through the HF loop pay
    each adapted Linear's fixed cost (``adapter_decode_steps``), replays do not (their kernels are in the graph).
    ``upcast_bytes``: bytes every step adds to cast a 16-bit LoRA base to the compute dtype (patch 0026 on the P40).
    """
    adapter_params, adapted = adapter
    extra_flops, extra_bytes = 2.0 * batch * adapter_params, float(adapter_params * compute_bytes + upcast_bytes)
    if not cuda_graph:
        flops, bytes_ = decode_step_work(shape, batch, prompt_columns + steps / 2, compute_bytes, static=False)
        flops, bytes_ = flops + extra_flops, bytes_ + extra_bytes
        return PhaseWork(
            decode_steps=steps,
            decode_layer_steps=steps * shape.num_layers,
            decode_flops=steps * flops,
            decode_bytes=steps * bytes_,
            adapter_decode_steps=steps * adapted,
        )
    cache = prompt_columns + steps if cache_columns is None else cache_columns
    eager, replays = min(2, steps), max(0, steps - 2)
    flops, bytes_ = decode_step_work(shape, batch, cache, compute_bytes, static=True)
    flops, bytes_ = flops + extra_flops, bytes_ + extra_bytes
    return PhaseWork(
        decode_steps=eager,
        decode_layer_steps=eager * shape.num_layers,
        decode_flops=eager * flops,
        decode_bytes=eager * bytes_,
        graph_steps=replays,
        graph_layer_steps=replays * shape.num_layers,
        graph_flops=replays * flops,
        graph_bytes=replays * bytes_,
        adapter_decode_steps=eager * adapted,
    )


def rollout_prompt_columns(request: PlanRequest, inputs: TimeInputs) -> float:
    """Prompt columns a rollout micro-batch is generated from: ``max_prompt_length`` (verl left-pads every prompt
    to it), or with patch 0021 its longest prompt (:attr:`TimeInputs.rollout_prompt_length`)."""
    if not inputs.rollout_trim_padding:
        return float(request.max_prompt_length)
    if inputs.rollout_prompt_length is not None:
        return float(min(inputs.rollout_prompt_length, request.max_prompt_length))
    return float(min(GSM8K_ROLLOUT_PROMPT_TOKENS, request.prompt_window))  # never more than the data's longest prompt


def generation_work(request: PlanRequest, inputs: TimeInputs, adapter: tuple[int, int], upcast_base: bool) -> PhaseWork:
    """Prefill and decode work of one step's HF rollout, per GPU; ``adapter``: the actor's LoRA
    (:func:`verlfit.plan.memory.lora_adapter_work`), run in the prefill and every decode step; ``upcast_base``: the
    actor's frozen 16-bit base is cast to compute (:class:`verlfit.plan.memory.RoleLora`)."""
    shape = request.shape
    prompt = rollout_prompt_columns(request, inputs)
    steps = inputs.decode_steps if inputs.decode_steps is not None else request.max_response_length
    calls = math.ceil(request.per_gpu_prompts / max(1, request.rollout_prompts_per_call))
    batch = request.rollout_prompts_per_call * request.samples  # sequences per generate call
    sequences = request.per_gpu_responses
    cb = request.compute_bytes
    layers, head = forward_flops(shape, sequences, prompt, shape.vocab_size, head_positions=1)
    upcast = 0
    if upcast_base and request.rollout == "hf":
        upcast = frozen_base_cast_bytes(request, "actor", generation=True)
    decode = decode_work(
        shape,
        batch,
        prompt,
        steps,
        cb,
        inputs.cuda_graph,
        cache_columns=request.seq_len if inputs.static_cache_untrimmed else prompt + request.max_response_length,
        adapter=adapter,
        upcast_bytes=upcast,
    )
    prefill_bytes = calls * ((_role_parameters(shape, False) + adapter[0]) * cb + upcast)
    prefill_adapter = 2.0 * sequences * prompt * adapter[0]
    scaled = {
        name: calls * getattr(decode, name)
        for name in (
            "decode_steps",
            "decode_layer_steps",
            "decode_flops",
            "decode_bytes",
            "graph_steps",
            "graph_layer_steps",
            "graph_flops",
            "graph_bytes",
            "adapter_decode_steps",
        )
    }
    # the prefill's adapters: their FLOPs and weights; their fixed cost, one step's in 1 + decode_steps, is left out
    return PhaseWork(
        flops=layers + head + prefill_adapter,
        bytes=prefill_bytes,
        passes_x_layers=calls * shape.num_layers,
        passes=calls,
        **scaled,
    )


def phase_work(request: PlanRequest, inputs: TimeInputs | None = None) -> dict:
    """Counted work of every phase that runs (a :data:`PHASES` name -> :class:`PhaseWork`), per GPU, per step."""
    inputs = inputs or TimeInputs()
    if request.rollout != "hf" and (inputs.cuda_graph or inputs.rollout_trim_padding):
        # patches 0021-0022 change verl's HF rollout only: vLLM never reads their keys, and its generation is
        # estimated as the padded HF path's without them (VLLM_NOTE)
        inputs = dataclasses.replace(inputs, cuda_graph=False, rollout_trim_padding=False)
    rank = inputs.lora_rank if inputs.lora_rank is not None else request.lora_rank_of("actor")
    critic_rank = inputs.critic_lora_rank if inputs.critic_lora_rank is not None else request.lora_rank_of("critic")
    lora, critic_lora = rank > 0, critic_rank > 0
    shape = request.shape
    # each role's LoRA geometry, read once from the memory model's
    actor_lora, critic_lora_geometry = role_lora(request, "actor", rank), role_lora(request, "critic", critic_rank)
    adapter, critic_adapter = actor_lora.adapter, critic_lora_geometry.adapter
    columns = {role: training_columns(request, inputs, role) for role in TRAINING_ROLES}
    actor_params, critic_params = shape.actor_parameters / request.gpus, shape.critic_parameters / request.gpus
    actor_move = PARAM_OFFLOAD_BYTES_PER_PARAM * actor_params if request.actor_param_offload else 0.0
    critic_move = PARAM_OFFLOAD_BYTES_PER_PARAM * critic_params if request.critic_param_offload else 0.0
    upcast, critic_upcast = actor_lora.upcasts_base, critic_lora_geometry.upcasts_base
    work = {"gen": _with_pcie(generation_work(request, inputs, adapter, upcast), actor_move)}
    work["old_log_prob"] = _with_pcie(
        _pass_work(
            request,
            False,
            request.log_prob_micro_batch_size,
            False,
            lora,
            *columns["actor"],
            adapter=adapter,
            upcast_base=upcast,
        ),
        actor_move,
    )
    if request.has_reference:  # with LoRA: the actor with its adapter disabled (fsdp_workers.py:694-695)
        work["ref"] = _pass_work(
            request, False, request.log_prob_micro_batch_size, False, lora, *columns["ref"], upcast_base=upcast
        )
    if request.has_critic:
        work["values"] = _with_pcie(
            _pass_work(
                request,
                True,
                request.critic_micro_batch_size,
                False,
                critic_lora,
                *columns["critic"],
                adapter=critic_adapter,
                upcast_base=critic_upcast,
            ),
            critic_move,
        )
        optimizer = (
            OPTIMIZER_OFFLOAD_BYTES_PER_PARAM * critic_params
            if request.critic_optimizer_offload and not critic_lora
            else 0.0
        )
        work["update_critic"] = _with_pcie(
            _pass_work(
                request,
                True,
                request.critic_micro_batch_size,
                True,
                critic_lora,
                *columns["critic"],
                adapter=critic_adapter,
                upcast_base=critic_upcast,
            ),
            critic_move + optimizer,
        )
    optimizer = (
        OPTIMIZER_OFFLOAD_BYTES_PER_PARAM * actor_params if request.actor_optimizer_offload and not lora else 0.0
    )
    work["update_actor"] = _with_pcie(
        _pass_work(
            request,
            False,
            request.actor_micro_batch_size,
            True,
            lora,
            *columns["actor"],
            adapter=adapter,
            upcast_base=upcast,
        ),
        actor_move + optimizer,
    )
    if inputs.save_freq and inputs.save_freq > 0:
        saved = checkpoint_bytes(request, "actor", actor_lora.rank) + (
            checkpoint_bytes(request, "critic", critic_lora_geometry.rank) if request.has_critic else 0
        )
        work["save_checkpoint"] = PhaseWork(save_bytes=saved / request.gpus / inputs.save_freq)
    # patch 0027: adapters outside FSDP have no units: their passes' fixed cost is counted apart
    for phase, role in OUTSIDE_FSDP_PHASES:
        if role in inputs.adapters_outside_fsdp and phase in work:
            passes = work[phase].adapter_passes
            work[phase] = dataclasses.replace(work[phase], adapter_passes=0.0, adapter_passes_outside=passes)
    return work


def checkpoint_bytes(request: PlanRequest, role: str, rank: int | None = None) -> int:
    """Bytes one checkpoint of ``role`` (``"actor"`` or ``"critic"``) writes, all GPUs together.

    verl 0.4.1's ``FSDPCheckpointManager.save_checkpoint`` (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``
    :203-215) saves ``self.model.state_dict()`` and ``self.optimizer.state_dict()``: the whole model's weights as
    FSDP stores them and AdamW's two fp32 states of each trained parameter (with LoRA only the adapters'). Fully
    trained: 12 B per parameter (fp32 weights). LoRA: the frozen base as stored
    (:func:`verlfit.plan.memory.frozen_base_bytes` on one GPU: 4 B a parameter in fp32, 2 B in 16 bits with patch
    0026, the layers' Linears packed at :data:`verlfit.plan.memory.NF4_BYTES_PER_WEIGHT` with patch 0028, whose
    ``nf4_quant_state.safetensors`` holds the constants that figure counts) + 12 B x adapter
    (:func:`verlfit.plan.memory.adapter_parameters`: fp32 weights and AdamW states). ``rank``: the role's LoRA rank,
    None = the request's; a rank given for a role the request fully trains counts an fp32 base.
    """
    shape = request.shape
    params = shape.actor_parameters if role == "actor" else shape.critic_parameters
    rank = request.lora_rank_of(role) if rank is None else rank
    if rank <= 0:
        return SAVE_BYTES_PER_PARAM * params
    adapter = adapter_parameters(shape, role, rank, request.lora_target_modules)
    if request.lora_rank_of(role) > 0:
        base = frozen_base_bytes(dataclasses.replace(request, gpus=1), role)
    else:
        base = WEIGHT_BYTES_PER_PARAM * params
    return base + SAVE_BYTES_PER_PARAM * adapter


HF_FILES_BYTES = 32 * 1024**2  # a role's huggingface/ config + tokenizer files (under 20 MiB for Qwen2.5's), rounded up


def checkpoint_disk_bytes(request) -> int:
    """Bytes one verl checkpoint (``global_step_N/``) takes on disk for ``request`` (a
    :class:`verlfit.plan.PlanRequest`).

    What verl 0.4.1 writes, per role (actor; critic for PPO): ``FSDPCheckpointManager.save_checkpoint``
    (``verl/utils/checkpoint/fsdp_checkpoint_manager.py:198-215``) saves the role's whole model state dict and its
    AdamW optimizer state dict, sized by :func:`checkpoint_bytes`: the weights as FSDP stores them (fp32 when fully
    trained: verl builds actor and critic in fp32 whatever the compute dtype, ``fsdp_workers.py:216, 905``; with
    LoRA the frozen base as stored, 4, 2 or about 0.52 bytes a parameter, plus the adapters in fp32) and 8 bytes
    (``exp_avg`` + ``exp_avg_sq``, fp32) a parameter that has a gradient (every parameter fully trained; with LoRA
    the adapters only, and for the critic its trained value head, patch 0011:
    :func:`verlfit.plan.memory.adapter_parameters` of the request's ``lora_rank_of(role)`` and
    ``lora_target_modules``); a small extra state (scheduler, RNG: 15 KB recorded) and the config/tokenizer files
    under ``huggingface/`` (:data:`HF_FILES_BYTES` a role). A LoRA actor also writes
    ``lora_adapter/adapter_model.safetensors`` (``fsdp_workers.py:775-797``): its adapters once more, 4 bytes a
    parameter (the critic's ``save_checkpoint`` writes no adapter file, ``fsdp_workers.py:1142-1152``).
    Qwen2.5-0.5B, fully trained: 11.1 GiB with PPO (actor and critic 494 M parameters each: the critic keeps the
    embedding), 5.6 GiB with GRPO. LoRA rank 32, all-linear, fp32 base (stock verl, ``--frozen-base-dtype
    float32``): Qwen2.5-1.5B PPO 12.5 GiB, Qwen2.5-3B GRPO 12.4 GiB (the device record: "~12 GiB a checkpoint",
    ``benchmarks/device_run.sh``); the profiles' 16-bit base (patch 0026): 6.8 and 6.7 GiB; Qwen2.5-7B GRPO 15.4
    GiB in 16 bits, 6.4 GiB in NF4 (patch 0028). The tiny model's saved shards hold exactly these bytes
    (``tests/patches/test_frozen_base.py``, ``test_frozen_base_nf4.py``).
    """
    roles = ("actor", "critic") if request.has_critic else ("actor",)
    total = sum(checkpoint_bytes(request, role) + HF_FILES_BYTES for role in roles)
    rank = request.lora_rank_of("actor")
    if rank > 0:
        total += WEIGHT_BYTES_PER_PARAM * adapter_parameters(request.shape, "actor", rank, request.lora_target_modules)
    return total


# --------------------------------------------------------------------------------------
# seconds
# --------------------------------------------------------------------------------------


# the fitted coefficients, in the order of phase_features' columns (benchmarks/calibrate_time.py fits them)
COEFFICIENTS = (
    "1/train_efficiency_float32",
    "1/train_efficiency_bfloat16",
    "pass_overhead_s",
    "pass_overhead_per_layer_s",
    "1/decode_efficiency",
    "decode_gpu_per_layer_s",
    "decode_overhead_s",
    "decode_overhead_per_layer_s",
    "adapter_pass_overhead_s",
    "adapter_pass_overhead_16bit_s",
    "adapter_decode_overhead_s",
    "adapter_pass_overhead_outside_s",
)


def phase_features(work: PhaseWork, rates: Rates) -> tuple[tuple[float, ...], float]:
    """(features, fixed seconds) of one phase: its time is ``sum(features[k] * coefficient[k]) + fixed``.

    Features, in :data:`COEFFICIENTS` order: ideal seconds of the passes at the card's peaks (FLOPs / peak +
    bytes / bandwidth) in the fp32 column or the bf16 column, micro-batch passes, passes x layers; the GPU side of
    every decode step (HF loop and CUDA-graph replay alike): its ideal seconds, decode steps x layers; the HF loop's
    CPU side (absent from replays): its decode steps, those steps x layers; LoRA's passes x adapted Linears and
    HF-loop decode steps x adapted Linears. Fixed: PCIe offload traffic at the datasheet link rate. ``rates``: the
    card's for the run's compute dtype (:meth:`verlfit.cards.Card.rates`).
    """
    ideal = work.flops / rates.flops + work.bytes / rates.memory
    decode_flops, decode_bytes = work.decode_flops + work.graph_flops, work.decode_bytes + work.graph_bytes
    decode = decode_flops / rates.flops + decode_bytes / rates.memory
    features = (
        ideal if rates.dtype == "float32" else 0.0,
        ideal if rates.dtype != "float32" else 0.0,
        work.passes,
        work.passes_x_layers,
        decode,
        work.decode_layer_steps + work.graph_layer_steps,
        work.decode_steps,
        work.decode_layer_steps,
        work.adapter_passes if rates.dtype == "float32" else 0.0,
        work.adapter_passes if rates.dtype != "float32" else 0.0,
        work.adapter_decode_steps,
        work.adapter_passes_outside,
    )
    return features, work.pcie_bytes / rates.pcie


def coefficients(factors: dict) -> tuple[float, ...]:
    """:data:`FACTORS` as the coefficients of :func:`phase_features`."""
    f = factors
    return (
        1 / f["train_efficiency_float32"],
        1 / f["train_efficiency_bfloat16"],
        f["pass_overhead_s"],
        f["pass_overhead_per_layer_s"],
        1 / f["decode_efficiency"],
        f["decode_gpu_per_layer_s"],
        f["decode_overhead_s"],
        f["decode_overhead_per_layer_s"],
        f["adapter_pass_overhead_s"],
        f["adapter_pass_overhead_16bit_s"],
        f["adapter_decode_overhead_s"],
        f["adapter_pass_overhead_outside_s"],
    )


def phase_seconds(work: PhaseWork, rates: Rates, factors: dict | None = None) -> float:
    """Seconds of one phase's work at a card's ``rates`` (:meth:`verlfit.cards.Card.rates` for the run's compute
    dtype) with the fitted ``factors`` (default :data:`FACTORS`)."""
    f = FACTORS if factors is None else factors
    features, fixed = phase_features(work, rates)
    seconds = fixed + sum(x * c for x, c in zip(features, coefficients(f)))
    return seconds + work.save_bytes / f["save_bytes_per_s"]


def estimate(
    request: PlanRequest, card: Card | str, inputs: TimeInputs | None = None, factors: dict | None = None
) -> StepEstimate:
    """Seconds per step and per phase of ``request`` on ``card`` (a :class:`Card` or its key), the card's rates for
    the request's dtype read once (:meth:`Card.rates`).

    Raises:
        VerlfitError: bf16 on a card without bf16, fp16 on a card without fast fp16 (:meth:`Card.peak_flops`).
    """
    card = get_card(card) if isinstance(card, str) else card
    rates = card.rates(request.dtype)
    f = FACTORS if factors is None else factors
    work = phase_work(request, inputs)
    phases = {name: phase_seconds(w, rates, f) for name, w in work.items()}
    phases["other"] = f["other_s"]
    return StepEstimate(card=card, phases=phases, work=work)


def run_steps(
    steps: int | None = None, epochs: int | None = None, dataset_rows: int | None = None, train_batch_size: int = 32
) -> int | None:
    """Steps of a run: ``steps`` if given, else ``epochs x floor(dataset_rows / train_batch_size)`` (verl's
    dataloader drops the last partial batch, ``drop_last=True`` in ``ray_trainer.py``), else None."""
    if steps:
        return steps
    if dataset_rows is not None:
        return (epochs or 1) * (dataset_rows // train_batch_size)
    return None


def format_run_seconds(seconds: float) -> str:
    """A run's time: ``"69 s"`` below two minutes, ``"12 min"`` below an hour, else ``"1.9 h"``."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_lines(
    est: StepEstimate, steps: int | None, dataset_rows: int | None = None, train_batch_size: int | None = None
) -> list[str]:
    """Human lines: the label, one line per phase, the step, and the run when ``steps`` is known; ``dataset_rows``
    (``--dataset-size``) fewer than ``train_batch_size`` make no step (verl drops the partial batch): said so."""
    lines = [f"time on {est.card.name} ({UNVERIFIED_LABEL if not est.card.measured else CALIBRATED_LABEL}):"]
    for name in PHASES:
        if name in est.phases:
            lines.append(f"  {PHASE_TITLES[name]:<30} {est.phases[name]:8.2f} s")
    lines.append(f"  {'step':<30} {est.step_seconds:8.2f} s")
    if steps:
        total = est.step_seconds * steps
        lines.append(
            f"  run of {steps} step{'' if steps == 1 else 's'}: {format_run_seconds(total)}"
            + (f" ({total:.0f} s)" if total >= 120 else "")
        )
    elif dataset_rows is not None and train_batch_size and dataset_rows < train_batch_size:
        lines.append(f"  run: {dataset_rows} rows are fewer than one batch of {train_batch_size}: no step")
    else:
        lines.append("  run: pass --steps, or --dataset-size (and --epochs), for the whole run")
    return lines


def estimate_to_dict(est: StepEstimate, steps: int | None) -> dict:
    """JSON-ready form: seconds per phase, per step and per run, the card and the label."""
    return {
        "card": est.card.key,
        "card_name": est.card.name,
        "label": est.label,
        "phases_s": {name: round(value, 4) for name, value in est.phases.items()},
        "step_s": round(est.step_seconds, 4),
        "steps": steps,
        "run_s": round(est.step_seconds * steps, 1) if steps else None,
        "run_h": round(est.step_seconds * steps / 3600, 3) if steps else None,
        "factors": dict(FACTORS),
    }


# --------------------------------------------------------------------------------------
# `verlfit plan`: its options and the notes on them
# --------------------------------------------------------------------------------------


def length_notes(options, request: PlanRequest, inputs: TimeInputs) -> list[str]:
    """Check ``--window-prompt-length``, ``--window-response-length``, ``--rollout-prompt-length`` and
    ``--mean-prompt-length`` / ``--mean-response-length`` against the request's ``max_prompt_length`` /
    ``max_response_length`` (a window, or a mean, cannot be wider than verl's padding);
    return a note for each one given while its trim switch is off (``inputs``: no effect then), and for
    ``--rollout-trim-padding`` / ``--cuda-graph`` with the vLLM rollout (patches 0021-0022 are the HF rollout's).

    Raises:
        VerlfitError: a value above its maximum (exit 2, naming the flag and the maximum).
    """
    checks = (
        ("window_prompt_length", "max_prompt_length", bool(inputs.trim_padding), "--trim-padding"),
        ("window_response_length", "max_response_length", bool(inputs.trim_padding), "--trim-padding"),
        ("rollout_prompt_length", "max_prompt_length", inputs.rollout_trim_padding, "--rollout-trim-padding"),
        ("mean_prompt_length", "max_prompt_length", inputs.pack_sequences, "--pack-sequences"),
        ("mean_response_length", "max_response_length", inputs.pack_sequences, "--pack-sequences"),
    )
    notes = []
    for name, limit_name, switched_on, switch in checks:
        value = getattr(options, name)
        if value is None:
            continue
        flag, limit = "--" + name.replace("_", "-"), getattr(request, limit_name)
        if value > limit:
            raise VerlfitError(
                f"{flag} {value} is more than --{limit_name.replace('_', '-')} {limit}: verl pads to "
                f"{limit} tokens, no window is wider",
                fix=f"pass {flag} {limit} or less, or raise --{limit_name.replace('_', '-')}",
                exit_code=2,
            )
        if not switched_on:
            notes.append(
                f"note: {flag} {value} has no effect: {switch} is off (the profile's keys or --no-{switch[2:]})"
            )
    if request.rollout != "hf":
        for name in ("rollout_trim_padding", "cuda_graph"):
            if getattr(options, name):
                notes.append("note: " + hf_rollout_only_note("--" + name.replace("_", "-"), request.rollout))
    return notes


@dataclass(frozen=True)
class MeasuredLengths:
    """The lengths a run's batches had, in tokens: verl's ``prompt_length/mean``, ``prompt_length/max``,
    ``response_length/mean`` and ``response_length/max`` (``ray_trainer.py`` ``compute_data_metrics``), each the mean
    over the steps measured."""

    prompt_mean: float
    prompt_max: float
    response_mean: float
    response_max: float


def measured_lengths(inputs: TimeInputs, lengths: MeasuredLengths) -> TimeInputs:
    """``inputs`` with the lengths a run measured instead of GSM8K's (what the estimate assumes without them): the
    rollout's longest prompt (patch 0021) and the decode steps are the measured longest prompt and response; the
    training window (patch 0020) is the longest response and the prompt at :data:`WINDOW_POSITION` between the
    measured mean and longest (the calibrated effective width, placed as for GSM8K); packed sequences (verl's
    ``use_remove_padding``) use the means. GSM8K's own lengths (mean 133, longest 230, responses filled) give back
    the defaults."""
    return dataclasses.replace(
        inputs,
        decode_steps=max(1, round(lengths.response_max)),
        rollout_prompt_length=lengths.prompt_max,
        window_prompt_length=lengths.prompt_mean + WINDOW_POSITION * (lengths.prompt_max - lengths.prompt_mean),
        window_response_length=lengths.response_max,
        mean_prompt_length=lengths.prompt_mean,
        mean_response_length=lengths.response_mean,
    )
