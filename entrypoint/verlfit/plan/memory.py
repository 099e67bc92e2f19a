"""The memory model of ``verlfit plan``: predicted peak GPU memory of each phase of a verl 0.4.1 PPO/GRPO step.

The model (every formula, its source and its derivation: ``docs/plan.md``):

* verl runs all roles of one GPU in **one process** (``create_colocated_worker_cls``,
  ``ray_trainer.py:774``), so each phase's peak is what that phase allocates **plus everything the
  other roles keep on the GPU** between phases: parameters unless ``param_offload``, AdamW states
  unless ``optimizer_offload`` (``fsdp_workers.py:542-548``, ``1062-1067``). Gradients do not stay:
  ``zero_grad()`` (set to None) ends every update (``dp_actor.py:525``, ``dp_critic.py:268``).
  On one GPU the reference model stays too, once its first forward has run, despite FSDP's CPU offload
  (``fsdp_workers.py:319``): see :func:`_ref_resident_bytes`.
* Phases, in the order ``RayPPOTrainer.fit`` runs them (``ray_trainer.py:983-1130``): rollout,
  old log-prob, ref log-prob (only with a KL term, ``main_ppo.py:155``), values and critic update
  (only with GAE, i.e. PPO), actor update.
* Sizes: actor and critic keep fp32 masters (``fsdp_workers.py:216``, ``905``); AdamW keeps two
  fp32 states (``fsdp_workers.py:367``); FSDP shards parameters, gradients and states over GPUs.
* The terms that scale with the micro-batch (activations, logits over the vocabulary, the KV cache)
  use the named coefficients in the block below, derived by counting the tensors autograd saves in
  ``transformers`` 4.51's Qwen2 layer (the method of Korthikanti et al. 2022, "Reducing Activation
  Recomputation in Large Transformer Models", section 4.1) and checked against earlier device measurements
  (docs/benchmarks.md, docs/plan.md section 5).

Public API: :func:`predict` ``(request: PlanRequest, margin=0.90) -> Plan``; :func:`validate_request`;
:func:`update_moments`; :func:`usable_memory_bytes`; the building blocks (``*_bytes``), each in bytes per GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from verlfit.errors import VerlfitError
from verlfit.model_shape import ModelShape
from verlfit.resolved_run import CUDA_CONTEXT_BYTES

GIB = 1024**3

# ======================================================================================
# Memory-model constants: the only numbers to touch when recalibrating (docs/plan.md §4).
# "derived" = counted from the code named; "calibrated: <where>" = fitted to a measurement.
# ======================================================================================

DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
# patch 0028 (--frozen-base-dtype nf4): the Linears of the decoder layers in NF4 through bitsandbytes'
# quantize_4bit (functional.py): 4 bits a weight, blocks of 64 weights each with an absmax that double quantisation
# stores as one byte, and an fp32 absmax per 256 of those blocks (quantize_blockwise, blocksize=256): derived
NF4 = "nf4"
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)
NF4_ROOT_BYTES = 2  # derived: the root (embeddings, LM head, final norm) stays 16-bit (frozen_base_nf4.py)
SHORT_DTYPE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # as the plan's notes write them
MASTER_BYTES = 4  # derived: actor and critic are built in fp32 (fsdp_workers.py:216, 905)
GRAD_BYTES = 4  # derived: gradients accumulate on the fp32 flat parameter (FSDP1 casts them back)
ADAM_STATE_BYTES = 8  # derived: exp_avg + exp_avg_sq, fp32 (torch.optim.AdamW, fsdp_workers.py:367)
# derived: foreach AdamW allocates sqrt(exp_avg_sq) for all params at once (torch/optim/adam.py _multi_tensor_adam)
ADAM_STEP_TEMP_BYTES = 4
# FSDP1 (use_orig_params=False) hands each parameter's gradient to autograd as a view of the unit's
# flat parameter; SplitBackward holds every view's gradient, then concatenates them into a new
# full-size tensor (torch/distributed/fsdp/_flat_param.py _get_unflat_views). Bytes per parameter
# of the unit at the end of its backward: fp32 = buffered grads 4 + concatenated copy 4; bf16 =
# concatenated bf16 2 + the fp32 cast 4. calibrated: the earlier device measurements (docs/plan.md section 5) fp32 runs
# (14.8 and 16.6 GiB
# = 8 and 9 times the parameters in fp32 bytes, see docs/plan.md §5).
GRAD_UNIT_TRANSIENT_BYTES = {"float32": 8, "bfloat16": 6}
LAYERS_IN_FLIGHT = 2  # derived: FSDP unshards the running layer plus the prefetched one (BACKWARD_PRE, the default)

# Bytes autograd saves per token per decoder layer (no checkpointing), by compute dtype, split by
# what they scale with. derived: transformers 4.51 Qwen2DecoderLayer, docs/plan.md §3.
#   hidden: RMSNorm x2 (input, normalised, output), q (projection, rotate_half, q_embed),
#           attention output and o_proj input.  fp32: 11 h-sized tensors x 4 B; bf16: 26 B (RMSNorm
#           upcasts to fp32 inside).
#   kv:     k projection and rotate_half(k).
#   intermediate: SwiGLU gate, act(gate), up, product.
LAYER_ACTIVATION_BYTES = {
    "float32": {"hidden": 44, "kv": 8, "intermediate": 16},
    "bfloat16": {"hidden": 26, "kv": 4, "intermediate": 8},
}
# K and V as the attention kernel saves them: SDPA and eager get repeat_kv'd copies (heads * head_dim
# each, transformers/integrations/sdpa_attention.py:30-31); FlashAttention-2 takes the KV heads as they are.
# eager also saves the softmax probabilities: heads * seq_len per token, fp32 (+ the cast back in bf16).
EAGER_SCORE_BYTES = {"float32": 4, "bfloat16": 6}
FINAL_NORM_BYTES = {"float32": 12, "bfloat16": 8}  # per token per hidden unit: the final RMSNorm (3 tensors)
# measured: one decoder layer with LoRA (rank 32, base frozen), fp32, checkpointed, holds while it runs backward its
# recomputed activations and 0.151 (Qwen2.5-7B), 0.156 (3B), 0.154 (0.5B) layers more at 512 tokens on the CPU
# (benchmarks/layer_backward_memory.py, 2026-12-05); the largest, rounded up. It was 1.0, a guess, which put the 7B
# P40 NF4 target's actor update 1.4 GiB (+10%) over its measured peak (docs/benchmarks.md section 4.10)
BACKWARD_WORKSPACE_LAYERS = 0.16

# Bytes alive per token in a forward without gradients (log-prob, values, prefill): one layer's
# working set (residual, normalised input, attention output; gate, up, act) plus the stream.
# derived, calibrated: not yet.
NO_GRAD_LAYER_BYTES = {
    "float32": {"hidden": 20, "intermediate": 12},
    "bfloat16": {"hidden": 14, "intermediate": 6},
}

# Logits over the vocabulary (dp_actor.py:246-268). The lm_head output covers the whole sequence
# (batch, prompt + response, vocab) in the compute dtype and is sliced to the response without a
# copy; log-probs and entropy then work on (batch, response, vocab). Keys: (dtype, fused) where
# fused = flash-attn's Triton cross-entropy and torch.compile'd entropy are in use (A10 image),
# else the eager PyTorch paths (torch_functional.py:114-131, 143-147; P40 image).
# Each entry: bytes per (token, vocab entry) as (over the full sequence, over the response).
# old log-prob (no grad, entropy on): eager fp32 = the softmax plus one temporary (2 x 4 B): torch's logsumexp
#   computes (x - max).exp_() in place (ReduceOps.cpp logsumexp_out_impl) and frees it before pd * logits is
#   formed; calibrated: H200 main-ppo (512/256, micro 8) 16.90 GiB measured, 17.33 predicted (it was 12 B and
#   18.49 GiB when logsumexp was assumed to hold two temporaries);
#   eager bf16 (no flash-attn): log-probs loop over rows (counted apart), then entropy_from_logits under autocast:
#   softmax's fp32 cast and fp32 output, then pd and the fp32 pd * logits = 8 B derived (logsumexp is not on
#   autocast's fp32 list, so it runs in bf16); calibrated 10 B: H200 cal-a10-ppo-m8 and cal-a10-grpo-m8
#   (micro 16, 512/256, no memory limit, 2026-11-29 call 9) measured 21.55 and 16.95 GiB, i.e. 9.6 B per
#   response entry over the bf16 logits (it was 16 B, which over-predicted them by 17% and 22%);
#   fused = the contiguous copy for the CE kernel.
LOGPROB_LOGIT_BYTES = {
    ("float32", False): (4, 8),
    ("float32", True): (4, 4),
    ("bfloat16", False): (2, 10),
    ("bfloat16", True): (2, 2),
}
# ref log-prob (no grad, no entropy): the per-row logsumexp loop only holds one row (counted apart).
REF_LOGIT_BYTES = {
    ("float32", False): (4, 0),
    ("float32", True): (4, 4),
    ("bfloat16", False): (2, 0),
    ("bfloat16", True): (2, 2),
}
ROW_LOOP_COPIES = 2  # derived: logprobs_from_logits_v2 keeps (response, vocab) temporaries for one row at a time
# actor update, two moments, take the larger: (a) backward through log-probs: logits alive + the
# gather's and the rows' gradients over the response; (b) after them: the slice's and the
# temperature division's gradients over the whole sequence.
# eager bf16 (a): the bf16 logits + each row's fp32 log_softmax output, saved for its backward (4 B; the
# autocast cast before it saves nothing); the rows' bf16 gradients replace those outputs as they run.
# Checked: H200 a10-like (micro 8, 512/256) measured 16.74 GiB for every phase, 17.58 predicted (+5.0%);
# the 12 B used before put its actor update at 19.32 (+15.4%).
UPDATE_LOGIT_BYTES = {
    ("float32", False): ((4, 8), (8, 0)),
    ("float32", True): ((4, 4), (8, 0)),
    ("bfloat16", False): ((2, 4), (4, 0)),
    ("bfloat16", True): ((2, 2), (4, 0)),
}
ENTROPY_LOSS_BYTES = 8  # per (response token, vocab entry): softmax saved + its gradient, when entropy_coeff != 0

# fp16 (the t4 and v100 profiles: FSDP mixed precision param_dtype fp16, fp16 autocast, fp32 masters, gradients
# and AdamW states, a ref loaded in fp16) saves the same tensors as bf16, at the same 2 bytes: transformers 4.51's
# Qwen2 (RMSNorm upcasts to fp32 for any input dtype) and verl's log-prob paths (logprobs_from_logits_v2 loops rows
# for every dtype but fp32/fp64, torch_functional.py:114-131) branch on fp32 or not, never on bf16 vs fp16, and
# autocast's fp32 op list (softmax, log_softmax) is the same for both. So every per-dtype coefficient above holds
# for fp16 as derived for bf16 (derived, not calibrated: the bf16 calibrations came from A10-like H200 runs; no fp16
# run has been measured). Dynamic loss scaling (patch 0024) adds no tensor of gradient size: torch's
# _amp_foreach_non_finite_check_and_unscale_ unscales in place, and ShardedGradScaler keeps the scale, its growth
# tracker and one inf flag per device (torch/distributed/fsdp/sharded_grad_scaler.py: three 4-byte scalars per
# trained role), counted as 0 here (12 bytes).
HALF_PRECISION = ("bfloat16", "float16")
for _table in (
    DTYPE_BYTES,
    GRAD_UNIT_TRANSIENT_BYTES,
    LAYER_ACTIVATION_BYTES,
    EAGER_SCORE_BYTES,
    FINAL_NORM_BYTES,
    NO_GRAD_LAYER_BYTES,
):
    _table["float16"] = _table["bfloat16"]
for _table in (LOGPROB_LOGIT_BYTES, REF_LOGIT_BYTES, UPDATE_LOGIT_BYTES):
    for _fused in (False, True):
        _table[("float16", _fused)] = _table[("bfloat16", _fused)]

# HF generate (hf_rollout.py:109-123, transformers 4.51 generate with a DynamicCache).
SAMPLING_BYTES_PER_VOCAB = (
    28  # derived: fp32 next-token logits, processed scores, top-p sort values + int64 indices, probabilities
)
# Allocator headroom kept on top of the predicted allocated peak (fragmentation, CUDA/cuBLAS
# workspaces, small tensors not modelled). calibrated: not yet; the earlier device measurements (docs/plan.md section 5)
# shows that reserved
# memory climbs to any cap, so fit is judged by allocated + this headroom.
ALLOCATOR_HEADROOM_BYTES = int(0.5 * GIB)
DEFAULT_MARGIN = 0.90

# --- LoRA (verl 0.4.1 wraps actor and critic with PEFT get_peft_model, fsdp_workers.py:278-283, 945-956) -------
# derived; one device run checks them (Qwen2.5-1.5B shape, PPO, rank 32: 18.19 GiB measured, 19.7 GiB predicted,
# docs/benchmarks.md section 4.1).
# What the terms below assume, and where it is read (docs/plan.md section 7):
# * PEFT freezes every base parameter (requires_grad=False) and adds, per targeted Linear(in, out), lora_A
#   (rank x in) and lora_B (out x rank): rank * (in + out) parameters, no bias (verl passes bias="none").
# * The adapter is fp32: PEFT builds lora_A/lora_B in the base layer's dtype (fp32: the actor and critic are
#   built in fp32, fsdp_workers.py:214-216, 905) and get_peft_model's autocast_adapter_dtype=True keeps it fp32
#   on a bf16 base. So master 4 B, gradient 4 B and AdamW 8 B per adapter parameter, as full fine-tuning.
# * verl wraps with FSDP1 use_orig_params=False (fsdp_workers.py:326, 988), which flattens only tensors of one
#   requires_grad (torch fsdp/_flat_param.py _validate_tensors_to_flatten), and its LoRA wrap policy makes every
#   leaf module with a trainable weight (lora_A, lora_B) an FSDP unit of its own (utils/fsdp_utils.py:98-104).
#   The frozen base's flat parameters therefore have requires_grad=False: autograd gives them no gradient,
#   torch.optim.AdamW (over all parameters, fsdp_workers.py:367) skips parameters whose grad is None, so no
#   gradient and no AdamW state exist for the base. Gradients and states: adapter parameters only.
#   With HF rollout stock verl 0.4.1 drops the wrap policy (fsdp_workers.py:306-308), and one flat parameter would
#   mix frozen and trainable tensors, which FSDP1 refuses at init; patch 0009 keeps the LoRA policy (adapters and
#   decoder layers as units), so the actor's largest frozen unit is the root (embedding, norm, lm_head).
# * No reference model: the ref log-prob is the actor's forward with its adapter disabled (ray_trainer.py:338,
#   783, 1074-1077; fsdp_workers.py:694-695, 729-731), through compute_log_prob, which computes the entropy too
#   (fsdp_workers.py:706, calculate_entropy=True): its logits term is the old log-prob's.
# * "all-linear" (verl's yaml default, ppo_trainer.yaml:132, 657) is PEFT's _maybe_include_all_linear_layers
#   (peft/tuners/tuners_utils.py, same rule in 0.15.2, the image's, and 0.21.2): every nn.Linear except the
#   model's get_output_embeddings(), so lm_head is left out of the actor.
# * The critic's value head score = Linear(hidden, 1) is newly initialised; stock verl gives PEFT no
#   modules_to_save, so it would stay frozen and random (all-linear would only put a LoRA on it). Patch 0011
#   passes modules_to_save=["score"]: PEFT then trains a copy of the whole head (hidden + 1 parameters, the frozen
#   original stays) and adapts no LoRA onto it, even when score is named in target_modules (PEFT 0.15.2 and 0.21.2).
#   Checked by counting get_peft_model's trainable and total parameters on a tiny Qwen2 (tests/plan/test_lora.py).
# * Activations as full fine-tuning (the adapters save the same layer inputs a trained base Linear saves), plus
#   lora_A's output, saved by lora_B for its weight gradient: rank values per targeted Linear per token.
#   With fewer targets than all linear layers the frozen untargeted Linears save no input, so this is then an
#   upper bound.
LORA_ALL_LINEAR = "all-linear"
# Linear layers of a Qwen2/Llama decoder layer, as PEFT matches target names (the last name of the module path)
LORA_LAYER_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
LORA_HEAD_TARGET = "lm_head"  # the actor's output head: a target only when named
LORA_CALIBRATION_NOTE = (
    "LoRA terms: derived (docs/plan.md section 7), nothing fitted; against four device runs with the p40 "
    "profile's trims, "
    "counted at the prompt columns each run measured, +2.9% to +5.5% (Qwen2.5-1.5B PPO, Qwen2.5-3B GRPO, "
    "Qwen3-1.7B GRPO); "
    "one run without the trims +8.4% (docs/benchmarks.md section 2.2)"
)
LORA_SUGGESTED_RANK = 32  # the rank smallest_change proposes: ppo_trainer.yaml:124's example ("e.g., 32")
# What the predictions were checked against, printed with every plan (update with tests/benchmarks/test_collect.py)
CALIBRATION_NOTE = (
    "within -3% to +5% of the measured peak in 15 H200 runs, 12 distinct configurations of the Qwen2.5-0.5B "
    "shape, fp32 and bf16, PPO and GRPO: docs/benchmarks.md section 2.1"
)
# Added to CALIBRATION_NOTE under a plan of any other shape (verlfit.plan.render.calibration_note): the range above
# is the 0.5B's only
CALIBRATED_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
EXTRAPOLATED_NOTE = (
    "this shape is not the Qwen2.5-0.5B: its prediction is extrapolated from that calibration; the "
    "larger shapes measured (Qwen2.5-1.5B and 3B, Qwen3-1.7B, LoRA) peaked within +2.9% to +5.5% of it at "
    "the prompt columns they used (docs/benchmarks.md section 2.2)"
)


PHASES = ("rollout", "old_log_prob", "ref_log_prob", "values", "critic_update", "actor_update")
PHASE_TITLES = {
    "rollout": "rollout",
    "old_log_prob": "old log-prob",
    "ref_log_prob": "ref log-prob",
    "values": "values",
    "critic_update": "critic update",
    "actor_update": "actor update",
}
COMPONENTS = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache")
COMPONENT_TITLES = {
    "weights": "weights",
    "gradients": "grads",
    "optimizer": "optimizer",
    "activations": "activations",
    "logits": "logits",
    "kv_cache": "KV cache",
}


@dataclass(frozen=True)
class PlanRequest:
    """One PPO/GRPO configuration on one class of GPU.

    Batch sizes follow verl: ``train_batch_size`` and ``ppo_mini_batch_size`` count prompts over
    all GPUs; the micro-batches count responses per GPU (``*_per_gpu`` keys), except
    ``rollout_micro_batch_size``, which counts prompts per HF ``generate`` call per GPU (each
    prompt then yields ``rollout_n`` sequences; None = the whole per-GPU batch at once).

    Attributes:
        shape: the model (:func:`verlfit.model_shape.load_model_shape`).
        gpu_memory_bytes: memory one process may allocate per GPU (the card less the CUDA context,
            or a cap such as ``VERLFIT_GPU_MEMORY_LIMIT_GIB``).
        dtype: compute dtype, ``"float32"`` (P40), ``"bfloat16"`` (A10: FSDP mixed precision and autocast) or
            ``"float16"`` (T4, V100: the same with dynamic loss scaling, patch 0024).
        algorithm: ``"ppo"`` (GAE, a critic) or ``"grpo"`` (no critic).
        rollout_n: responses per prompt.
        use_reference: a reference policy runs (a KL loss or KL reward); None = GRPO yes, PPO no
            (what ``verlfit train`` sets).
        rollout: ``"hf"`` or ``"vllm"``; ``vllm_gpu_memory_utilization`` is vLLM's share of the card.
        attention: ``"sdpa"``, ``"eager"`` or ``"flash_attention_2"``.
        fused_kernels: flash-attn's Triton cross-entropy and torch.compile'd entropy are in use
            (the A10 image; never on the P40, which has no Triton).
        entropy_in_loss: ``actor.entropy_coeff != 0`` (verl 0.4.1 default 0).
        gpus: GPUs (FSDP shards parameters, gradients and optimizer states over them).
        lora_rank: the actor's LoRA rank (``actor_rollout_ref.model.lora_rank``; 0 = every parameter trains).
        critic_lora_rank: the critic's (``critic.model.lora_rank``); None = the actor's, 0 = a fully trained critic.
        lora_target_modules: ``"all-linear"`` (PEFT: every Linear but ``lm_head``) or a tuple of Linear names
            from :data:`LORA_LAYER_TARGETS` plus ``lm_head`` (the actor's head; the critic's value head trains in
            full with LoRA, patch 0011).
        cuda_graph: the HF rollout decodes with patch 0022's StaticDecoder (``+actor_rollout_ref.rollout.cuda_graph``):
            its StaticCache and static buffers replace generate's DynamicCache (:func:`static_decode_bytes`).
        trim_padding: the roles (``"actor"``, ``"ref"``, ``"critic"``) that run each micro-batch on the columns its
            rows use (patch 0020: ``+actor_rollout_ref.actor.trim_padding``, ``.ref.``, ``+critic.``).
        rollout_trim_padding: the HF rollout generates each micro-batch from its prompts cut to the longest one
            (patch 0021: ``+actor_rollout_ref.rollout.trim_padding``).
        longest_prompt_length: the longest prompt of the training data, tokens as verl counts them (the chat
            template applied: :func:`verlfit.prompt_lengths.longest_prompt_length`); None = not known. With the
            trims, a micro-batch's prompt columns are its own longest prompt, never more than the data's
            (:attr:`prompt_window`); verl's ``filter_overlong_prompts`` keeps it within ``max_prompt_length``.
        gradient_checkpointing: the actor recomputes its layers' activations in backward
            (``actor_rollout_ref.model.enable_gradient_checkpointing``); ``critic_gradient_checkpointing`` the critic's
            (``critic.model.enable_gradient_checkpointing``), None = the actor's (:meth:`checkpointing_of`).
        frozen_base_dtype: how the LoRA roles store their frozen base (patch 0026, ``+*.model.frozen_base_dtype``):
            ``"bfloat16"`` or ``"float16"``, 2 bytes a parameter; ``"nf4"`` (patch 0028), the decoder layers'
            Linears in NF4 (:data:`NF4_BYTES_PER_WEIGHT`), the layers' norms and biases in the compute dtype and
            the root in 16 bits (:func:`frozen_base_bytes`); None = fp32, 4 bytes (stock verl). Adapters and the
            critic's value head stay fp32 either way; a role without LoRA is all fp32 masters.
    """

    shape: ModelShape
    gpu_memory_bytes: int
    dtype: str = "float32"
    algorithm: str = "ppo"
    rollout_n: int = 1
    train_batch_size: int = 32
    ppo_mini_batch_size: int = 16
    actor_micro_batch_size: int = 4
    log_prob_micro_batch_size: int = 8
    critic_micro_batch_size: int = 4
    rollout_micro_batch_size: int | None = None
    max_prompt_length: int = 512
    max_response_length: int = 256
    rollout: str = "hf"
    vllm_gpu_memory_utilization: float = 0.5
    attention: str = "sdpa"
    gradient_checkpointing: bool = False
    critic_gradient_checkpointing: bool | None = None
    actor_param_offload: bool = False
    actor_optimizer_offload: bool = False
    critic_param_offload: bool = False
    critic_optimizer_offload: bool = False
    use_reference: bool | None = None
    fused_kernels: bool = False
    entropy_in_loss: bool = False
    gpus: int = 1
    lora_rank: int = 0
    critic_lora_rank: int | None = None
    lora_target_modules: str | tuple[str, ...] = LORA_ALL_LINEAR
    cuda_graph: bool = False
    trim_padding: tuple[str, ...] = ()
    rollout_trim_padding: bool = False
    longest_prompt_length: int | None = None
    frozen_base_dtype: str | None = None

    # --- derived sizes -------------------------------------------------------------
    @property
    def samples(self) -> int:
        """Responses per prompt that verl generates (``rollout.n``)."""
        return self.rollout_n

    @property
    def seq_len(self) -> int:
        """Padded tokens per sequence: verl pads prompts to ``max_prompt_length`` (left) and responses to
        ``max_response_length``."""
        return self.max_prompt_length + self.max_response_length

    @property
    def prompt_window(self) -> int:
        """Prompt columns a trimmed micro-batch can have: the data's longest prompt when known (capped at
        ``max_prompt_length``), else ``max_prompt_length``. Responses keep ``max_response_length``: any response
        may run to the limit (random weights and a policy early in training do)."""
        if self.longest_prompt_length is None:
            return self.max_prompt_length
        return min(self.longest_prompt_length, self.max_prompt_length)

    def seq_len_of(self, role: str) -> int:
        """Columns of ``role``'s log-prob, values or update micro-batches (``"actor"``, ``"ref"``, ``"critic"``):
        :attr:`prompt_window` + ``max_response_length`` where patch 0020 trims that role, else :attr:`seq_len`. With
        LoRA the ref log-prob is the actor's forward (its adapter disabled), so it goes as the actor's."""
        if role == "ref" and self.lora_rank > 0:
            role = "actor"
        return (self.prompt_window if role in self.trim_padding else self.max_prompt_length) + self.max_response_length

    @property
    def rollout_prompt_length(self) -> int:
        """Prompt columns HF generate starts from: :attr:`prompt_window` with patch 0021's trim, else
        ``max_prompt_length`` (verl's left padding)."""
        return self.prompt_window if self.rollout_trim_padding and self.rollout == "hf" else self.max_prompt_length

    @property
    def rollout_seq_len(self) -> int:
        """Columns of a generated sequence (the KV cache's length): :attr:`rollout_prompt_length` +
        ``max_response_length``."""
        return self.rollout_prompt_length + self.max_response_length

    @property
    def has_critic(self) -> bool:
        return self.algorithm == "ppo"

    @property
    def has_reference(self) -> bool:
        return self.algorithm == "grpo" if self.use_reference is None else self.use_reference

    @property
    def per_gpu_prompts(self) -> int:
        return self.train_batch_size // self.gpus

    @property
    def per_gpu_responses(self) -> int:
        return self.train_batch_size * self.samples // self.gpus

    @property
    def per_gpu_mini_batch(self) -> int:
        """Responses per optimizer step per GPU (``fsdp_workers.py:157-158``)."""
        return self.ppo_mini_batch_size * self.samples // self.gpus

    @property
    def rollout_prompts_per_call(self) -> int:
        return self.rollout_micro_batch_size or self.per_gpu_prompts

    @property
    def compute_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def frozen_bytes(self) -> int:
        """Bytes a frozen (LoRA base) parameter is stored in: 2 with a 16-bit :attr:`frozen_base_dtype` (and for an
        NF4 base's 16-bit root), else 4 (fp32). An NF4 base as a whole: :func:`frozen_base_bytes`."""
        if self.frozen_base_dtype == NF4:
            return NF4_ROOT_BYTES
        return DTYPE_BYTES[self.frozen_base_dtype] if self.frozen_base_dtype else MASTER_BYTES

    def upcasts_frozen_base(self, role: str) -> bool:
        """Whether ``role``'s frozen 16-bit base (an NF4 base's 16-bit root) is cast to another dtype to compute (the
        P40: stored bf16, computed fp32); False when it computes in the dtype it is stored in (t4/v100 fp16, a10
        bf16) or is fp32."""
        stored = self.frozen_base_dtype
        if stored == NF4:
            stored = "bfloat16" if self.dtype == "float32" else self.dtype
        return self.lora_rank_of(role) > 0 and stored is not None and stored != self.dtype

    @property
    def has_lora(self) -> bool:
        """Whether a role trains a LoRA adapter: the actor, or a PPO critic (at its own rank or the actor's)."""
        return self.lora_rank > 0 or (self.has_critic and self.lora_rank_of("critic") > 0)

    def dequantises_frozen_base(self, role: str) -> bool:
        """Whether ``role`` has a LoRA base stored in NF4 (patch 0028): each pass dequantises its layers'
        Linears to the compute dtype, one at a time."""
        return self.lora_rank_of(role) > 0 and self.frozen_base_dtype == NF4

    def checkpointing_of(self, role: str) -> bool:
        """Whether ``role`` (``"actor"`` or ``"critic"``) recomputes its layers in backward (gradient checkpointing)."""
        if role == "critic" and self.critic_gradient_checkpointing is not None:
            return self.critic_gradient_checkpointing
        return self.gradient_checkpointing

    def lora_rank_of(self, role: str) -> int:
        """LoRA rank of ``role`` (``"actor"`` or ``"critic"``); 0 = fully trained."""
        if role == "actor":
            return self.lora_rank
        return self.lora_rank if self.critic_lora_rank is None else self.critic_lora_rank


@dataclass(frozen=True)
class PhaseMemory:
    """Predicted peak of one phase, per GPU, in bytes, and what it is made of.

    ``detail`` says what is on the GPU besides the phase's own tensors and which moment of the
    phase is the peak.
    """

    phase: str
    weights: int = 0
    gradients: int = 0
    optimizer: int = 0
    activations: int = 0
    logits: int = 0
    kv_cache: int = 0
    detail: tuple[str, ...] = ()

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer + self.activations + self.logits + self.kv_cache

    @property
    def title(self) -> str:
        return PHASE_TITLES[self.phase]


@dataclass(frozen=True)
class Plan:
    """The prediction for one :class:`PlanRequest`.

    Attributes:
        phases: the phases that run, in order.
        peak: the phase with the largest total.
        headroom_bytes: allocator headroom added on top (:data:`ALLOCATOR_HEADROOM_BYTES`).
        usable_bytes: ``request.gpu_memory_bytes``.
        margin: the fraction of usable memory a plan may use and still "fit".
        verdict: ``"fits"`` (peak + headroom <= margin x usable), ``"tight"`` (<= usable),
            ``"does not fit"``, or ``"unsupported"`` (verl 0.4.1 cannot run it at any size).
        notes: why the verdict, and any warning.
        unsupported: why verl 0.4.1 cannot run the request (:func:`unsupported_reason`, also in ``notes``), or None.
        lora_notes: the request's LoRA notes (:func:`lora_notes`, also in ``notes``), computed once.
    """

    request: PlanRequest
    phases: tuple[PhaseMemory, ...]
    peak: PhaseMemory
    headroom_bytes: int
    usable_bytes: int
    margin: float
    verdict: str
    notes: tuple[str, ...] = ()
    unsupported: str | None = None
    lora_notes: tuple[str, ...] = ()

    @property
    def required_bytes(self) -> int:
        """Peak allocated plus headroom."""
        return self.peak.total + self.headroom_bytes

    @property
    def budget_bytes(self) -> int:
        return int(self.margin * self.usable_bytes)

    @property
    def fits(self) -> bool:
        return self.verdict == "fits"

    def phase(self, name: str) -> PhaseMemory | None:
        return next((p for p in self.phases if p.phase == name), None)


def gib(value: int | float) -> float:
    return value / GIB


def format_gib(value: int | float) -> str:
    """``value`` bytes as ``"12.3 GiB"`` (one decimal), the form every plan message uses."""
    return f"{value / GIB:.1f} GiB"


def format_gib_against(value: int | float, *limits: int | float) -> tuple[str, ...]:
    """``value`` and each of ``limits`` in bytes as :func:`format_gib` texts, all with as many more decimals (up to
    three) as it takes for ``value`` not to read like a limit it differs from: ``("12.64 GiB", "12.63 GiB")``, not 12.6
    of 12.6 GiB."""
    amounts = (value, *limits)
    for decimals in (1, 2, 3):
        texts = tuple(f"{amount / GIB:.{decimals}f} GiB" for amount in amounts)
        if all(text != texts[0] or limit == value for text, limit in zip(texts[1:], limits)):
            break
    return texts


# --------------------------------------------------------------------------------------
# building blocks (each returns bytes per GPU)
# --------------------------------------------------------------------------------------


def validate_request(request: PlanRequest) -> None:
    """Raise :class:`VerlfitError` for a request verl itself would reject (sizes that do not divide)."""
    r = request
    if r.dtype not in DTYPE_BYTES:
        raise VerlfitError(
            f"dtype {r.dtype!r} is not modelled",
            fix="use float32 (P40), float16 (T4, V100) or bfloat16 (A10/L4)",
            exit_code=2,
        )
    if r.algorithm not in ("ppo", "grpo"):
        raise VerlfitError(f"algorithm {r.algorithm!r} is not supported", fix="use ppo or grpo", exit_code=2)
    if r.rollout not in ("hf", "vllm"):
        raise VerlfitError(f"rollout {r.rollout!r} is not supported", fix="use hf or vllm", exit_code=2)
    if r.attention not in ("sdpa", "eager", "flash_attention_2"):
        raise VerlfitError(
            f"attention {r.attention!r} is not modelled", fix="use sdpa, eager or flash_attention_2", exit_code=2
        )
    positive = {
        "batch size": r.train_batch_size,
        "mini-batch size": r.ppo_mini_batch_size,
        "GPUs": r.gpus,
        "actor micro-batch": r.actor_micro_batch_size,
        "log-prob micro-batch": r.log_prob_micro_batch_size,
        "critic micro-batch": r.critic_micro_batch_size,
        "samples": r.rollout_n,
        "response length": r.max_response_length,
        "GPU memory": r.gpu_memory_bytes,
    }
    for name, value in positive.items():
        if value is None or value <= 0:
            raise VerlfitError(f"{name} must be positive, got {value}", exit_code=2)
    if r.max_prompt_length < 0:
        raise VerlfitError(f"prompt length must not be negative, got {r.max_prompt_length}", exit_code=2)
    if r.longest_prompt_length is not None and r.longest_prompt_length <= 0:
        raise VerlfitError(
            f"longest prompt length must be positive, got {r.longest_prompt_length}",
            fix="give the tokens of the data's longest prompt, or leave it out",
            exit_code=2,
        )
    if r.train_batch_size % r.ppo_mini_batch_size:
        raise VerlfitError(
            f"mini-batch {r.ppo_mini_batch_size} does not divide batch {r.train_batch_size}",
            fix="choose a mini-batch size that divides the batch size",
            exit_code=2,
        )
    if r.train_batch_size % r.gpus:
        raise VerlfitError(
            f"the batch of {r.train_batch_size} prompt{'' if r.train_batch_size == 1 else 's'} does not "
            f"split over {r.gpus} GPUs (verl hands each GPU the same number of prompts)",
            fix=f"use a --batch-size divisible by {r.gpus}",
            exit_code=2,
        )
    if r.per_gpu_mini_batch <= 0 or (r.ppo_mini_batch_size * r.samples) % r.gpus:
        raise VerlfitError(
            f"the mini-batch of {r.ppo_mini_batch_size * r.samples} responses does not split over {r.gpus} GPUs",
            fix="choose a mini-batch size (and --samples) whose responses divide by the number of GPUs",
            exit_code=2,
        )
    for name, micro in (("actor", r.actor_micro_batch_size), ("critic", r.critic_micro_batch_size)):
        if r.per_gpu_mini_batch % micro:
            raise VerlfitError(
                f"{name} micro-batch {micro} does not divide the per-GPU mini-batch of "
                f"{r.per_gpu_mini_batch} responses (fsdp_workers.py:165)",
                fix=f"use a micro-batch size that divides {r.per_gpu_mini_batch}: "
                f"{', '.join(str(d) for d in range(1, r.per_gpu_mini_batch + 1) if r.per_gpu_mini_batch % d == 0)}",
                exit_code=2,
            )
    if r.rollout_micro_batch_size is not None and (
        r.rollout_micro_batch_size <= 0 or r.per_gpu_prompts % r.rollout_micro_batch_size
    ):
        raise VerlfitError(
            f"rollout micro-batch {r.rollout_micro_batch_size} does not divide the per-GPU batch of "
            f"{r.per_gpu_prompts} prompts (DataProto.chunk needs equal chunks)",
            fix=f"use a rollout micro-batch that divides {r.per_gpu_prompts}",
            exit_code=2,
        )
    if r.rollout == "vllm" and not 0 < r.vllm_gpu_memory_utilization < 1:
        raise VerlfitError(
            f"vLLM gpu_memory_utilization must be in (0, 1), got {r.vllm_gpu_memory_utilization}", exit_code=2
        )
    _validate_lora(r)


def _validate_lora(r: PlanRequest) -> None:
    """LoRA ranks are whole numbers >= 0; target modules name Linear layers each LoRA model has (PEFT raises
    "Target modules ... not found in the base model" when none matches)."""
    for name, rank in (("LoRA rank", r.lora_rank), ("critic LoRA rank", r.critic_lora_rank)):
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or rank < 0):
            raise VerlfitError(f"{name} must be a whole number >= 0 (0 = full fine-tuning), got {rank!r}", exit_code=2)
    roles = [role for role in ("actor", "critic") if r.lora_rank_of(role) > 0 and (role == "actor" or r.has_critic)]
    if not roles or isinstance(r.lora_target_modules, str):
        if roles:
            lora_targets(r.shape, roles[0], r.lora_target_modules)  # refuses a string other than all-linear
        _validate_lora_rank_bound(r, roles)
        return
    names = tuple(r.lora_target_modules)
    known = (*LORA_LAYER_TARGETS, LORA_HEAD_TARGET)
    if "score" in names:
        raise VerlfitError(
            "LoRA target modules score: the critic's value head is trained in full with LoRA "
            "(modules_to_save, patch 0011), so PEFT puts no adapter on it",
            fix="drop score from --lora-target-modules",
            exit_code=2,
        )
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise VerlfitError(
            f"LoRA target modules {', '.join(unknown) if unknown else '(none)'}: not a Linear layer of a "
            f"{r.shape.model_type} model that the planner models",
            fix=f"use {LORA_ALL_LINEAR} or names among {', '.join(known)}",
            exit_code=2,
        )
    for role in roles:
        if not lora_targets(r.shape, role, names):
            raise VerlfitError(
                f"LoRA target modules {', '.join(names)}: none is in the {role}'s model, so PEFT would "
                'refuse it ("Target modules ... not found in the base model")',
                fix=f"add a layer projection such as {', '.join(LORA_LAYER_TARGETS[:2])}",
                exit_code=2,
            )
    _validate_lora_rank_bound(r, roles)


