"""``verlfit plan``: predicted peak GPU memory of each phase of a verl 0.4.1 PPO/GRPO step, and the fitting
search that sizes micro-batches and turns on gradient checkpointing and offload only when needed.

The package, one file per part (formulas, sources and derivations: ``docs/plan.md``):

* :mod:`verlfit.plan.memory`: the memory model: its constants with their sources, :class:`PlanRequest`,
  :class:`PhaseMemory`, :class:`Plan`, :func:`predict`.
* :mod:`verlfit.plan.fit`: :func:`auto_fit`, :func:`smallest_change` and :func:`plan_for_train` (``verlfit train``'s
  planner: the run's request built once, fitted or checked as given, then timed).
* :mod:`verlfit.plan.request`: building a :class:`PlanRequest` from a profile, ``verlfit train``'s settings or
  ``verlfit plan``'s options (:class:`PlanOptions`).
* :mod:`verlfit.plan.render`: a plan as JSON-ready data or a table.
* :mod:`verlfit.plan.sizes`: which model sizes more GPUs open up (``--gpus N``).
* :mod:`verlfit.plan.time`: the time model, reading the same :class:`PlanRequest` with the card facts it needs.
* :mod:`verlfit.plan.train_estimate`: the time estimate of a ``verlfit train`` run.

The ``verlfit plan`` subcommand itself is :mod:`verlfit.commands.plan`.

Import each name from the module that defines it (``from verlfit.plan.memory import predict``).
"""
