#!/usr/bin/env bash
# The built image as a user meets it, without a GPU (part of rehearse.sh): the entrypoint's help and dispatch
# (prepare-gsm8k on local files, train --dry-run), the three environment variables' defaults and a user's value
# winning (an empty one too), the non-root user and `--user`, `verlfit doctor` (the expected FAILs without a GPU,
# PASS on the patches), the stand-ins named in the labels, and a derived image adding a package (how a user adds one).
#
# Usage: check-image-use.sh IMAGE WORKDIR      (DOCKER: the docker client; exits 1 at the first failed check)
# The commands in single quotes run in the container, where the variables are the image's:
# shellcheck disable=SC2016
set -euo pipefail
image=$1 work=$2
docker=${DOCKER:-docker}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { printf 'rehearsal: FAILED: %s\n' "$*" >&2; exit 1; }
check() { printf 'rehearsal: PASS: %s\n' "$*"; }
run() { $docker run --rm --label io.verlfit.rehearsal=1 "$@"; }
# expect WHAT EXPECTED ACTUAL
expect() { [ "$2" = "$3" ] || fail "$1: expected [$2], got [$3]"; check "$1: $3"; }

# entrypoint: help, a subcommand, a program, an unknown word
run "$image" --help | grep -q 'prepare-gsm8k' || fail "verlfit --help lists no prepare-gsm8k"
check "entrypoint: --help is verlfit's"
set +e
unknown=$(run "$image" nonsense 2>&1); status=$?
set -e
expect "entrypoint: an unknown word exits" 2 "$status"
grep -q "verlfit: unknown subcommand 'nonsense'" <<<"$unknown" || fail "entrypoint's unknown-subcommand message: $unknown"

# the environment: the p40 profile's defaults, a user's values (an empty one too) winning
variables='printf "%s|%s|%s" "$VLLM_DTYPE" "$TRITON_MAX_SHARED_MEMORY" "$PYTORCH_CUDA_ALLOC_CONF"'
expect "defaults" "float32|49152|expandable_segments:True" "$(run "$image" bash -c "$variables")"
expect "a user's values win, an empty one too" "float16|65536|" \
  "$(run -e VLLM_DTYPE=float16 -e TRITON_MAX_SHARED_MEMORY=65536 -e PYTORCH_CUDA_ALLOC_CONF= "$image" bash -c "$variables")"

# the user: never root; another uid through --user can still write HOME, the workspace and the HF cache
expect "the image's user" "1000:1000" "$(run "$image" bash -c 'echo "$(id -u):$(id -g)"')"
expect "--user 4242:4242 writes HOME, /workspace and the HF cache" "4242 ok" \
  "$(run --user 4242:4242 "$image" bash -c 'touch "$HOME/x" /workspace/x "$HF_HOME/x" && echo "$(id -u) ok"')"

# dispatch: prepare-gsm8k on local files, then train --dry-run on what it wrote (a mounted folder, as compose does)
data=$work/use-data
rm -rf "$data" && mkdir -p "$data/input"
python3 "$here/tiny_gsm8k.py" "$data/input"
chown -R 1000:1000 "$data"
run -v "$data:/workspace/data" "$image" prepare-gsm8k --input /workspace/data/input --output /workspace/data/gsm8k >"$work/prepare.log" 2>&1 \
  || { cat "$work/prepare.log" >&2; fail "prepare-gsm8k in the image"; }
expect "prepare-gsm8k wrote verl's files, owned by the image's user" "1000:1000 test.parquet train.parquet" \
  "$(stat -c %u:%g "$data/gsm8k/train.parquet") $(find "$data/gsm8k" -maxdepth 1 -name '*.parquet' -printf '%f\n' | sort | tr '\n' ' ' | sed 's/ $//')"
run -v "$data:/workspace/data" -e HF_HUB_OFFLINE=1 "$image" train --dry-run --profile p40 --batch-size 8 --data /workspace/data/gsm8k >"$work/dry-run.log" 2>&1 \
  || { cat "$work/dry-run.log" >&2; fail "train --dry-run in the image"; }
grep -q 'verl.trainer.main_ppo' "$work/dry-run.log" || fail "train --dry-run printed no verl command: $(head -5 "$work/dry-run.log")"
check "train --dry-run in the image names verl's command"

# doctor without a GPU: FAIL where a GPU is needed, PASS on the patch series (issue 24: it WARNed)
set +e
run "$image" doctor >"$work/doctor.log" 2>&1
status=$?
set -e
[ "$status" != 0 ] || fail "doctor without a GPU exited 0"
grep -E '^\s*PASS\s+patches' "$work/doctor.log" >/dev/null || { cat "$work/doctor.log" >&2; fail "doctor: no PASS on patches"; }
check "doctor without a GPU: exit $status, $(grep -cE '^\s*FAIL' "$work/doctor.log") FAIL ($(grep -E '^\s*FAIL' "$work/doctor.log" | awk '{print $2}' | tr '\n' ' ')), PASS patches"

# the stand-ins are named in the image's labels
labels=$($docker image inspect --format '{{index .Config.Labels "io.verlfit.stand-ins"}}' "$image")
case $labels in *"debootstrap"*"libcudnn8"*"relabelled +cu118"*"bundle"*) check "labels name the stand-ins: $labels" ;; *) fail "io.verlfit.stand-ins: [$labels]" ;; esac

# a package a user adds: a derived image (docs/images.md, "Adding a package"), the image's pins unchanged
cat >"$work/Dockerfile.derived" <<EOF
FROM $image
USER root
RUN --mount=type=secret,id=ca-bundle PIP_CERT=/run/secrets/ca-bundle pip install --no-cache-dir tabulate==0.9.0
USER verlfit
EOF
DOCKER_BUILDKIT=1 $docker build --quiet --network host --secret "id=ca-bundle,src=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" \
  --label io.verlfit.rehearsal=1 --file "$work/Dockerfile.derived" --tag "${image%%:*}:derived" "$work" >/dev/null
expect "a derived image adds a package and keeps torch's pin" "0.9.0 2.6.0+cu118" \
  "$(run "${image%%:*}:derived" python -c 'import importlib.metadata as m; print(m.version("tabulate"), m.version("torch"))')"
# gone at once: it holds every layer of the image, which the save/load steps remove to free the disk
$docker image rm "${image%%:*}:derived" >/dev/null
