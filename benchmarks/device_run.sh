#!/usr/bin/env bash
# Run verlfit's GPU benchmarks on a machine with the verl stack (the lent H200 here; any CUDA box).
#
#   bash benchmarks/device_run.sh STAGE [STAGE ...]
#
# Stages (each writes run directories under $RUNS and appends to $RUNS/stages.log):
#   setup      apply patches/verl-0.4.1 to the installed verl, make the models and prepare GSM8K
#   smoke      3 steps each of p40-emulated PPO and GRPO on a tiny random Qwen2 (plus the GPU tests)
#   main       50 PPO steps, Qwen2.5-0.5B shape, real GSM8K, --emulate p40 (prompt <= 512, response <= 256),
#              a checkpoint every 25 steps; main_resume continues it (verlfit train --resume) in a later call
#   grpo       10 GRPO steps, same setup
#   public     the public P40 recipe (batch 1, micro-batch 1, eager, fp32, 256/256) under the same limit, 10 steps
#   tuned      verlfit's p40 configuration (planner) at 256/256 under the same limit, 10 steps
#   a10        a10-like path (bf16, sdpa, HF rollout), 20 steps, no limit below 24 GiB
#   calibrate  short runs without a memory limit for the planner's calibration table
#   learn      SFT warm-up of a small model on synthetic problems, then PPO and GRPO learning checks
#   pack       tar the run records (run.json, metrics.jsonl, train.log tail) into $OUT/runs.tar.gz and write
#              $OUT/results.json and $OUT/results.md (benchmarks/collect.py: the comparison table)
#
# Environment: VERLFIT_SITE (the site-packages holding verl; default /root/site), GSM8K_DIR (the real
# GSM8K jsonl files; default .device-stack/b/gsm8k), WORK (models and data; default /root/work),
# RUNS (default /root/runs), OUT (results to bring back).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SITE=${VERLFIT_SITE:-/root/site}
GSM8K_DIR=${GSM8K_DIR:-.device-stack/b/gsm8k}
WORK=${WORK:-/root/work}
RUNS=${RUNS:-/root/runs}
OUT=${OUT:-/tmp/out}
mkdir -p "$WORK" "$RUNS" "$OUT"
export PYTHONPATH="$PWD/entrypoint${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
verlfit() { python3 -m verlfit "$@"; }
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$RUNS/stages.log"; }
MODEL=$WORK/qwen2.5-0.5b-random
TINY=$WORK/tiny
DATA=$WORK/gsm8k
# P40 emulation: 22.5 GiB per worker (profiles/p40.yaml gpu_memory_gib: a P40 shows 24451 MiB, ~23 GiB usable
# after the CUDA context; 0.5 GiB more is kept for the allocator's fragmentation)
COMMON=(--skip-checks --no-validate-before-train --test-freq -1 --save-freq -1)

train() {  # train NAME ARGS...: one verlfit run, its status recorded, never aborting the whole script
  local name=$1; shift
  log "start $name: verlfit train $*"
  local start=$SECONDS status=0
  timeout -s INT -k 60 "${STAGE_TIMEOUT:-3000}" python3 -m verlfit train --run-dir "$RUNS/$name" "$@" > "$RUNS/$name.console" 2>&1 || status=$?
  log "end $name: status $status after $((SECONDS - start)) s"
  tail -n 5 "$RUNS/$name.console" | sed "s/^/  $name| /"
}

stage_setup() {
  if python3 patches/apply.py --status "$SITE" >/dev/null 2>&1; then
    log "patch series already applied to $SITE"
  else
    python3 patches/apply.py "$SITE"
  fi
  python3 -c "import verl.workers.actor.dp_actor, verl.workers.fsdp_workers; print('patched verl imports without flash_attn')"
  [ -f "$MODEL/config.json" ] || python3 benchmarks/make_model.py --shape qwen2.5-0.5b --output "$MODEL"
  [ -n "${SKIP_TINY:-}" ] || [ -f "$TINY/config.json" ] || python3 benchmarks/make_model.py --shape tiny --output "$TINY" --tokenizer-dir "$MODEL"
  [ -f "$DATA/train.parquet" ] || verlfit prepare-gsm8k --input "$GSM8K_DIR" --output "$DATA" --tokenizer "$MODEL" --max-prompt-length 512
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$RUNS/stages.log"
}

stage_smoke() {
  python3 -m pytest -q tests/gpu 2>&1 | tee -a "$RUNS/stages.log" | tail -n 15 || true
  train smoke-ppo --emulate p40 --model "$TINY" --data "$DATA" --steps 3 --batch-size 8 --max-response-length 32 "${COMMON[@]}"
  train smoke-grpo --emulate p40 --algo grpo --model "$TINY" --data "$DATA" --steps 3 --batch-size 8 --max-response-length 32 "${COMMON[@]}"
}

stage_main() {
  # ~11.5 s a step on an H200: 50 steps pass one 10-minute device call, so a checkpoint every 25 steps lets
  # `main_resume` in the next call finish the run through verl's own resume (STAGE_TIMEOUT stops this one)
  train main-ppo --emulate p40 --model "$MODEL" --data "$DATA" --steps 50 --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}" --save-freq 25
}

