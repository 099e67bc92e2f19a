"""Checks that several commands need, one module per thing checked, each a pure function of plain values (paths,
the environment, stand-ins for the network) that returns a :class:`verlfit.checks.result.CheckResult`:

* :mod:`verlfit.checks.result`: :class:`CheckResult` and its statuses PASS, WARN, FAIL, SKIP.
* :mod:`verlfit.checks.data_folder`: ``--data``: verl's parquet files there and well-formed, or preparable.
* :mod:`verlfit.checks.model_folder`: ``--model``: a usable model directory, or a cached or reachable hub id.
* :mod:`verlfit.checks.patches`: the installed verl carries this verlfit's patch series.
* :mod:`verlfit.checks.engines`: the packages the run's rollout and attention import (vllm, flash_attn) are there.
* :mod:`verlfit.checks.disk`: the checkpoints a run holds at once fit under its run directory.
* :mod:`verlfit.checks.stack`: torch, transformers and verl importable, for the commands that need them.
Further checks of the same kind go beside these (a reward function, the ownership of an own data folder), each in a
module named for what it checks. The doctor's orchestrator, :mod:`verlfit.readiness`, runs them (and
the machine's own checks) against one context; ``verlfit doctor`` (:mod:`verlfit.commands.doctor`) lays them out as
PASS/WARN/FAIL; ``verlfit train`` runs them through the blocking checks and reports a FAIL as its error.
"""
