"""verlfit: run verl 0.4.1 PPO and GRPO on 24 GB-class GPUs (Tesla P40, A10, L4).

The package is the launcher behind the container images: GPU facts (``gpu``), hardware
profiles as data (``profiles``), GSM8K preparation (``gsm8k``), verl override building and
Hydra validation (``overrides``), the training launch (``train``), the memory plan (``plan``),
the pre-flight checks (``doctor``) and run reports (``report``). ``cli`` wires them together.
"""

__version__ = "0.1.0"
VERL_VERSION = "0.4.1"
