"""The run's settings: what ``verlfit train`` (and ``plan``, ``bench``, the doctor) was asked for, in one dataclass,
before :mod:`verlfit.overrides` turns it into verl's overrides. The ground floor: it imports nothing of verlfit."""

from __future__ import annotations

from dataclasses import dataclass, field


# The highest learning rate verlfit takes, from --actor-lr / --critic-lr (verlfit.arguments.learning_rate) and from
# actor_rollout_ref.actor.optim.lr / critic.optim.lr after -- (verlfit.overrides.VALUE_RULES) alike: 10,000 times
# verl's actor default (1e-6, ppo_trainer.yaml actor.optim.lr) and 1,000 times its critic default (1e-5). AdamW moves
# each weight by about the learning rate a step, whatever the gradient's scale, so at 1e-2 and above every weight of a
# pretrained model moves by more than its typical size (~1e-2) within a few steps; LoRA rates stay below 1e-3.
MAX_LEARNING_RATE = 1e-2
DEFAULT_ACTOR_LR = 1e-6  # verl's (ppo_trainer.yaml actor.optim.lr): --actor-lr's default
LEARNING_RATE_LIMIT_WHY = (
    "AdamW moves every weight by about the learning rate each step, so the pretrained model would be gone within a few "
    "steps (verl's defaults: actor 1e-6, critic 1e-5; LoRA runs use up to about 1e-4)"
)


@dataclass
class TrainSettings:
    """What ``verlfit train`` was asked for, before it becomes verl overrides.

    Sizes are counts of prompts (verl multiplies mini-batches by ``rollout_n`` itself); lengths
    are tokens; learning rates are per step.
    """

    model: str = "Qwen/Qwen2.5-0.5B-Instruct"
    data_dir: str = "data/gsm8k"
    # the folder of raw GSM8K files --data named, which verl's data (data_dir, its verl/ folder) is prepared from;
    # None: --data is verl's folder itself (gsm8k.training_data decides); not a verl key
    raw_data_dir: str | None = None
    run_dir: str = "runs/verlfit"
    algorithm: str = "ppo"  # "ppo" (GAE with a critic) or "grpo" (no critic, n samples, KL loss)
    steps: int | None = None
    epochs: int = 1
    gpus: int = 1
    nodes: int = 1
    train_batch_size: int = 32
    ppo_mini_batch_size: int = 16
    actor_micro_batch_size: int = 4
    log_prob_micro_batch_size: int = 8
    critic_micro_batch_size: int = 4
    rollout_micro_batch_size: int | None = None  # prompts per HF generate call; None: the whole batch
    rollout: str | None = None  # "hf" or "vllm" as run (the profile's unless --rollout); None: the profile's
    attention: str | None = None  # attn_implementation as run (the profile's unless --attention); None: the profile's
    max_prompt_length: int = 512
    max_response_length: int = 256
    # tokens of train.parquet's longest prompt as verl counts it, measured by verlfit train where the profile trims
    # padding (verlfit.prompt_lengths); the planner's prompt columns (PlanRequest.prompt_window); not a verl key
    longest_prompt_length: int | None = None
    # rows of train.parquet within max_prompt_length, where verl's filter_overlong_prompts drops some (measured by
    # verlfit train with the prompt lengths); None: all rows. Steps are counted from it; not a verl key
    train_prompts_kept: int | None = None
    rollout_n: int = 4  # used by grpo only
    actor_lr: float = DEFAULT_ACTOR_LR
    critic_lr: float = 1e-5
    kl_loss_coef: float = 0.001
    gradient_checkpointing: bool = True
    critic_gradient_checkpointing: bool | None = None  # the critic's, where the planner chose apart; None = the actor's
    lora_rank: int = 0  # the actor's LoRA rank; 0 = every parameter trains
    critic_lora_rank: int | None = None  # the PPO critic's; None = the actor's
    lora_alpha: float = 16  # verl's default (ppo_trainer.yaml:128, 654)
    lora_target_modules: str | tuple[str, ...] = "all-linear"  # verl's default (ppo_trainer.yaml:132, 657)
    # a LoRA base's storage (patch 0026): "float32" (stock), "bfloat16" or "float16"; None = the profile's
    # frozen_base_dtype (verlfit.plan.request.frozen_base_storage resolves it)
    frozen_base_dtype: str | None = None
    actor_param_offload: bool = False
    actor_optimizer_offload: bool = False
    critic_param_offload: bool = False
    critic_optimizer_offload: bool = False
    save_freq: int = 25
    keep_checkpoints: int = (
        2  # newest checkpoints kept (0: all, verl's default); ~12 bytes/parameter each for actor and critic
    )
    test_freq: int = 25
    val_batch_size: int = 256
    validate_before_train: bool = True
    resume: bool = False
    loggers: tuple[str, ...] = ("console",)
    extra_overrides: list[str] = field(default_factory=list)

    @property
    def effective_critic_lora_rank(self) -> int:
        """The PPO critic's LoRA rank: ``critic_lora_rank``, or the actor's ``lora_rank`` when it is None."""
        return self.lora_rank if self.critic_lora_rank is None else self.critic_lora_rank

    @property
    def has_lora(self) -> bool:
        """Whether a role trains adapters: the actor (``lora_rank`` above 0), or the PPO critic at its rank."""
        return self.lora_rank > 0 or (self.algorithm == "ppo" and self.effective_critic_lora_rank > 0)