def _validate_lora_rank_bound(r: PlanRequest, roles: list[str]) -> None:
    """A LoRA rank above :func:`lora_rank_bound` of its role is refused (exit status 2)."""
    for role in roles:
        rank = r.lora_rank_of(role)
        bound, layer = lora_rank_bound(r.shape, role, r.lora_target_modules)
        if rank > bound:
            flag = (
                "--critic-lora-rank"
                if role == "critic" and r.critic_lora_rank is not None and r.critic_lora_rank != r.lora_rank
                else "--lora-rank"
            )
            inputs, outputs, _count = lora_linear_shapes(r.shape, role)[layer]
            raise VerlfitError(
                f"{flag} {rank}: above {bound}, the largest rank a LoRA update of the {role}'s targeted "
                f"layers can have on {r.shape.name} "
                f"(min(in, out features); the widest is {layer}, {inputs} -> {outputs}): a larger rank "
                "adds memory and no capacity",
                fix=f"use {flag} {bound} or less (e.g. {min(bound, LORA_SUGGESTED_RANK)})",
                exit_code=2,
            )


def lora_notes(request: PlanRequest) -> tuple[str, ...]:
    """What LoRA changes in a plan, one line per role with an adapter."""
    r = request
    notes = []
    for role in ("actor", "critic"):
        rank = r.lora_rank_of(role)
        if rank <= 0 or (role == "critic" and not r.has_critic):
            continue
        total, trained = role_parameters(r, role)
        base = total - trained
        targets = lora_targets(r.shape, role, r.lora_target_modules)
        head = f" + the value head score in full ({r.shape.hidden_size + 1:,})" if role == "critic" else ""
        line = (
            f"LoRA {role}: rank {rank} on {', '.join(targets)}: {trained:,} parameters train "
            f"({trained / base:.2%} of {base:,}: adapters{head}); the base is frozen, with no gradients or "
            "AdamW states"
        )
        if r.dequantises_frozen_base(role):
            quantised = nf4_weights(r.shape, role)
            root = "upcast to float32 by FSDP, " if r.upcasts_frozen_base(role) else ""
            line += (
                f"; its layers' Linear weights ({quantised:,}) are stored in NF4 (patch 0028: "
                f"{NF4_BYTES_PER_WEIGHT:.4f} bytes a weight with the quantisation constants), the layers' norms and "
                f"biases in {r.dtype}, embeddings and head in 16 bits ({root}{format_gib(frozen_base_bytes(r, role))} "
                f"in all); each Linear dequantised to {r.dtype} for its matmul; the trained ones in float32"
            )
        elif r.frozen_base_dtype:
            upcast = r.upcasts_frozen_base(role)
            computed = f"computed in {r.dtype}: " + ("FSDP upcasts one unit at a time" if upcast else "as stored")
            line += (
                f"; its weights are stored in {r.frozen_base_dtype} (patch 0026: 2 bytes a parameter, "
                f"{format_gib(base * 2)}; {computed}), the trained ones in float32"
            )
        else:
            line += f"; its weights are stored in float32 (4 bytes a parameter, {format_gib(base * 4)})"
        if role == "actor" and r.has_reference:
            line += "; the reference is the actor with its adapter disabled (no second model)"
        notes.append(line)
    if notes:
        notes.append(LORA_CALIBRATION_NOTE)
    return tuple(notes)


