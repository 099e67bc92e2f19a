#!/usr/bin/env bash
# Create (or reuse) the test virtual environment at ${VENV:-.venv} with the exact pins of
# tests/requirements-ci.txt, verl 0.4.1 from PyPI without its dependencies (its wheel carries
# ppo_trainer.yaml and the sources the patch series applies to), and verlfit itself, editable.
# Safe to re-run: a stamp file records the hash of what was installed and the interpreter's version;
# a venv made by another Python version (PYTHON=python3.12 after a 3.11 .venv) is recreated, and
# stderr says so.
#
# Environment:
#   PYTHON           the interpreter that creates the venv (python3; 3.10-3.12, with its venv module)
#   VENV             where the venv goes (.venv)
#   TORCH_INDEX_URL  where the CPU build of torch comes from (https://download.pytorch.org/whl/cpu).
#                    PyPI's torch for Linux x86_64 is the CUDA build, which pulls several GB of nvidia-*
#                    wheels the tests never use. The index is probed first (5 s at most); when it does not
#                    answer, or TORCH_INDEX_URL is set empty, torch comes from plain PyPI like the rest.
#                    Either way one line on stderr says which.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VENV:-.venv}
python=${PYTHON:-python3}
torch_index=${TORCH_INDEX_URL-https://download.pytorch.org/whl/cpu}
stamp="$venv/.verlfit-test-stamp"
# X.Y.Z of an interpreter, or nothing when it does not run
python_version() {
  "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null
}
# pyproject.toml's requires-python (">=3.10,<3.13"; tests/images/test_bootstrap.py checks the two agree),
# checked before anything is installed
if ! command -v "$python" >/dev/null 2>&1; then
  echo "tests/bootstrap.sh: PYTHON=$python: no such command; install Python 3.10, 3.11 or 3.12 (with its venv module)" \
    "or set PYTHON to one, e.g. PYTHON=python3.12 make test" >&2
  exit 2
fi
version=$(python_version "$python") || true
case $version in
  3.10.*|3.11.*|3.12.*) ;;
  *)
    echo "tests/bootstrap.sh: PYTHON=$python is Python ${version:-(it did not run)}; verlfit needs 3.10, 3.11 or 3.12" \
      "(pyproject.toml: requires-python >=3.10,<3.13): set PYTHON to one, e.g. PYTHON=python3.12 make test" >&2
    exit 2;;
esac
want="$(cat tests/requirements-ci.txt pyproject.toml | sha256sum | cut -d' ' -f1) python $version"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
if [ -x "$venv/bin/python" ]; then
  # a venv's site-packages is per X.Y: another minor version means a new venv, not a reinstall
  have=$(python_version "$venv/bin/python") || true
  if [ "${have%.*}" != "${version%.*}" ]; then
    echo "tests/bootstrap.sh: $venv has Python ${have:-(its python does not run)}, PYTHON=$python is $version:" \
      "recreating $venv" >&2
    "$python" -m venv --clear "$venv"
  fi
else
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --upgrade pip

# torch first, from the CPU index when it answers: installed with --no-deps, it satisfies the pin of
# requirements-ci.txt (PEP 440: "==2.13.0" matches the local version "2.13.0+cpu"), so the next pip
# run keeps it and takes its dependencies from PyPI.
torch_pin=$(grep -E '^torch==' tests/requirements-ci.txt)
reachable() {
  "$venv/bin/python" - "$1" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1].rstrip("/") + "/torch/", timeout=5).close()
except Exception as error:  # any failure means: not usable, fall back to PyPI
    print(f"{type(error).__name__}: {error}", file=sys.stderr)
    sys.exit(1)
EOF
}
if [ -z "$torch_index" ]; then
  echo "tests/bootstrap.sh: torch ($torch_pin) from PyPI (TORCH_INDEX_URL is empty)" >&2
elif reason=$(reachable "$torch_index" 2>&1); then
  echo "tests/bootstrap.sh: torch ($torch_pin) CPU build from $torch_index" >&2
  "$venv/bin/python" -m pip install -q --no-deps --index-url "$torch_index" "$torch_pin"
else
  echo "tests/bootstrap.sh: $torch_index did not answer ($reason): torch ($torch_pin) from PyPI instead" \
    "(on Linux x86_64 that can be the CUDA build; set TORCH_INDEX_URL to a reachable CPU index)" >&2
fi
"$venv/bin/python" -m pip install -q -r tests/requirements-ci.txt
"$venv/bin/python" -m pip install -q --no-deps verl==0.4.1
"$venv/bin/python" -m pip install -q --no-deps -e .
echo "$want" > "$stamp"
