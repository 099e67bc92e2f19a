"""Checks that several commands need, one module per thing checked, each a pure function of plain values (paths,
the environment, stand-ins for the network) that returns a :class:`verlfit.checks.result.CheckResult`:

* :mod:`verlfit.checks.result`: :class:`CheckResult` and its statuses PASS, WARN, FAIL, SKIP.
* :mod:`verlfit.checks.data_folder`: ``--data``: verl's parquet files there and well-formed, or preparable.
* :mod:`verlfit.checks.model_folder`: ``--model``: a usable model directory, or a cached or reachable hub id.
* :mod:`verlfit.checks.patches`: the installed verl carries this verlfit's patch series.

Further checks of the same kind go beside these (a reward function, the ownership of an own data folder), each in a
module named for what it checks. ``verlfit doctor`` (:mod:`verlfit.doctor`) is the one place that runs them as its
named lines and prints PASS/WARN/FAIL; ``verlfit train`` runs them through the doctor's blocking checks.
"""