def _shard(params: int, gpus: int) -> int:
    return math.ceil(params / gpus)


def layer_activation_bytes(
    shape: ModelShape, tokens: int, seq_len: int, dtype: str, attention: str, adapter_width: int = 0
) -> int:
    """Bytes one decoder layer saves for backward over ``tokens`` tokens (docs/plan.md §3); ``adapter_width``:
    LoRA's lora_A outputs per token (rank per targeted Linear), saved in the compute dtype."""
    c = LAYER_ACTIVATION_BYTES[dtype]
    cb = DTYPE_BYTES[dtype]
    per_token = (
        c["hidden"] * shape.hidden_size
        + c["kv"] * shape.kv_dim
        + c["intermediate"] * shape.intermediate_size
        + adapter_width * cb
    )
    per_token += 2 * (shape.kv_dim if attention == "flash_attention_2" else shape.q_dim) * cb
    if attention == "eager":
        per_token += shape.num_attention_heads * seq_len * EAGER_SCORE_BYTES[dtype]
    return tokens * per_token


def mask_bytes(batch: int, seq_len: int, dtype: str, attention: str, kv_len: int | None = None) -> int:
    """The 4-D additive attention mask SDPA/eager get with left padding (batch, 1, seq, kv_len), shared by all
    layers; ``kv_len`` (the key columns) defaults to ``seq_len``: a StaticCache makes it the cache's length."""
    if attention == "flash_attention_2":
        return 0
    return batch * seq_len * (seq_len if kv_len is None else kv_len) * DTYPE_BYTES[dtype]


