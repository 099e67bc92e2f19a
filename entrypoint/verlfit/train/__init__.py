"""``verlfit train``: validated verl PPO/GRPO launch with a run directory.

Flow (each step fails before Ray starts when it can):

1. choose the profile (``--profile p40|a10|auto`` or ``--emulate p40|a10``) against the GPU;
2. resolve the environment knobs (user values win) and the optional per-worker memory limit;
3. size micro-batches, gradient checkpointing and offload with the planner (``--plan auto``);
4. build the override list and validate every key with Hydra against the installed verl;
5. ``--dry-run`` prints the command, the environment and the values that matter, and stops;
6. otherwise: pre-flight checks, GSM8K prepared if missing, a run directory created atomically,
   then ``python -m verl.trainer.main_ppo <overrides>`` runs with its output watched.

A run directory holds ``run.json`` (settings, overrides, environment), ``command.sh`` (the exact
command, re-runnable), ``config.yaml`` (the composed verl config), ``train.log`` (verl's full
output), ``metrics.jsonl`` and ``checkpoints/``. ``--resume RUN_DIR`` relaunches the same command
with ``trainer.resume_mode=auto``: verl loads the newest complete checkpoint
(``checkpoints/latest_checkpointed_iteration.txt``, written only after a checkpoint is saved).

The subcommand itself (its options, their typed form, the phases called in turn) is :mod:`verlfit.commands.train`.
The package, one file per part:

* :mod:`verlfit.train.settings`: :class:`TrainOptions` (the typed options) and :func:`build_launch`: profile,
  environment, settings, plan and overrides (steps 1-4), the run resolved once.
* :mod:`verlfit.train.rehearsal`: what the real launch would refuse, said by the dry run (step 5).
* :mod:`verlfit.train.describe`: the dry run's text (step 5).
* :mod:`verlfit.train.inputs`: the run's data sized and its reward checked on every row, by the one function the dry
  run (step 5, which prepares nothing) and the launch (step 6, which first prepares missing data) both call.
* :mod:`verlfit.train.preflight`: blocking checks, the run's data and reward (:mod:`verlfit.train.inputs`),
  checkpoint space, the run directory created or the resume recorded (``start_run``: step 6, before the run).
* :mod:`verlfit.train.run_directory`: create, load, resume, record (``run.json``, ``command.sh``).
* :mod:`verlfit.train.supervise`: verl's process watched, stopped (Ctrl-C, stall) and its failure reported.
* :mod:`verlfit.train.gpus`: the first visible GPU, NCCL's P2P fallback, the per-worker memory cap.
* :mod:`verlfit.train.launch_plan`: :class:`LaunchPlan` and what every part reads from it (steps, plan request).
"""
