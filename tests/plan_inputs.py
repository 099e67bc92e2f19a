"""Shared inputs of the planner tests: a small Qwen2-style shape whose bytes can be counted by hand, the
Qwen2.5-0.5B shape the device measurements used, and the Qwen2.5-1.5B and -3B shapes from their config.json."""

from pathlib import Path

from verlfit.model_shape import load_model_shape, shape_from_config
from verlfit.plan.memory import GIB, PlanRequest

# 2 layers, hidden 64, 4 heads of 16, 2 KV heads, SwiGLU 128, vocab 1000, tied embeddings (Qwen2: q/k/v biases)
SMALL_CONFIG = {
    "model_type": "qwen2",
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 1000,
    "tie_word_embeddings": True,
}
SMALL = shape_from_config(SMALL_CONFIG, "small")
QWEN = load_model_shape("Qwen/Qwen2.5-0.5B-Instruct")
# the models' config.json alone (no weights): folders a --model option or load_model_shape reads
MODEL_CONFIGS = Path(__file__).resolve().parent / "plan" / "fixtures"
QWEN_1P5B = load_model_shape(str(MODEL_CONFIGS / "qwen2.5-1.5b"))
QWEN_3B = load_model_shape(str(MODEL_CONFIGS / "qwen2.5-3b"))


def small_request(**fields):
    base = dict(
        shape=SMALL,
        gpu_memory_bytes=24 * GIB,
        train_batch_size=8,
        ppo_mini_batch_size=4,
        actor_micro_batch_size=2,
        log_prob_micro_batch_size=2,
        critic_micro_batch_size=2,
        max_prompt_length=32,
        max_response_length=32,
    )
    base.update(fields)
    return PlanRequest(**base)


def qwen_request(**fields):
    base = dict(shape=QWEN, gpu_memory_bytes=24 * GIB, max_prompt_length=256, max_response_length=256)
    base.update(fields)
    return PlanRequest(**base)