def training_activation_bytes(
    shape: ModelShape,
    batch: int,
    seq_len: int,
    dtype: str,
    attention: str,
    checkpointing: bool,
    adapter_widths: tuple[int, int] = (0, 0),
) -> tuple[int, int]:
    """Activations of a forward+backward over ``batch`` sequences: (when the backward starts, the
    largest while it runs through the layers). ``adapter_widths``: LoRA's saved lora_A outputs per token,
    (per decoder layer, in the head) (:func:`_adapter_widths`)."""
    tokens = batch * seq_len
    cb = DTYPE_BYTES[dtype]
    layer = layer_activation_bytes(shape, tokens, seq_len, dtype, attention, adapter_widths[0])
    fixed = (
        tokens * shape.hidden_size * FINAL_NORM_BYTES[dtype]
        + mask_bytes(batch, seq_len, dtype, attention)
        + tokens * adapter_widths[1] * cb
    )
    if checkpointing:
        saved = shape.num_layers * tokens * shape.hidden_size * cb + fixed  # each layer keeps only its input
        return saved, saved + layer + int(BACKWARD_WORKSPACE_LAYERS * layer)  # one layer recomputed, then its backward
    saved = shape.num_layers * layer + fixed
    return saved, saved + int(BACKWARD_WORKSPACE_LAYERS * layer)