stage_main_resume() {
  log "resume main-ppo: verlfit train --resume $RUNS/main-ppo"
  timeout -s INT -k 60 "${STAGE_TIMEOUT:-3000}" python3 -m verlfit train --resume "$RUNS/main-ppo" >> "$RUNS/main-ppo.console" 2>&1 || log "main-ppo resume: status $?"
  tail -n 5 "$RUNS/main-ppo.console" | sed "s/^/  main-ppo| /"
}

stage_grpo() {
  train main-grpo --emulate p40 --algo grpo --model "$MODEL" --data "$DATA" --steps "${GRPO_STEPS:-10}" --batch-size "${GRPO_BATCH:-32}" --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}"
}

stage_public() {
  # The blog posts' P40 shape: batch 1, mini-batch 1, micro-batch 1, eager attention, fp32, 256/256.
  train public-recipe --emulate p40 --plan off --model "$MODEL" --data "$DATA" --steps "${PUBLIC_STEPS:-10}" --batch-size 1 --mini-batch-size 1 \
    --micro-batch-size 1 --max-prompt-length 256 --max-response-length 256 "${COMMON[@]}" -- \
    +actor_rollout_ref.model.attn_implementation=eager +critic.model.attn_implementation=eager
}

stage_tuned() {
  train tuned-p40 --emulate p40 --model "$MODEL" --data "$DATA" --steps "${TUNED_STEPS:-10}" --max-prompt-length 256 --max-response-length 256 "${COMMON[@]}"
}

stage_a10() {
  # bf16 + sdpa + HF rollout: flash-attn and vLLM are not on this machine (the real A10 image uses both).
  train a10-like --profile a10 --gpu-memory-limit 24 --model "$MODEL" --data "$DATA" --steps 20 "${COMMON[@]}" -- \
    actor_rollout_ref.rollout.name=hf +actor_rollout_ref.rollout.micro_batch_size=32 \
    +actor_rollout_ref.model.attn_implementation=sdpa +critic.model.attn_implementation=sdpa \
    actor_rollout_ref.model.use_remove_padding=False critic.model.use_remove_padding=False \
    actor_rollout_ref.actor.use_torch_compile=False
}

stage_calibrate() {
  local spec
  # --profile (not --emulate): no memory limit, so max_memory_allocated is the real need
  for spec in "cal-p40-ppo-m4:--profile p40 --plan off --micro-batch-size 4 --offload optimizer" \
              "cal-p40-ppo-m8:--profile p40 --plan off --micro-batch-size 8 --offload optimizer --max-response-length 128" \
              "cal-p40-grpo-m4:--profile p40 --algo grpo --plan off --micro-batch-size 4 --offload optimizer --batch-size 8" ; do
    train "${spec%%:*}" ${spec#*:} --model "$MODEL" --data "$DATA" --steps 2 "${COMMON[@]}"
  done
}

stage_learn() {
  local synth=$WORK/synthetic small=$WORK/small-sft
  [ -f "$synth/raw/train.jsonl" ] || python3 benchmarks/gsm8k_synthetic.py --output "$synth/raw" --train-size 4096 --test-size 256
  [ -f "$synth/train.parquet" ] || verlfit prepare-gsm8k --input "$synth/raw" --output "$synth" --tokenizer "$MODEL" --max-prompt-length 256
  # seed 2 stopped at 0.34 greedy accuracy (stop at 0.25 on the dev split) in ~30 s on an H200
  [ -f "$small/config.json" ] || python3 benchmarks/sft_warmup.py --data-dir "$synth/raw" --output "$small" --tokenizer-dir "$MODEL" --seed 2 | tee -a "$RUNS/stages.log"
  train learn-ppo --emulate p40 --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
    --max-response-length 64 --actor-lr 1e-6 --critic-lr 1e-5 --skip-checks --test-freq 20 --save-freq -1
  train learn-grpo --emulate p40 --algo grpo --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
    --max-response-length 64 --actor-lr 1e-6 --skip-checks --test-freq 20 --save-freq -1
}

stage_pack() {
  local list
  list=$(cd "$RUNS" && find . -maxdepth 2 \( -name run.json -o -name metrics.jsonl -o -name '*.console' -o -name stages.log -o -name train.log \) | sort)
  # train.log can be long: keep its last 400 lines
  (cd "$RUNS" && for f in $list; do case $f in *train.log) tail -n 400 "$f" > "$f.tail" && echo "$f.tail";; *) echo "$f";; esac; done) > "$RUNS/.pack"
  tar -C "$RUNS" -czf "$OUT/runs.tar.gz" -T "$RUNS/.pack"
  python3 benchmarks/collect.py "$RUNS" --json "$OUT/results.json" --markdown "$OUT/results.md" && cat "$OUT/results.md"
  ls -la "$OUT"
}

for stage in "$@"; do
  log "== stage $stage"
  "stage_$stage"
done
