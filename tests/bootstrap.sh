#!/usr/bin/env bash
# Create (or reuse) the test virtual environment at ${VENV:-.venv} with the exact pins of
# tests/requirements-ci.txt, verl 0.4.1 from PyPI without its dependencies (its wheel carries
# ppo_trainer.yaml and the sources the patch series applies to), and verlfit itself, editable.
# Safe to re-run: a stamp file records the hash of what was installed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VENV:-.venv}
python=${PYTHON:-python3}
stamp="$venv/.verlfit-test-stamp"
want=$(cat tests/requirements-ci.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -r tests/requirements-ci.txt
"$venv/bin/python" -m pip install -q --no-deps verl==0.4.1
"$venv/bin/python" -m pip install -q --no-deps -e .
echo "$want" > "$stamp"