def forward_activation_bytes(
    shape: ModelShape,
    batch: int,
    seq_len: int,
    dtype: str,
    attention: str,
    kv_len: int | None = None,
    kv_bytes: int | None = None,
) -> int:
    """Activations alive in a forward without gradients (one layer at a time) over ``batch`` x ``seq_len`` tokens.

    ``kv_len``: the key/value columns attention reads (default ``seq_len``; a StaticCache's prefill reads the
    whole cache, :func:`static_decode_bytes`); ``kv_bytes``: bytes per element of the K and V the attention kernel
    gets (default the compute dtype's)."""
    tokens = batch * seq_len
    kv_len = seq_len if kv_len is None else kv_len
    c = NO_GRAD_LAYER_BYTES[dtype]
    cb = DTYPE_BYTES[dtype]
    per_token = c["hidden"] * shape.hidden_size + c["intermediate"] * shape.intermediate_size
    total = tokens * per_token + batch * kv_len * 2 * (
        shape.kv_dim if attention == "flash_attention_2" else shape.q_dim
    ) * (cb if kv_bytes is None else kv_bytes)
    total += mask_bytes(batch, seq_len, dtype, attention, kv_len)
    if attention == "eager":
        total += batch * shape.num_attention_heads * seq_len * kv_len * EAGER_SCORE_BYTES[dtype]
    return total


def _logit_bytes(table, request: PlanRequest, batch: int, role: str) -> int:
    full, response = table[(request.dtype, request.fused_kernels)]
    v = request.shape.vocab_size
    return batch * v * (request.seq_len_of(role) * full + request.max_response_length * response)


def kv_cache_bytes(shape: ModelShape, sequences: int, tokens: int, dtype: str) -> int:
    """HF generate's DynamicCache: K and V for every layer, KV heads only (before repeat_kv)."""
    return 2 * shape.num_layers * sequences * tokens * shape.kv_dim * DTYPE_BYTES[dtype]


# Patch 0022's StaticDecoder (verl/workers/rollout/static_decode.py) keeps, besides its StaticCache, the step's
# inputs and outputs at fixed addresses for graph replay: the attention mask (batch, cache columns) in int64, the
# token, position and captured-token rows (batch) in int64, the finished flags (batch) in bool.
STATIC_DECODE_MASK_BYTES = 8  # derived: static_decode.py, self.mask (torch.long)
STATIC_DECODE_ROW_BYTES = (
    3 * 8 + 1
)  # derived: self.tokens, self.positions, graph_token (torch.long), self.finished (torch.bool)


def static_decode_bytes(
    shape: ModelShape, sequences: int, cache_len: int, dtype: str, attention: str, cache_dtype: str = "float32"
) -> tuple[int, int]:
    """Patch 0022's CUDA-graph decoding of ``sequences`` rows into a cache of ``cache_len`` columns (prompt +
    response): (what it holds for the whole call, the K and V bytes per element attention then gets).

    Held: transformers 4.51's StaticCache, allocated whole at the start (``cache_utils.py`` StaticCache.__init__:
    K and V of (batch, KV heads, cache_len, head_dim) for every layer), in ``cache_dtype`` (:func:`static_cache_dtype`:
    the dtype of the parameters it decodes with, ``StaticCache(dtype=param.dtype)``, or fp32 where the rollout
    computes in fp32, patch 0026's ``cache_dtype``), plus the decoder's static buffers
    (:data:`STATIC_DECODE_MASK_BYTES`, :data:`STATIC_DECODE_ROW_BYTES`). The captured step's logits and sampling
    tensors live inside one step (freed within the capture, reused by the graph's pool) and are
    :data:`SAMPLING_BYTES_PER_VOCAB` as with ``generate``.

    Per element: SDPA and eager repeat the cache to every head (``repeat_kv``), and under 16-bit autocast SDPA takes
    16-bit copies of an fp32 cache; FlashAttention-2 gets the KV heads cast to the compute dtype.
    """
    cb, kb = DTYPE_BYTES[dtype], DTYPE_BYTES[cache_dtype]
    held = (
        kv_cache_bytes(shape, sequences, cache_len, cache_dtype)
        + sequences * cache_len * STATIC_DECODE_MASK_BYTES
        + sequences * STATIC_DECODE_ROW_BYTES
    )
    if attention == "flash_attention_2":
        return held, cb
    return held, kb + (cb if cb != kb else 0)


def static_cache_dtype(request: PlanRequest) -> str:
    """The dtype of patch 0022's StaticCache in the actor's rollout: that of the first parameter it decodes with
    (static_decode.py, ``StaticCache(dtype=param.dtype)``: the embedding, a frozen parameter with LoRA), unless the
    rollout computes in fp32 (patch 0026 passes ``cache_dtype=torch.float32`` with autocast off). So a LoRA base
    stored in 16 bits and generated under 16-bit autocast (t4/v100 fp16, a10 bf16) decodes into a 16-bit cache, as
    ``generate``'s keys are computed; the P40's fp32 rollout and fp32 masters into an fp32 one."""
    if request.dtype != "float32" and request.lora_rank_of("actor") > 0 and request.frozen_base_dtype:
        # an NF4 base's embedding is stored in the compute dtype (its root, patch 0028)
        return request.dtype if request.frozen_base_dtype == NF4 else request.frozen_base_dtype
    return "float32"


def lora_linear_shapes(shape: ModelShape, role: str) -> dict[str, tuple[int, int, int]]:
    """The Linear layers LoRA can target in ``role``'s model (``"actor"``: ``AutoModelForCausalLM``;
    ``"critic"``: ``AutoModelForTokenClassification``, one label): name -> (in features, out features, how many)."""
    h, q, kv, i, n = shape.hidden_size, shape.q_dim, shape.kv_dim, shape.intermediate_size, shape.num_layers
    linears = {
        "q_proj": (h, q, n),
        "k_proj": (h, kv, n),
        "v_proj": (h, kv, n),
        "o_proj": (q, h, n),
        "gate_proj": (h, i, n),
        "up_proj": (h, i, n),
        "down_proj": (i, h, n),
    }
    if role == "actor":
        linears[LORA_HEAD_TARGET] = (h, shape.vocab_size, 1)
    return linears


def lora_rank_bound(
    shape: ModelShape, role: str, target_modules: str | tuple[str, ...] = LORA_ALL_LINEAR
) -> tuple[int, str]:
    """(the largest useful LoRA rank for ``role``, the layer that sets it): the largest ``min(in, out features)``
    over the targeted Linear layers. A layer's LoRA update ``B @ A`` has rank at most ``min(in, out)``, so a rank
    above the bound adds parameters and memory to every layer and capacity to none (Qwen2.5-0.5B all-linear: 896,
    the hidden size; k_proj/v_proj, 896 -> 128, are full-rank from 128 on).

    Raises:
        VerlfitError: ``target_modules`` as :func:`lora_targets`.
    """
    linears = lora_linear_shapes(shape, role)
    names = lora_targets(shape, role, target_modules) or tuple(linears)
    layer = max(names, key=lambda name: min(linears[name][0], linears[name][1]))
    return min(linears[layer][0], linears[layer][1]), layer


def lora_targets(shape: ModelShape, role: str, target_modules: str | tuple[str, ...]) -> tuple[str, ...]:
    """The Linear names PEFT adapts in ``role``'s model for verl's ``target_modules``.

    ``"all-linear"``: every Linear but the output embeddings (PEFT ``_maybe_include_all_linear_layers``): the
    seven layer projections; the critic's ``score`` is a module to save (patch 0011), which PEFT does not adapt.
    A tuple: the names in it that ``role``'s model has (PEFT matches a name against the end of each module's path).
    """
    if isinstance(target_modules, str):
        if target_modules != LORA_ALL_LINEAR:
            raise VerlfitError(
                f"LoRA target modules {target_modules!r}: the planner models {LORA_ALL_LINEAR!r} or a list "
                "of Linear names",
                fix=f"use {LORA_ALL_LINEAR} or names among {', '.join(LORA_LAYER_TARGETS)}, {LORA_HEAD_TARGET}",
                exit_code=2,
            )
        return LORA_LAYER_TARGETS
    known = lora_linear_shapes(shape, role)
    return tuple(name for name in known if name in target_modules)


def adapter_parameters(
    shape: ModelShape, role: str, rank: int, target_modules: str | tuple[str, ...] = LORA_ALL_LINEAR
) -> int:
    """Parameters LoRA adds to ``role``'s model, all of them trained: ``rank * (in + out)`` per targeted Linear
    (lora_A is rank x in, lora_B out x rank, no bias), and for the critic the trained copy of its value head
    (``hidden + 1``: PEFT's modules_to_save, patch 0011). Qwen2.5-0.5B, rank 32, all-linear: 17,596,416 (actor),
    17,597,313 (critic): :func:`lora_adapter_work`'s matmul parameters, and the critic's head."""
    if rank <= 0:
        return 0
    adapters, _ = lora_adapter_work(shape, role, rank, target_modules)
    return adapters + (shape.hidden_size + 1 if role == "critic" else 0)


def nf4_linear_shapes(shape: ModelShape, role: str) -> list[tuple[int, int, int]]:
    """(in features, out features, how many) of each Linear patch 0028 stores in NF4 in ``role``'s model: every
    Linear of the decoder layers, adapted or not (frozen_base_nf4.py); the ``lm_head`` stays in the 16-bit root."""
    linears = lora_linear_shapes(shape, role)
    return [linears[n] for n in LORA_LAYER_TARGETS]


def nf4_weights(shape: ModelShape, role: str) -> int:
    """Weights patch 0028 stores in NF4 in ``role``'s model (:func:`nf4_linear_shapes`); Qwen2.5-7B: 6,525,288,448
    (28 layers x 233,046,016)."""
    return sum(n_in * n_out * count for n_in, n_out, count in nf4_linear_shapes(shape, role))


def frozen_base_bytes(request: PlanRequest, role: str) -> int:
    """Bytes ``role``'s frozen base takes per GPU as stored (0 without one): its frozen parameters at
    :attr:`PlanRequest.frozen_bytes` (fp32, or 16 bits with patch 0026), sharded over the GPUs; with an NF4 base
    (patch 0028, one GPU) the layers' Linears at :data:`NF4_BYTES_PER_WEIGHT`, the layers' other parameters
    (norms, biases) in the compute dtype and the root (embeddings, LM head or value head, final norm) in 16 bits.
    Qwen2.5-7B actor on the a10 profile (bf16): 16-bit 15,231,233,024 bytes (14.19 GiB), NF4 5,546,851,072
    (5.17 GiB)."""
    total, trained = role_parameters(request, role)
    frozen = total - trained
    if not request.dequantises_frozen_base(role):
        return _shard(frozen, request.gpus) * request.frozen_bytes
    quantised = nf4_weights(request.shape, role)
    root = root_unit_parameters(request.shape, critic=role == "critic")
    rest = frozen - quantised - root
    return math.ceil(quantised * NF4_BYTES_PER_WEIGHT) + rest * request.compute_bytes + root * NF4_ROOT_BYTES


def lora_adapter_work(shape: ModelShape, role: str, rank: int, target_modules="all-linear") -> tuple[int, int]:
    """(adapter matmul parameters, adapted Linears) of ``role``'s LoRA at ``rank`` (0: ``(0, 0)``): ``rank (in +
    out)`` per targeted Linear (lora_A rank x in, lora_B out x rank: a token's adapter forward is 2x that in
    FLOPs), summed over every layer, and how many Linears carry an adapter (each one's lora_A and lora_B are
    FSDP units of their own: ``utils/fsdp_utils.py:98-104``). The critic's trained value-head copy (patch 0011,
    ``hidden + 1`` parameters) is not an adapter's matmul and is left out. Targets as
    :func:`lora_targets`; Qwen2.5-1.5B, rank 32, all-linear: (36,929,536, 196) for the actor."""
    if rank <= 0:
        return 0, 0
    linears = lora_linear_shapes(shape, role)
    names = lora_targets(shape, role, target_modules)
    return sum(rank * (linears[n][0] + linears[n][1]) * linears[n][2] for n in names), sum(linears[n][2] for n in names)


@dataclass(frozen=True)
class RoleLora:
    """One role's LoRA geometry at one rank, as the time model reads it (:func:`role_lora`, built once per estimate).

    Attributes:
        rank: the LoRA rank (0: fully trained; every other field is then 0 or False but ``upcasts_base``).
        adapter: (adapter matmul parameters, adapted Linears): :func:`lora_adapter_work`.
        parameters: the parameters LoRA adds, all trained: :func:`adapter_parameters`.
        upcasts_base: the role's frozen base is cast to compute: a 16-bit base upcast
            (:meth:`PlanRequest.upcasts_frozen_base`) or an NF4 base dequantised
            (:meth:`PlanRequest.dequantises_frozen_base`), at the request's own rank.
    """

    rank: int
    adapter: tuple[int, int]
    parameters: int
    upcasts_base: bool


def role_lora(request: PlanRequest, role: str, rank: int) -> RoleLora:
    """:class:`RoleLora` of ``role`` (``"actor"`` or ``"critic"``) in ``request`` at ``rank``.

    Raises:
        VerlfitError: ``request.lora_target_modules`` as :func:`lora_targets`.
    """
    targets = request.lora_target_modules
    return RoleLora(
        rank=rank,
        adapter=lora_adapter_work(request.shape, role, rank, targets),
        parameters=adapter_parameters(request.shape, role, rank, targets),
        upcasts_base=request.upcasts_frozen_base(role) or request.dequantises_frozen_base(role),
    )


def _largest_adapter_module(shape: ModelShape, role: str, rank: int, target_modules) -> int:
    """Parameters of the largest trained leaf (a lora_A, a lora_B, the critic's trained value head): each is an
    FSDP unit of its own (fsdp_utils.py:98-104)."""
    linears = lora_linear_shapes(shape, role)
    largest = max((rank * max(linears[name][:2]) for name in lora_targets(shape, role, target_modules)), default=0)
    return max(largest, shape.hidden_size + 1) if role == "critic" else largest


def _adapter_widths(shape: ModelShape, role: str, rank: int, target_modules) -> tuple[int, int]:
    """Values lora_A's outputs add per token: (per decoder layer, in the head): ``rank`` per targeted Linear."""
    if rank <= 0:
        return 0, 0
    targets = lora_targets(shape, role, target_modules)
    layer = sum(rank for name in targets if name in LORA_LAYER_TARGETS)
    return layer, rank * (LORA_HEAD_TARGET in targets)


# --------------------------------------------------------------------------------------
# phases
# --------------------------------------------------------------------------------------


@dataclass
class _State:
    """What stays on the GPU between phases, per role (bytes per GPU)."""

    actor_weights: int
    actor_optimizer: int
    critic_weights: int
    critic_optimizer: int
    actor_weights_full: int  # the actor's shard, even when offloaded (loaded for its own phases)
    actor_optimizer_full: int
    critic_weights_full: int
    critic_optimizer_full: int
    ref_weights: int = 0  # the reference model's GPU copy left behind by its forward (_ref_resident_bytes)


def _ref_resident_bytes(request: PlanRequest) -> int:
    """Bytes of the reference model that stay on the GPU between phases.

    verl wraps the ref in FSDP1 with ``CPUOffload(offload_params=True)`` and ``use_orig_params=False``
    (``fsdp_workers.py:319-327``). On one GPU FSDP1 switches to ``NO_SHARD`` (torch
    ``fsdp/_init_utils.py`` ``_init_core_state``: world size 1). Each unit's pre-forward copies its CPU flat
    parameter to a new GPU tensor (``_flat_param.py`` ``pre_unshard`` -> ``flat_param_to``) and points the
    module's attributes at plain-tensor views of it (``_use_unsharded_views(as_params=False)``); the
    post-forward reshard only points ``flat_param.data`` back at the CPU shard
    (``_use_sharded_flat_param``: views are reset only with ``use_orig_params``), and NO_SHARD frees no
    unsharded buffer. So the views keep every unit's GPU copy alive until the next ref forward replaces it:
    the whole ref, in its own dtype (verlfit keeps it equal to the compute dtype: fp32 on the P40 via
    ``ref.fsdp_config.model_dtype``/``param_dtype``, bf16 on the A10 by verl's defaults, ``fsdp_workers.py:214-216``,
    ``292-298``), from the first step's ref log-prob on. With several GPUs the units are FULL_SHARD and
    freed after forward, and verl reshards the root itself (``fsdp_workers.py:756-758``): nothing stays.
    With a LoRA actor there is no reference model: the actor with its adapter disabled is the reference
    (``ray_trainer.py:338``, ``783``), so nothing stays.
    """
    if not request.has_reference or request.gpus > 1 or request.lora_rank > 0:
        return 0
    return request.shape.actor_parameters * request.compute_bytes


def role_parameters(request: PlanRequest, role: str) -> tuple[int, int]:
    """(all parameters, trained parameters) of ``role``'s model (``"actor"`` or ``"critic"``).

    Full fine-tuning trains all of them; with LoRA the model is the frozen base plus the adapter
    (:func:`adapter_parameters`) and only the adapter trains.
    """
    s = request.shape
    base = s.actor_parameters if role == "actor" else s.critic_parameters
    rank = request.lora_rank_of(role)
    if rank <= 0:
        return base, base
    adapter = adapter_parameters(s, role, rank, request.lora_target_modules)
    return base + adapter, adapter


def _state(request: PlanRequest) -> _State:
    r = request
    actor_all, actor_trained = role_parameters(r, "actor")
    critic_all, critic_trained = role_parameters(r, "critic")
    # masters: the trained parameters (all, or a LoRA adapter) in fp32, a LoRA base in its storage dtype (fp32, or
    # 16 bits with patch 0026); AdamW: the trained parameters only
    aw = frozen_base_bytes(r, "actor") + _shard(actor_trained, r.gpus) * MASTER_BYTES
    ao = _shard(actor_trained, r.gpus) * ADAM_STATE_BYTES
    cw = 0
    if r.has_critic:
        cw = frozen_base_bytes(r, "critic") + _shard(critic_trained, r.gpus) * MASTER_BYTES
    co = _shard(critic_trained, r.gpus) * ADAM_STATE_BYTES if r.has_critic else 0
    return _State(
        actor_weights=0 if r.actor_param_offload else aw,
        actor_optimizer=0 if r.actor_optimizer_offload else ao,
        critic_weights=0 if r.critic_param_offload else cw,
        critic_optimizer=0 if r.critic_optimizer_offload else co,
        actor_weights_full=aw,
        actor_optimizer_full=ao,
        critic_weights_full=cw,
        critic_optimizer_full=co,
        ref_weights=_ref_resident_bytes(r),
    )


def _resident_note(request: PlanRequest, st: _State, own: str) -> str:
    parts = []
    if own != "actor":
        parts.append(f"actor weights {format_gib(st.actor_weights)}" if st.actor_weights else "actor weights offloaded")
        parts.append(f"actor AdamW {format_gib(st.actor_optimizer)}" if st.actor_optimizer else "actor AdamW offloaded")
    if request.has_critic and own != "critic":
        parts.append(
            f"critic weights {format_gib(st.critic_weights)}" if st.critic_weights else "critic weights offloaded"
        )
        parts.append(
            f"critic AdamW {format_gib(st.critic_optimizer)}" if st.critic_optimizer else "critic AdamW offloaded"
        )
    if st.ref_weights and own != "ref":
        parts.append(f"reference model {format_gib(st.ref_weights)} (left on the GPU by its last forward)")
    return "resident from other roles: " + ", ".join(parts) if parts else ""


def root_unit_parameters(shape: ModelShape, critic: bool = False) -> int:
    """Parameters FSDP keeps in the root unit when it wraps each decoder layer of ``shape`` on its own
    (verl's default ``get_fsdp_wrap_policy``, ``verl/utils/fsdp_utils.py``): everything outside the layers
    (embedding, final norm, and ``lm_head``, or with ``critic`` the critic's ``score``)."""
    total = shape.critic_parameters if critic else shape.actor_parameters
    return total - shape.num_layers * shape.layer_parameters


def _actor_unit_params(request: PlanRequest) -> int:
    """Parameters of the actor's largest FSDP unit: the whole model with HF rollout (no wrap
    policy, fsdp_workers.py:305-308) unless LoRA is on (patch 0009), else the root (embedding, norm, lm_head) +
    layers in flight."""
    s = request.shape
    if request.rollout == "hf" and request.lora_rank == 0:
        return s.actor_parameters
    # with LoRA, patch 0009 keeps verl's LoRA wrap policy for the HF rollout too: layers and adapters are units
    return root_unit_parameters(s) + LAYERS_IN_FLIGHT * s.layer_parameters


def _critic_unit_params(request: PlanRequest) -> int:
    s = request.shape
    return root_unit_parameters(s, critic=True) + LAYERS_IN_FLIGHT * s.layer_parameters


def _compute_copy(request: PlanRequest, unit_params: int, role: str) -> int:
    """Unsharded / compute-dtype parameters FSDP materialises for ``role``'s largest units (``unit_params``: the root
    and the layers in flight): none on one GPU when the units are stored in the compute dtype (fp32 masters on the
    P40; a LoRA base stored in 16 bits and computed in them on the t4/v100/a10 profiles, patch 0026); the units in
    the compute dtype otherwise: bf16/fp16 copies of fp32 masters, or the P40's fp32 upcast of a 16-bit LoRA base
    (FSDP frees each after its unit's forward and backward: at most the root and one layer at once in
    tests/patches/test_frozen_base.py; :data:`LAYERS_IN_FLIGHT` counts the prefetched layer too)."""
    if request.gpus == 1 and request.dequantises_frozen_base(role):
        # patch 0028: the layer units are stored in the compute dtype (packed NF4, norms, biases): FSDP casts only a
        # 16-bit root to fp32 (the P40); each Linear dequantises its weight to the compute dtype, one at a time
        root = root_unit_parameters(request.shape, critic=role == "critic") if request.upcasts_frozen_base(role) else 0
        return (root + largest_nf4_linear(request, role)) * request.compute_bytes
    if request.gpus == 1:
        lora_16_bit = request.lora_rank_of(role) > 0 and request.frozen_base_dtype is not None
        stored = request.frozen_bytes if lora_16_bit else MASTER_BYTES
        if not request.upcasts_frozen_base(role) and stored == request.compute_bytes:
            return 0
    return unit_params * request.compute_bytes


def largest_nf4_linear(request: PlanRequest, role: str) -> int:
    """Weights of the largest Linear ``role`` stores in NF4 (0 without an NF4 base): the dequantised weight in
    flight during its matmul (bnb.matmul_4bit dequantises, then F.linear; the backward dequantises again)."""
    if not request.dequantises_frozen_base(role):
        return 0
    return max(n_in * n_out for n_in, n_out, _ in nf4_linear_shapes(request.shape, role))


def _root_compute_copy(request: PlanRequest, role: str) -> int:
    """Bytes of ``role``'s root unit (embeddings, final norm, LM head or value head) in the compute dtype among what
    :func:`_compute_copy` counts: on one GPU, FSDP1 runs NO_SHARD and frees a unit's mixed-precision copy in
    ``post_reshard``, which the root runs when the model's forward returns (torch/distributed/fsdp/_flat_param.py
    ``FlatParamHandle.post_reshard``), and casts it again for the LM head's backward once the logits' gradient has
    arrived (tests/patches/test_frozen_base.py samples both moments). So it meets one logits-sized tensor (the LM
    head's output, then its gradient), never the log-prob and entropy temporaries verl makes from the logits after
    the forward (:func:`_root_copy_meets_logits`). Counted so only where a 16-bit LoRA or NF4 base's root is upcast
    to fp32 (:meth:`PlanRequest.upcasts_frozen_base`, the p40 profile), where the copy is largest and was measured
    (docs/benchmarks.md section 4.10); the bf16/fp16 copies of fp32 masters on the other profiles free the same
    way, but the logit terms of those dtypes were calibrated with the copy counted beside them
    (:data:`LOGPROB_LOGIT_BYTES`), so they keep it. 0 on several GPUs (the root stays gathered from its forward to
    its backward) and otherwise. Qwen2.5-7B actor on the p40 profile with a 16-bit or NF4 base (the fp32 copy of
    its bf16 root, embeddings and LM head untied): 4,359,958,528 bytes (4.06 GiB)."""
    if request.gpus != 1 or not request.upcasts_frozen_base(role):
        return 0
    return root_unit_parameters(request.shape, critic=role == "critic") * request.compute_bytes


def _root_copy_meets_logits(weights: int, logits: int, one_copy: int, root_copy: int) -> tuple[int, int, str]:
    """(weights, logits, which moment) of a pass's peak around its logits: the root's compute copy (``root_copy``
    bytes, counted in ``weights``) lives beside one logits-sized tensor (``one_copy`` bytes: the LM head's output or
    its gradient), and is freed while the log-prob and entropy temporaries (``logits`` bytes, the LM head's output
    among them) live (:func:`_root_compute_copy`); the larger of the two moments. Without a root copy: unchanged."""
    if root_copy == 0 or logits >= root_copy + one_copy:
        return weights - root_copy, logits, "log-probs"
    return weights, one_copy, "LM head"


def _rollout(request: PlanRequest, st: _State) -> PhaseMemory:
    r, s = request, request.shape
    weights = st.actor_weights_full + st.critic_weights + st.ref_weights
    optimizer = st.actor_optimizer + st.critic_optimizer
    notes = [_resident_note(r, st, "actor")]
    if r.rollout == "vllm":
        total_card = r.gpu_memory_bytes + CUDA_CONTEXT_BYTES
        vllm_weights = s.actor_parameters * r.compute_bytes
        pool = int(r.vllm_gpu_memory_utilization * total_card)
        if r.actor_param_offload:
            weights -= st.actor_weights_full  # fsdp_vllm.py: FSDP params go back to CPU once synced
        notes.append(
            f"vLLM holds {r.vllm_gpu_memory_utilization:.0%} of the card ({format_gib(pool)}): its weights "
            f"{format_gib(vllm_weights)} and KV cache"
        )
        return PhaseMemory(
            "rollout",
            weights=weights + vllm_weights,
            optimizer=optimizer,
            kv_cache=max(pool - vllm_weights, 0),
            detail=tuple(n for n in notes if n),
        )
    prompts = r.rollout_prompts_per_call
    sequences = prompts * r.samples
    if r.gpus > 1:
        # summon_full_params gathers the model in its stored dtypes (hf_rollout.py:108): fp32 masters, or a LoRA
        # base in 16 bits with fp32 adapters (patch 0026)
        actor_all, actor_trained = role_parameters(r, "actor")
        weights += (actor_all - actor_trained) * r.frozen_bytes + actor_trained * MASTER_BYTES
    if r.dequantises_frozen_base("actor"):
        dequantised = largest_nf4_linear(r, "actor") * r.compute_bytes
        weights += dequantised
        notes.append(
            f"frozen base in NF4: each Linear dequantised to {SHORT_DTYPE_NAMES[r.dtype]} for its matmul, one at a "
            f"time, the largest {format_gib(dequantised)}"
        )
    if r.upcasts_frozen_base("actor"):
        # patch 0026's upcast_for_compute: each module computes with an fp32 copy of its 16-bit parameters, one at a
        # time; the largest is the LM head (vocabulary x hidden)
        weights += s.vocab_size * s.hidden_size * MASTER_BYTES
        head = format_gib(s.vocab_size * s.hidden_size * MASTER_BYTES)
        stored = "bfloat16 (the NF4 base's embeddings and head)" if r.frozen_base_dtype == NF4 else r.frozen_base_dtype
        notes.append(
            f"frozen base stored in {stored}, generated in fp32: one module's fp32 copy at a "
            f"time, the largest the LM head's {head}"
        )
    cb = r.compute_bytes
    rep = s.kv_dim if r.attention == "flash_attention_2" else s.q_dim
    if r.cuda_graph:
        # patch 0022: the StaticCache of the padded width (trim_padding narrows a micro-batch only to its longest
        # prompt), whole from the prefill on, which then attends over all its columns; no torch.cat while decoding
        cache_dtype = static_cache_dtype(r)
        kv, kv_bytes = static_decode_bytes(s, sequences, r.rollout_seq_len, r.dtype, r.attention, cache_dtype)
        prefill = forward_activation_bytes(
            s, sequences, r.rollout_prompt_length, r.dtype, r.attention, kv_len=r.rollout_seq_len, kv_bytes=kv_bytes
        )
        decode = sequences * r.rollout_seq_len * 2 * rep * kv_bytes  # one layer's cache as attention gets it
        notes.append(
            f"CUDA-graph decoding (patch 0022): a static KV cache of {r.rollout_seq_len} columns in "
            f"{SHORT_DTYPE_NAMES[cache_dtype]}, "
            f"{format_gib(kv)} with the decoder's buffers"
        )
    else:
        kv = kv_cache_bytes(s, sequences, r.rollout_seq_len, r.dtype)
        prefill = forward_activation_bytes(s, sequences, r.rollout_prompt_length, r.dtype, r.attention)
        decode = (
            sequences * r.rollout_seq_len * 2 * (rep + s.kv_dim) * cb
        )  # repeat_kv of one layer's cache + DynamicCache's torch.cat copy
    sampling = sequences * s.vocab_size * SAMPLING_BYTES_PER_VOCAB
    notes.append(
        f"{prompts} prompt{'' if prompts == 1 else 's'} x {r.samples} per generate call = {sequences} "
        f"sequence{'' if sequences == 1 else 's'} of {r.rollout_seq_len} tokens"
    )
    return PhaseMemory(
        "rollout",
        weights=weights,
        optimizer=optimizer,
        activations=max(prefill, decode),
        logits=sampling,
        kv_cache=kv,
        detail=tuple(n for n in notes if n),
    )


def _old_log_prob(request: PlanRequest, st: _State) -> PhaseMemory:
    r, s = request, request.shape
    b = r.log_prob_micro_batch_size
    weights = (
        st.actor_weights_full + _compute_copy(r, _actor_unit_params(r), "actor") + st.critic_weights + st.ref_weights
    )
    row = ROW_LOOP_COPIES * r.max_response_length * s.vocab_size * 4 if not r.fused_kernels else 0
    logits = max(_logit_bytes(LOGPROB_LOGIT_BYTES, r, b, "actor"), _logit_bytes(REF_LOGIT_BYTES, r, b, "actor") + row)
    one_copy = b * s.vocab_size * r.seq_len_of("actor") * LOGPROB_LOGIT_BYTES[(r.dtype, r.fused_kernels)][0]
    root_copy = _root_compute_copy(r, "actor")
    weights, logits, moment = _root_copy_meets_logits(weights, logits, one_copy, root_copy)
    root_note = (
        f"the root unit's fp32 copy ({format_gib(root_copy)}) is freed when the forward returns: "
        + (
            "peak at the log-probs and entropy, without it"
            if moment == "log-probs"
            else "peak at the LM head's forward, with it and the logits"
        )
        if root_copy
        else None
    )
    return PhaseMemory(
        "old_log_prob",
        weights=weights,
        optimizer=st.actor_optimizer + st.critic_optimizer,
        activations=forward_activation_bytes(s, b, r.seq_len_of("actor"), r.dtype, r.attention),
        logits=logits,
        detail=tuple(
            n
            for n in (
                _resident_note(r, st, "actor"),
                f"micro-batch {b}: logits ({b}, {r.seq_len_of('actor')}, {s.vocab_size}) + entropy over the response",
                root_note,
            )
            if n
        ),
    )


def _ref_log_prob(request: PlanRequest, st: _State) -> PhaseMemory:
    r, s = request, request.shape
    b = r.log_prob_micro_batch_size
    if r.lora_rank > 0:
        # the actor's compute_log_prob under disable_adapter(), entropy included (fsdp_workers.py:694-706, 729-731)
        old = _old_log_prob(request, st)
        return replace(
            old,
            phase="ref_log_prob",
            detail=tuple(
                n
                for n in (
                    _resident_note(r, st, "actor"),
                    "the actor with its LoRA adapter disabled is the reference (no second model): the old "
                    "log-prob's forward, entropy included",
                )
                if n
            ),
        )
    # the ref worker's FSDP always offloads its parameters to CPU (fsdp_workers.py:319) and wraps
    # each layer. One GPU: every unit's GPU copy stays referenced after its forward (_ref_resident_bytes),
    # so the whole ref is there by the logits. Several GPUs: the root unit and the layers in flight only.
    ref_unit = root_unit_parameters(s) + LAYERS_IN_FLIGHT * s.layer_parameters
    ref_on_gpu = st.ref_weights or ref_unit * r.compute_bytes
    weights = ref_on_gpu + st.actor_weights + st.critic_weights
    row = ROW_LOOP_COPIES * r.max_response_length * s.vocab_size * 4 if not r.fused_kernels else 0
    return PhaseMemory(
        "ref_log_prob",
        weights=weights,
        optimizer=st.actor_optimizer + st.critic_optimizer,
        activations=forward_activation_bytes(s, b, r.seq_len_of("ref"), r.dtype, r.attention),
        logits=_logit_bytes(REF_LOGIT_BYTES, r, b, "ref") + row,
        detail=tuple(
            n
            for n in (
                _resident_note(r, st, "ref"),
                f"reference model CPU-offloaded by FSDP, but its GPU copy stays on one GPU: {format_gib(ref_on_gpu)}"
                if st.ref_weights
                else f"reference model CPU-offloaded by FSDP: {format_gib(ref_on_gpu)} on the GPU while it runs",
            )
            if n
        ),
    )


def _values(request: PlanRequest, st: _State) -> PhaseMemory:
    r, s = request, request.shape
    b = r.critic_micro_batch_size
    weights = (
        st.critic_weights_full + _compute_copy(r, _critic_unit_params(r), "critic") + st.actor_weights + st.ref_weights
    )
    return PhaseMemory(
        "values",
        weights=weights,
        optimizer=st.actor_optimizer + st.critic_optimizer,
        activations=forward_activation_bytes(s, b, r.seq_len_of("critic"), r.dtype, r.attention),
        detail=tuple(
            n for n in (_resident_note(r, st, "critic"), f"micro-batch {b}: value head only, no vocabulary logits") if n
        ),
    )


def update_moments(request: PlanRequest, role: str) -> dict[str, PhaseMemory]:
    """The four candidate peaks of a training phase (``role`` ``"actor"`` or ``"critic"``), by name:
    backward through the logits, backward through the layers, end of backward (the last FSDP
    unit's gradients materialised), optimizer step (docs/plan.md §2). Where the actor's root unit is upcast on one
    GPU (:func:`_root_compute_copy`) and its copy beside the logits' gradient outweighs the log-prob temporaries,
    the first is named "LM head's backward (its root unit cast again)" instead."""
    return _moments(request, _state(request), role)


def _moments(request: PlanRequest, st: _State, role: str) -> dict[str, PhaseMemory]:
    r, s = request, request.shape
    rank = r.lora_rank_of(role)
    if role == "actor":
        b = r.actor_micro_batch_size
        unit = _actor_unit_params(r)
        own_weights = st.actor_weights_full + _compute_copy(r, unit, "actor")
        own_optimizer = st.actor_optimizer_full
        other_weights, other_optimizer = st.critic_weights, st.critic_optimizer
        unit_is_whole = r.rollout == "hf"
    else:
        b = r.critic_micro_batch_size
        unit = _critic_unit_params(r)
        own_weights = st.critic_weights_full + _compute_copy(r, unit, "critic")
        own_optimizer = st.critic_optimizer_full
        other_weights, other_optimizer = st.actor_weights, st.actor_optimizer
        unit_is_whole = False
    params = role_parameters(r, role)[1]  # parameters with gradients and AdamW states
    root = root_unit_parameters(s, critic=role == "critic")
    if rank > 0:
        # frozen flat parameters get no gradient; each lora_A/lora_B is its own unit (or, with patch 0027, a plain
        # parameter beside FSDP whose gradient accumulates in place: the same size), and the head's own gradient is
        # only its adapter's (if targeted)
        last_unit = _largest_adapter_module(s, role, rank, r.lora_target_modules)
        if role == "critic":
            head_grad = (s.hidden_size + 1) * r.compute_bytes  # the value head, trained in full (patch 0011)
        else:
            head_grad = (
                rank * (s.hidden_size + s.vocab_size) * r.compute_bytes
                if LORA_HEAD_TARGET in lora_targets(s, role, r.lora_target_modules)
                else 0
            )
    else:
        last_unit = params if unit_is_whole else root  # the unit whose backward finishes last (it holds the embedding)
        head_grad = root * r.compute_bytes  # the root unit's (lm_head/embedding) gradient arrives first
    accumulation = r.per_gpu_mini_batch // b
    shard_grads = _shard(params, r.gpus) * GRAD_BYTES
    earlier_grads = shard_grads if accumulation > 1 else _shard(params - last_unit, r.gpus) * GRAD_BYTES
    weights = own_weights + other_weights + st.ref_weights
    optimizer = own_optimizer + other_optimizer
    at_logits, in_layers = training_activation_bytes(
        s,
        b,
        r.seq_len_of(role),
        r.dtype,
        r.attention,
        r.checkpointing_of(role),
        _adapter_widths(s, role, rank, r.lora_target_modules),
    )
    logits, at_logits_weights, logits_moment = 0, weights, "backward through the logits"
    if role == "actor":
        (full_a, resp_a), (full_b, resp_b) = UPDATE_LOGIT_BYTES[(r.dtype, r.fused_kernels)]
        v = s.vocab_size
        extra = ENTROPY_LOSS_BYTES if r.entropy_in_loss else 0
        width = r.seq_len_of(role)
        logits = max(b * v * (width * full_a + r.max_response_length * (resp_a + extra)), b * v * width * full_b)
        # the root's copy is cast again at the logits' gradient (one logits-sized tensor), after these temporaries
        at_logits_weights, logits, moment = _root_copy_meets_logits(
            weights, logits, b * v * width * full_a, _root_compute_copy(r, role)
        )
        if moment == "LM head":
            logits_moment = "LM head's backward (its root unit cast again)"
    carried = shard_grads if accumulation > 1 else 0  # gradients of the earlier micro-batches
    moments = {
        logits_moment: dict(gradients=carried, activations=at_logits, logits=logits, weights=at_logits_weights),
        "backward through the layers": dict(gradients=carried + head_grad, activations=in_layers),
        "end of backward": dict(gradients=earlier_grads + last_unit * GRAD_UNIT_TRANSIENT_BYTES[r.dtype]),
        "optimizer step": dict(gradients=shard_grads, optimizer=_shard(params, r.gpus) * ADAM_STEP_TEMP_BYTES),
    }
    return {
        name: PhaseMemory(
            f"{role}_update",
            weights=parts.get("weights", weights),
            optimizer=optimizer + parts.get("optimizer", 0),
            gradients=parts.get("gradients", 0),
            activations=parts.get("activations", 0),
            logits=parts.get("logits", 0),
        )
        for name, parts in moments.items()
    }


def _update(request: PlanRequest, st: _State, role: str) -> PhaseMemory:
    """Peak of a training phase: the largest of its four moments."""
    r = request
    b = r.actor_micro_batch_size if role == "actor" else r.critic_micro_batch_size
    accumulation = r.per_gpu_mini_batch // b
    best_name, best = max(_moments(r, st, role).items(), key=lambda item: item[1].total)
    notes = [
        _resident_note(r, st, role),
        f"micro-batch {b} x {accumulation} per optimizer "
        f"step{', gradient checkpointing' if r.checkpointing_of(role) else ''}; peak at the {best_name}",
    ]
    rank = r.lora_rank_of(role)
    if rank > 0:
        notes.append(
            f"LoRA rank {rank}: gradients and AdamW states for the {role_parameters(r, role)[1]:,} adapter "
            "parameters only; the base is frozen"
        )
    return replace(best, detail=tuple(n for n in notes if n))


def window_note(request: PlanRequest) -> str | None:
    """The line a plan carries when the trims (patches 0020-0021) narrow its passes to the data's longest prompt
    (:attr:`PlanRequest.prompt_window` below ``max_prompt_length``); None otherwise."""
    r = request
    running = {
        "actor": True,
        "ref": r.has_reference and r.lora_rank == 0,
        "critic": r.has_critic,
    }  # a LoRA ref is the actor's pass
    trims = []
    roles = [role for role in r.trim_padding if running[role]]
    if roles:
        trims.append(f"patch 0020 for {', '.join(roles)}")
    if r.rollout_prompt_length < r.max_prompt_length:
        trims.append("patch 0021 for the rollout")
    if r.prompt_window >= r.max_prompt_length or not trims:
        return None
    return (
        f"prompt columns: {r.prompt_window}, the data's longest prompt, not the {r.max_prompt_length} of "
        "the prompt limit: "
        f"the trims ({'; '.join(trims)}) run each micro-batch on its own longest prompt; responses are "
        f"counted at their limit, {r.max_response_length}"
    )


def unsupported_reason(rollout: str, actor_param_offload: bool) -> str | None:
    """Why verl 0.4.1 cannot run a configuration at any size, or None (``rollout``: "hf" or "vllm")."""
    if rollout == "hf" and actor_param_offload:
        return (
            "actor param offload with HF rollout: verl 0.4.1 generates without loading offloaded parameters "
            "back (fsdp_workers.py:648-680), so generation fails; offload the optimizer only"
        )
    return None


def vllm_share_shortfall(request: PlanRequest) -> str | None:
    """Why vLLM cannot start with the request's share of the card, or None: it loads the model's weights in the
    compute dtype into its share (``--vllm-gpu-memory-utilization`` of the card with its CUDA context) and keeps the
    rest for its KV cache; with no rest it stops at start ("No available memory for the cache blocks", vLLM's
    worker). None for the HF rollout. Qwen2.5-7B (bf16, 14.2 GiB) in the a10 profile's 35% of 22.5 GiB (7.9 GiB):
    the message."""
    if request.rollout != "vllm":
        return None
    share = int(request.vllm_gpu_memory_utilization * (request.gpu_memory_bytes + CUDA_CONTEXT_BYTES))
    weights = request.shape.actor_parameters * request.compute_bytes
    if weights < share:
        return None
    return (
        f"vLLM's share of the card ({request.vllm_gpu_memory_utilization:.0%}, {format_gib(share)}) is smaller than "
        f"the weights it loads ({format_gib(weights)}): it would stop at start with no memory for its KV cache; "
        "--rollout hf generates from the training weights instead"
    )


def predict(request: PlanRequest, margin: float = DEFAULT_MARGIN) -> Plan:
    """Predict the peak allocated GPU memory of each phase of one training step, per GPU.

    Args:
        request: the configuration.
        margin: fraction of ``request.gpu_memory_bytes`` a plan may fill (peak plus
            :data:`ALLOCATOR_HEADROOM_BYTES`) and still be called "fits".

    Returns:
        A :class:`Plan` with the phases that run (PPO: no ref unless ``use_reference``; GRPO: no
        values/critic update), the peak, and the verdict.

    Raises:
        VerlfitError: for sizes verl would reject (:func:`validate_request`).
    """
    validate_request(request)
    st = _state(request)
    phases = [_rollout(request, st), _old_log_prob(request, st)]
    if request.has_reference:
        phases.append(_ref_log_prob(request, st))
    if request.has_critic:
        phases += [_values(request, st), _update(request, st, "critic")]
    phases.append(_update(request, st, "actor"))
    peak = max(phases, key=lambda p: p.total)
    usable = request.gpu_memory_bytes
    required = peak.total + ALLOCATOR_HEADROOM_BYTES
    notes = []
    reason = unsupported_reason(request.rollout, request.actor_param_offload)
    if reason:
        verdict = "unsupported"
        notes.append(reason)
    elif required <= margin * usable:
        verdict = "fits"
    elif required <= usable:
        verdict = "tight"
        notes.append(
            f"above the {margin:.0%} margin: fragmentation or a longer-than-modelled sequence can still "
            "run out of memory (verlfit train's planner does not choose a tight plan; verlfit plan exits "
            "1 for it)"
        )
    else:
        verdict = "does not fit"
    short = vllm_share_shortfall(request)
    if short and verdict != "unsupported":
        verdict = "does not fit"
        notes.append(short)
    lora = tuple(lora_notes(request))
    notes.extend(lora)
    window = window_note(request)
    if window:
        notes.append(window)
    required_text, usable_text, budget_text = format_gib_against(required, usable, margin * usable)
    notes.insert(
        0,
        f"peak: {peak.title} {format_gib(peak.total)} + {format_gib(ALLOCATOR_HEADROOM_BYTES)} allocator "
        f"headroom = {required_text} of {usable_text} usable ({required / usable:.0%}); "
        f"budget at {margin:.0%}: {budget_text}",
    )
    return Plan(
        request, tuple(phases), peak, ALLOCATOR_HEADROOM_BYTES, usable, margin, verdict, tuple(notes), reason, lora
    )
