#!/usr/bin/env bash
# Run verlfit's GPU benchmarks on a machine with the verl stack (the lent H200 here; any CUDA box).
#
#   bash benchmarks/device_run.sh STAGE [STAGE ...]               # one after another
#   bash benchmarks/device_run.sh --parallel STAGE [STAGE ...]    # all at once (one GPU, one Ray instance each)
#
# Stages (each writes run directories under $RUNS and appends to $RUNS/stages.log):
#   setup      apply patches/verl-0.4.1 to the installed verl, make the models and prepare GSM8K
#   smoke      3 steps each of p40-emulated PPO and GRPO on a tiny random Qwen2
#   gputests   the pytest suite tests/gpu (3-step p40-emulated PPO and GRPO through verlfit train)
#   main       PPO, Qwen2.5-0.5B shape, real GSM8K, --emulate p40 (prompt <= 512, response <= 256): steps 1-25,
#              ending on a checkpoint; main_resume extends it to 50 steps (verlfit train --resume --steps 50)
#   grpo       10 GRPO steps, 32 prompts x 4 samples, same setup
#   public     the public P40 recipe (batch 1, micro-batch 1, eager, fp32, 256/256) under the same limit, 10 steps
#   tuned      verlfit's p40 configuration (planner) at 256/256 under the same limit, 10 steps
#   a10        a10-like path (bf16, sdpa, HF rollout), 20 steps, 24 GiB limit
#   calibrate_p40, calibrate_a10
#              short runs without a memory limit for the planner's calibration table (fp32 / bf16)
#   calibrate_check
#              one more uncapped bf16 run, to check the coefficient fitted to calibrate_a10
#   learn      SFT warm-up of a small model on synthetic problems, then PPO and GRPO learning checks (LEARN_LRS,
#              LEARN_ALGOS, LEARN_TAG, LEARN_EXTRA, LEARN_TEST_FREQ: validation every N steps, default 20; also for learn_lora)
#              (200 steps each, at two actor learning rates, all four at once; each ends on a checkpoint of step 200)
#   export_eval
#              verlfit export of the learning check's final checkpoint (EXPORT_RUN, default learn-grpo-lr1e-5), then
#              verlfit eval of it --compare the starting model on the 256 held-out problems (the rows its validation used)
#   bench      verlfit bench on the card as it is (--rollout hf --attention sdpa: this stack has no vLLM/flash-attn)
#              and with --emulate p40 (BENCH_MODES, default "card emulate_p40", one after the other); the JSON files go to $OUT
#   speed      issue 13: the main job's configuration (PPO, 0.5B shape, --emulate p40, 512/256, batch 32), 10 steps
#              per configuration of SPEED_CONFIGS (default "today all": today's path, then all of patches
#              0020-0023's keys on, one after the other so neither shares the GPU; "trim_train trim_rollout
#              cuda_graph unwrap" are each one alone, "trims" the p40 profile's default: both trims, no graph; every
#              configuration sets each key it leaves off to False, since the profile turns the trims on),
#              SPEED_PARALLEL=1 runs them at once; then benchmarks/decode_bench.py
#              (ms per decode step at batch 32 and 64, prefill, generate vs graph) into $OUT/decode_bench.json
#   fp16       issue 27: the main job's configuration (PPO, 0.5B shape, real GSM8K, 512/256, batch 32, as speed) for
#              FP16_STEPS (default 10) steps under --emulate t4 (fp16 + loss scaling, 14 GiB), --emulate v100 (30.5 GiB),
#              then the fp32 p40 profile under the T4's 14 GiB (--profile p40 --gpu-memory-limit 14: the same budget), one
#              after the other (FP16_CONFIGS, default "t4 v100 p40_t4_budget"); each run's `verlfit plan` verdict first
#              (NAME.plan, for predicted vs measured peak)
#   learn_fp16 issue 27: the learning check of `learn` (its SFT-warmed small model and synthetic problems) in fp16:
#              --emulate t4, PPO and GRPO, 200 steps, actor lr 1e-5, with the rollout in fp16 (the profile's) and in
#              fp32 (VLLM_DTYPE=float32: fp32 rollout, fp16 training); LEARN_FP16_ROLLOUTS (default "float16 float32"),
#              all four at once
#   graph_memory
#              issue 13: benchmarks/graph_memory_probe.py: allocated memory after each of GRAPH_MEMORY_CALLS (default 8)
#              CUDA-graph generate calls (0.5B shape, batch 32), a new side stream per capture vs patch 0022's
#              capture_stream; into $OUT/graph_memory.json
#   lora_speed the HF rollout with LoRA (patch 0023): lora_1p5b_ppo's run (1.5B shape, rank 32, --emulate p40, 512/256,
#              batch 32) for LORA_SPEED_STEPS (default 4) steps per configuration of LORA_SPEED_CONFIGS (default
#              "unwrap all today": rollout.unwrap_fsdp alone, every speed key, then none; the speed configurations'
#              names), one after the other; without the key generation took ~63.5 s a step, so "today" alone is
#              ~7-8 min: give the list over two calls (e.g. "unwrap all", then "today") within 10-minute calls
#   lora_1p5b_ppo
#              PPO with LoRA actor and critic (rank 32), Qwen2.5-1.5B shape, real GSM8K, --emulate p40, 512/256,
#              batch 32, 10 steps, checkpoints at steps 5 and 10; then benchmarks/adapter_norm.py on its adapters;
#              a run a call's deadline cut is resumed (verlfit train --resume) when the stage runs again (also
#              lora_3b_grpo and learn_lora)
#   lora_3b_grpo
#              GRPO with LoRA (rank 32), Qwen2.5-3B shape, same setup, 32 prompts x 4 samples (what `verlfit plan`
#              says fits), 5 steps, checkpoints at steps 3 and 5; then adapter_norm.py
#   learn_data the synthetic problems and the SFT-warmed small model of learn/learn_lora alone (run it before
#              stages started --parallel that need them)
#   learn_lora the learning check of `learn` with LoRA (rank 32, alpha 32), PPO and GRPO, 200 steps, at two actor
#              learning rates ten times the full-parameter ones (all four at once), checkpoints every 50 steps
#   lora16     issue 36: LoRA with the frozen base in 16 bits (patch 0026), all at once: the targets, each
#              `verlfit plan` (NAME.plan) then 3 steps on random weights made here (Qwen3-4B GRPO --emulate t4,
#              Qwen2.5-3B PPO --emulate p40, Qwen2.5-7B GRPO --emulate a10 --rollout hf --attention sdpa; batch 16,
#              512/256, rank 32), the 7B's plan on a P40; and learn_lora's GRPO learning check (lr 1e-4, 200 steps,
#              validation every LEARN_TEST_FREQ, default 50) with the base in bf16 and in fp32 (LORA16_LEARN_BASES);
#              once the targets end, (c) the speed pick (lora16_speed). Needs setup first (the 0.5B's tokenizer,
#              GSM8K); ~9 minutes on an H200 without (c) (LORA16_SPEED=0), (c) adds ~4
#   lora16_speed
#              issue 36 item 2: auto-fit's speed pick against the memory-first choice, one after the other, LoRA PPO
#              of the 0.5B shape, --emulate p40, batch 32, 512/256, LORA16_SPEED_STEPS (default 4) steps each, each
#              with its plan: the chosen configuration (fp32 base, micro-batch 16), then --frozen-base-dtype
#              bfloat16 --gradient-checkpointing (the memory-first choice: the bf16 base)
#   multigpu   issue 18, on a kind with 2 or more GPUs: doctor's topology and `nvidia-smi topo -m`; the main job's
#              configuration (PPO, 0.5B shape, --emulate p40, 512/256) for MULTIGPU_STEPS (default 10) steps with
#              --gpus 1, then --gpus 2, then --gpus 2 with NCCL_P2P_DISABLE=1 forced; full-parameter PPO of the 1.5B
#              shape on 2 emulated P40s (the planner's verdict, then 10 steps sized by hand: --plan off, micro-batch 1,
#              optimizer offload); then a two-node Ray cluster on this host (two `ray start`, one GPU each, the
#              workers' environment given at `ray start`) and `verlfit train --nodes 2 --gpus 1` on it
#   own_task   issue 26: a task that is not GSM8K end to end, --emulate p40: benchmarks/own_task.py's shelf-stock problems
#              (jsonl, problem/solution columns), prepared by verlfit prepare-data (data_source verlfit/shelf-stock),
#              scored by benchmarks/own_task_reward.py (OWN_REWARD: --reward-function FILE:compute_score): GRPO
#              with LoRA rank 16 on the Qwen3-1.7B shape and PPO full-parameter on the Qwen3-0.6B shape (random
#              weights, 4 steps each, a checkpoint of step 4), each with its plan; then verlfit export and verlfit
#              eval --reward-function on 64 held-out problems (run setup with this stage named first: it makes the models)
#   lora_families issue 26 item 6: LoRA runs of the new families (Qwen3 0.6B/1.7B/4B, Llama 3.2 1B/3B shapes, random
#              weights made here), PPO and GRPO, GSM8K and the own task, 3 steps each, all at once, each with its plan;
#              one with the trims off, and Llama 3.2 1B through PPO (LORA_FAMILY_RUNS; LORA_FAMILY_NAMES: only these run names)
#   learn_own  the learning check's small model (learn's SFT warm-up, then warmed up on own-task problems) on the own task with its reward function,
#              GRPO, 200 steps, lr 1e-5, validation every 20 steps; then export and eval --reward-function --compare
#              the starting model on the 256 held-out problems: the held-out score should rise by at least +0.10
#   soak_ppo   issue 17: PPO of the learning check's small model (learn's SFT warm-up) on the real GSM8K, --emulate p40,
#              512/256, batch 64, 500 steps, checkpoints every 50, validation every 100 on the first 256 test rows
#              ($WORK/gsm8k-val256); interrupted as SOAK_PPO_PLAN says (default "sigint@150 sigkill@300": Ctrl-C's
#              SIGINT to verlfit at step 150, then --resume; SIGKILL of every process of the run at step 300, then
#              --resume; benchmarks/soak_run.py). Re-entrant: name it again in the next call and it continues (the
#              events done are in $RUNS/soak-ppo.events; a DEADLINE cut is one too); a finished run is not relaunched.
#              Host memory (RSS of verlfit, verl's driver, the Ray workers) every 10 s into $RUNS/soak-ppo.rss.csv
#   soak_grpo  the same for GRPO (4 samples a prompt), 300 steps, SOAK_GRPO_PLAN (default "sigint@120"); $RUNS/soak-grpo.*
#   fault_oom  the 0.5B shape, --emulate p40 --plan off, batch, mini-batch and micro-batch 64 at 512/256 (the actor's fp32
#              logits alone are 64 x 768 x 151936 x 4 B = 27.8 GiB of the 22.5), 2 steps: expected to fail; logs
#              verlfit's diagnosis (verlfit/failure.py) and run.json's outcome
#   fault_worker
#              the small model on the synthetic problems (as learn), batch 64, response 128, 12 steps, checkpoints every 5:
#              at step 7 SIGKILL one Ray WorkerDict process of the run (FAULT_WORKER_PLAN, default "kill-worker@7"),
#              the seconds until verlfit exits and what it said into $RUNS/fault-worker.events, then --resume to 12
#   fault_disk the small model's PPO (as fault_worker, --save-freq 2, 6 steps) with its run directory in a tmpfs
#              ($RUNS/fault-disk-mnt; needs root; a refused mount is logged and the stage ends): once the step-2
#              checkpoint is complete the tmpfs is shrunk to 1.5 x what it holds, so the step-4 checkpoint fills it;
#              logs verlfit's full-disk message and the checkpoints left, remounts it 8 x bigger and resumes to step 6;
#              the records are copied to $RUNS/fault-disk and the tmpfs unmounted
#   noeos      issue 29: a random Qwen3-0.6B-shaped model whose config.json and generation_config.json have no
#              eos_token_id (benchmarks/qwen3_no_eos_model.py, the 0.5B's tokenizer; made once, into
#              $WORK/qwen3-0.6b-no-eos), then `verlfit train --emulate p40 --model DIR --steps 3` on setup's GSM8K (the
#              p40 profile turns patch 0022's cuda_graph on; the rollout gets no EOS id and decodes every response to
#              the full length); logs the run's outcome and the response lengths of its steps
#   pack       tar the run records (run.json, metrics.jsonl, train.log tail, the soak stages' *.events, *.rss.csv) into
#              $OUT/runs.tar.gz and write $OUT/results.json and $OUT/results.md (benchmarks/collect.py: the comparison
#              table); first benchmarks/soak_check.py on soak-ppo and soak-grpo when present ($RUNS/NAME.soak.json)
#
# Several verl runs can share one big GPU: each caps its own workers (--emulate / --gpu-memory-limit) and starts
# its own local Ray instance; their step times then include the others' load (memory figures do not).
#
# Needs: a CUDA GPU and a Python 3 environment where `python3 -c "import verl, ray, torch"` works (verl 0.4.1,
# e.g. `pip install verl==0.4.1` with its dependencies, or a verlfit image) plus verlfit's own dependencies
# (`pip install -e .` from this checkout); no network: models are made locally and GSM8K is read from files.
#
# Environment: VERLFIT_SITE (the site-packages holding verl; default: where `python3` imports verl from),
# GSM8K_DIR (a folder with the real GSM8K as train.jsonl and test.jsonl, the rows of the hub's openai/gsm8k
# "main" config, as `verlfit prepare-gsm8k --input` reads them; default .device-stack/b/gsm8k, where the
# project's device staging puts them), WORK (models and data; default ~/verlfit-bench/work),
# RUNS (default ~/verlfit-bench/runs), OUT (results to bring back), DEADLINE (epoch seconds: every run is stopped with
# SIGINT by then, so a time-limited session still packs its results; default: none), STAGE_TIMEOUT (seconds
# per run, default 3000), LEARN_LRS (actor learning rates of the learning check, default "1e-5 3e-5"),
# LEARN_LORA_LRS (the same for learn_lora, default "1e-4 3e-4"), LORA_3B_BATCH, LORA_3B_SAMPLES and LORA_3B_STEPS (default 32,
# 4 and 5: a lower LORA_3B_STEPS in one call and the default in the next checks a resume from the step-3 checkpoint),
# LEARN_LORA_ALGOS (learn_lora's algorithms, default "ppo grpo"), LORA_EXTRA (more verlfit train words for lora_1p5b_ppo, lora_3b_grpo and learn_lora, e.g.
# "-- +actor_rollout_ref.rollout.unwrap_fsdp=False" to measure LoRA without patch 0023, which train turns on for LoRA), SETUP_FOR (stage names setup makes the bigger models for, as
# if they were named in the same call: for a setup run before a --parallel call), SKIP_DECODE_BENCH (set: stage speed runs no decode_bench.py),
# KEEP_FULL_CHECKPOINTS (set: keep the LoRA runs' full FSDP shards, ~12 GiB per 1.5B PPO or 3B GRPO
# checkpoint, instead of deleting them once adapter_norm.py has read the adapters), SOAK_PPO_PLAN, SOAK_GRPO_PLAN,
# FAULT_WORKER_PLAN (the soak and fault stages' interruptions, words ACTION@STEP: benchmarks/soak_plan.py),
# SOAK_PPO_STEPS and SOAK_GRPO_STEPS (the soak runs' lengths, default 500 and 300).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") usage >&2; echo "device_run.sh: name at least one stage" >&2; exit 2 ;;
esac
SITE=${VERLFIT_SITE:-}
GSM8K_DIR=${GSM8K_DIR:-.device-stack/b/gsm8k}
WORK=${WORK:-$HOME/verlfit-bench/work}
RUNS=${RUNS:-$HOME/verlfit-bench/runs}
OUT=${OUT:-/tmp/out}
export PYTHONPATH="$PWD/entrypoint${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
verlfit() { python3 -m verlfit "$@"; }
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$RUNS/stages.log"; }
MODEL=$WORK/qwen2.5-0.5b-random
MODEL_1P5B=$WORK/qwen2.5-1.5b-random
MODEL_3B=$WORK/qwen2.5-3b-random
MODEL_QWEN3_0P6B=$WORK/qwen3-0.6b-random
MODEL_QWEN3_1P7B=$WORK/qwen3-1.7b-random
OWN=$WORK/own
OWN_REWARD_FILE=$PWD/benchmarks/own_task_reward.py
# the own task's reward function: verlfit train checks it on the training rows before launch, copies it into the run
# directory and records it in run.json (issue 26 phase B)
OWN_REWARD=(--reward-function "$OWN_REWARD_FILE:compute_score")
TINY=$WORK/tiny
MODEL_NO_EOS=$WORK/qwen3-0.6b-no-eos
DATA=$WORK/gsm8k
# P40 emulation: 22.5 GiB per worker (profiles/p40.yaml gpu_memory_gib: a P40 shows 24451 MiB, ~23 GiB usable
# after the CUDA context; 0.5 GiB more is kept for the allocator's fragmentation)
COMMON=(--skip-checks --no-validate-before-train --test-freq -1 --save-freq -1)

run_limit() {  # seconds a run may take: STAGE_TIMEOUT, cut to what is left before DEADLINE
  local limit=${STAGE_TIMEOUT:-3000}
  if [ -n "${DEADLINE:-}" ]; then
    local left=$(( DEADLINE - $(date +%s) ))
    [ "$left" -lt "$limit" ] && limit=$left
  fi
  [ "$limit" -gt 5 ] || limit=5
  echo "$limit"
}

train() {  # train NAME ARGS...: one verlfit run, its status recorded, never aborting the whole script
  local name=$1; shift
  log "start $name: verlfit train $*"
  local start=$SECONDS status=0
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit train --run-dir "$RUNS/$name" "$@" > "$RUNS/$name.console" 2>&1 || status=$?
  log "end $name: status $status after $((SECONDS - start)) s"
  tail -n 5 "$RUNS/$name.console" | sed "s/^/  $name| /"
}

stage_setup() {
  [ -n "$SITE" ] || SITE=$(python3 -c 'import os, verl; print(os.path.dirname(os.path.dirname(verl.__file__)))')
  if python3 patches/apply.py --status "$SITE" >/dev/null 2>&1; then
    log "patch series already applied to $SITE"
  else
    python3 patches/apply.py "$SITE"
  fi
  python3 -c "import verl.workers.actor.dp_actor, verl.workers.fsdp_workers; print('patched verl imports without flash_attn')"
  [ -f "$MODEL/config.json" ] || python3 benchmarks/make_model.py --shape qwen2.5-0.5b --output "$MODEL"
  # the bigger shapes (random weights, the 0.5B's tokenizer) only when a stage of this call trains them
  if grep -qwE 'lora_1p5b_ppo|lora_speed' <<< "$STAGES ${SETUP_FOR:-}" && [ ! -f "$MODEL_1P5B/config.json" ]; then
    python3 benchmarks/make_model.py --shape qwen2.5-1.5b --output "$MODEL_1P5B" --tokenizer-dir "$MODEL"
  fi
  if grep -qw lora_3b_grpo <<< "$STAGES ${SETUP_FOR:-}" && [ ! -f "$MODEL_3B/config.json" ]; then
    python3 benchmarks/make_model.py --shape qwen2.5-3b --output "$MODEL_3B" --tokenizer-dir "$MODEL"
  fi
  if grep -qw own_task <<< "$STAGES ${SETUP_FOR:-}"; then
    [ -f "$MODEL_QWEN3_0P6B/config.json" ] || python3 benchmarks/make_model.py --shape qwen3-0.6b --output "$MODEL_QWEN3_0P6B" --tokenizer-dir "$MODEL"
    [ -f "$MODEL_QWEN3_1P7B/config.json" ] || python3 benchmarks/make_model.py --shape qwen3-1.7b --output "$MODEL_QWEN3_1P7B" --tokenizer-dir "$MODEL"
  fi
  [ -n "${SKIP_TINY:-}" ] || [ -f "$TINY/config.json" ] || python3 benchmarks/make_model.py --shape tiny --output "$TINY" --tokenizer-dir "$MODEL"
  [ -f "$DATA/train.parquet" ] || verlfit prepare-gsm8k --input "$GSM8K_DIR" --output "$DATA" --tokenizer "$MODEL" --max-prompt-length 512
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$RUNS/stages.log"
}

stage_gputests() {
  timeout -s INT -k 20 "$(run_limit)" python3 -m pytest -q -p no:cacheprovider tests/gpu > "$RUNS/gputests.console" 2>&1 || log "tests/gpu: status $?"
  tail -n 15 "$RUNS/gputests.console" | tee -a "$RUNS/stages.log"
}

stage_smoke() {
  train smoke-ppo --emulate p40 --model "$TINY" --data "$DATA" --steps 3 --batch-size 8 --max-response-length 32 "${COMMON[@]}"
  train smoke-grpo --emulate p40 --algo grpo --model "$TINY" --data "$DATA" --steps 3 --batch-size 8 --max-response-length 32 "${COMMON[@]}"
}

stage_main() {
  # ~13.5 s a step alone on an H200 at prompt 512, ~18 s more for each checkpoint save (call 4 of 2026-11-29):
  # 50 steps outlast one 10-minute device call, so the run is planned as 25 steps, ending on verl's checkpoint
  # (~11 GiB), and `main_resume` in the next call extends it to 50 through verl's own resume (--steps 50);
  # no step is trained twice and none is lost to the call's deadline
  local args=(--emulate p40 --model "$MODEL" --data "$DATA" --steps 25 --max-prompt-length 512 --max-response-length 256)
  train main-ppo "${args[@]}" --skip-checks --no-validate-before-train --test-freq -1 --save-freq 25
}

stage_main_resume() {
  log "resume main-ppo: verlfit train --resume $RUNS/main-ppo"
  local start=$SECONDS status=0
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit train --resume "$RUNS/main-ppo" --steps 50 >> "$RUNS/main-ppo.console" 2>&1 || status=$?
  log "end main-ppo resume: status $status after $((SECONDS - start)) s"
  tail -n 5 "$RUNS/main-ppo.console" | sed "s/^/  main-ppo| /"
}

stage_grpo() {
  train main-grpo --emulate p40 --algo grpo --model "$MODEL" --data "$DATA" --steps "${GRPO_STEPS:-10}" --batch-size "${GRPO_BATCH:-32}" --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}"
}

stage_public() {
  # The blog posts' P40 shape: batch 1, mini-batch 1, micro-batch 1, eager attention, fp32, 256/256.
  train public-recipe --emulate p40 --plan off --attention eager --model "$MODEL" --data "$DATA" --steps "${PUBLIC_STEPS:-10}" --batch-size 1 \
    --mini-batch-size 1 --micro-batch-size 1 --max-prompt-length 256 --max-response-length 256 "${COMMON[@]}"
}

stage_tuned() {
  train tuned-p40 --emulate p40 --model "$MODEL" --data "$DATA" --steps "${TUNED_STEPS:-10}" --max-prompt-length 256 --max-response-length 256 "${COMMON[@]}"
}

stage_a10() {
  # bf16 + sdpa + HF rollout: flash-attn and vLLM are not on this machine (the real A10 image uses both).
  train a10-like --profile a10 --rollout hf --attention sdpa --gpu-memory-limit 24 --model "$MODEL" --data "$DATA" --steps 20 "${COMMON[@]}" -- \
    actor_rollout_ref.actor.use_torch_compile=False
}

# issue 13's keys (patches 0020-0023), per configuration of stage_speed and stage_lora_speed
SPEED_TRIM_TRAIN=(+actor_rollout_ref.actor.trim_padding=True +actor_rollout_ref.ref.trim_padding=True +critic.trim_padding=True)
SPEED_TRIM_ROLLOUT=(+actor_rollout_ref.rollout.trim_padding=True)
SPEED_CUDA_GRAPH=(+actor_rollout_ref.rollout.cuda_graph=True)
# generate() without FSDP's per-unit hooks: with LoRA every adapter Linear is an FSDP unit (patch 0009)
SPEED_UNWRAP=(+actor_rollout_ref.rollout.unwrap_fsdp=True)

# the p40 profile turns the four trim keys on (profiles/p40.yaml): a configuration states every key it leaves off
# (verlfit merges a repeated key, the last value wins: overrides.merge_overrides)
SPEED_NO_TRIM_TRAIN=(+actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False +critic.trim_padding=False)
SPEED_NO_TRIM_ROLLOUT=(+actor_rollout_ref.rollout.trim_padding=False)

speed_keys() {  # speed_keys CONFIG: the extra verl overrides of one stage_speed configuration
  case $1 in
    today) echo "${SPEED_NO_TRIM_TRAIN[*]} ${SPEED_NO_TRIM_ROLLOUT[*]}" ;;
    trim_train) echo "${SPEED_TRIM_TRAIN[*]} ${SPEED_NO_TRIM_ROLLOUT[*]}" ;;
    trim_rollout) echo "${SPEED_NO_TRIM_TRAIN[*]} ${SPEED_TRIM_ROLLOUT[*]}" ;;
    cuda_graph) echo "${SPEED_NO_TRIM_TRAIN[*]} ${SPEED_NO_TRIM_ROLLOUT[*]} ${SPEED_CUDA_GRAPH[*]}" ;;
    unwrap) echo "${SPEED_NO_TRIM_TRAIN[*]} ${SPEED_NO_TRIM_ROLLOUT[*]} ${SPEED_UNWRAP[*]}" ;;
    trims) echo "${SPEED_TRIM_TRAIN[*]} ${SPEED_TRIM_ROLLOUT[*]}" ;;  # the p40 profile's default since 2026-12-01
    trims_unwrap) echo "${SPEED_TRIM_TRAIN[*]} ${SPEED_TRIM_ROLLOUT[*]} ${SPEED_UNWRAP[*]}" ;;  # LoRA's candidate default
    all) echo "${SPEED_TRIM_TRAIN[*]} ${SPEED_TRIM_ROLLOUT[*]} ${SPEED_CUDA_GRAPH[*]} ${SPEED_UNWRAP[*]}" ;;
    *) log "stage ${2:-speed}: unknown configuration '$1' (today trim_train trim_rollout cuda_graph unwrap trims trims_unwrap all)"; return 2 ;;
  esac
}

stage_speed() {
  # Sequential by default: 10 steps x ~14 s plus ~1-1.5 min of start-up per run, so "today all" is ~7-8 min
  # of one 10-minute call; five configurations one after another would be ~18 min. SPEED_PARALLEL=1 runs
  # them at once: then step times include the others' load (memory figures do not).
  local config keys extra
  for config in ${SPEED_CONFIGS:-today all}; do
    keys=$(speed_keys "$config") || continue
    extra=()
    # shellcheck disable=SC2206  # keys are words without spaces
    [ -z "$keys" ] || extra=(-- $keys)
    if [ -n "${SPEED_PARALLEL:-}" ]; then
      train "speed-$config" --emulate p40 --model "$MODEL" --data "$DATA" --steps "${SPEED_STEPS:-10}" --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}" "${extra[@]}" &
    else
      train "speed-$config" --emulate p40 --model "$MODEL" --data "$DATA" --steps "${SPEED_STEPS:-10}" --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}" "${extra[@]}"
    fi
  done
  wait
  [ -z "${SKIP_DECODE_BENCH:-}" ] || return 0
  log "start decode_bench: batch 32 and 64, prompts 100-256 of 256 columns, 256 new tokens, fp32"
  timeout -s INT -k 20 "$(run_limit)" python3 benchmarks/decode_bench.py --model "$MODEL" --output "$RUNS/decode_bench.json" > "$RUNS/decode_bench.console" 2>&1 \
    || log "decode_bench: status $?"
  tail -n 4 "$RUNS/decode_bench.console" | sed "s/^/  decode_bench| /"
  [ -f "$RUNS/decode_bench.json" ] && cp "$RUNS/decode_bench.json" "$OUT/decode_bench.json"
  return 0
}

stage_fp16() {
  # ~1.5 min of start-up plus 10 steps per run; the fp32 run of the P40 profile took 6.6 s a step at 22.5 GiB
  # (docs/benchmarks.md section 10): three runs in one after the other are ~7-8 min of one 10-minute call
  local config args
  for config in ${FP16_CONFIGS:-t4 v100 p40_t4_budget}; do
    case $config in
      t4) args=(--emulate t4) ;;
      v100) args=(--emulate v100) ;;
      p40_t4_budget) args=(--profile p40 --gpu-memory-limit 14) ;;
      *) log "stage fp16: unknown configuration '$config' (t4 v100 p40_t4_budget)"; continue ;;
    esac
    verlfit plan "${args[@]/--gpu-memory-limit/--gpu-memory}" --model "$MODEL" --batch-size 32 --max-prompt-length 512 --max-response-length 256 > "$RUNS/fp16-$config.plan" 2>&1 \
      || log "plan fp16-$config: status $?"
    train "fp16-$config" "${args[@]}" --model "$MODEL" --data "$DATA" --steps "${FP16_STEPS:-10}" --batch-size 32 --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}"
  done
  return 0
}

stage_learn_fp16() {
  # learn's check at one learning rate (1e-5: 3e-5 made fp32 PPO fall in the learn stage), fp16 training under the T4's
  # memory, with the profile's fp16 rollout and with an fp32 rollout; 200 steps x ~1.1 s + start-up, all at once
  local synth=$WORK/synthetic small=$WORK/small-sft rollout algo
  learn_data
  for rollout in ${LEARN_FP16_ROLLOUTS:-float16 float32}; do
    for algo in ppo grpo; do
      if [ "$algo" = ppo ]; then
        VLLM_DTYPE=$rollout train "learn-fp16-ppo-rollout-$rollout" --emulate t4 --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
          --max-response-length 128 --actor-lr 1e-5 --critic-lr 5e-5 --skip-checks --test-freq "${LEARN_TEST_FREQ:-20}" --save-freq -1 &
      else
        VLLM_DTYPE=$rollout train "learn-fp16-grpo-rollout-$rollout" --emulate t4 --algo grpo --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
          --max-response-length 128 --actor-lr 1e-5 --skip-checks --test-freq "${LEARN_TEST_FREQ:-20}" --save-freq -1 &
      fi
    done
  done
  wait
}

stage_graph_memory() {
  # issue 13: does patch 0022 leave allocated memory behind per generate call? benchmarks/graph_memory_probe.py
  # decodes GRAPH_MEMORY_CALLS times with a fresh StaticDecoder each, with a new side stream per capture (as
  # before the fix) and with capture_stream (the fix), and records torch.cuda.memory_allocated after each
  log "start graph_memory: allocated memory after each of ${GRAPH_MEMORY_CALLS:-8} CUDA-graph generate calls, per capture-stream policy"
  timeout -s INT -k 20 "$(run_limit)" python3 benchmarks/graph_memory_probe.py --model "$MODEL" --calls "${GRAPH_MEMORY_CALLS:-8}" \
    --output "$RUNS/graph_memory.json" > "$RUNS/graph_memory.console" 2>&1 || log "graph_memory: status $?"
  tail -n 6 "$RUNS/graph_memory.console" | sed "s/^/  graph_memory| /" | tee -a "$RUNS/stages.log"
  [ -f "$RUNS/graph_memory.json" ] && cp "$RUNS/graph_memory.json" "$OUT/graph_memory.json"
  return 0
}

stage_lora_speed() {
  # lora_1p5b_ppo (call of 2026-12-01): 63.5 s of generation a step (~250 ms per decode step at batch 32) against
  # 7.4 s for the full-parameter 0.5B; the suspect is FSDP's hooks on every adapter unit per token (patch 0023).
  # Unwrapped first, so a call cut short by its deadline still measures the key.
  [ -f "$MODEL_1P5B/config.json" ] || { log "lora_speed: no $MODEL_1P5B (run setup with this stage named)"; return 0; }
  local config keys extra
  for config in ${LORA_SPEED_CONFIGS:-unwrap all today}; do
    keys=$(speed_keys "$config" lora_speed) || continue
    extra=()
    # shellcheck disable=SC2206  # keys are words without spaces
    [ -z "$keys" ] || extra=(-- $keys)
    train "lora-speed-$config" --emulate p40 --model "$MODEL_1P5B" --data "$DATA" --steps "${LORA_SPEED_STEPS:-4}" --batch-size 32 --max-prompt-length 512 \
      --max-response-length 256 --lora-rank 32 "${COMMON[@]}" "${extra[@]}"
  done
  return 0
}

calibrate() {  # calibrate PROFILE_ARGS -- NAME:ARGS ...: 3 steps each, no memory limit (allocated = the real need)
  local common=() spec
  while [ "$1" != "--" ]; do common+=("$1"); shift; done; shift
  for spec in "$@"; do
    # shellcheck disable=SC2086  # the spec's arguments are words
    train "${spec%%:*}" "${common[@]}" --plan off ${spec#*:} --model "$MODEL" --data "$DATA" --steps 3 "${COMMON[@]}"
  done
}

stage_calibrate_p40() {
  calibrate --profile p40 -- \
    "cal-p40-ppo-m4-512:--micro-batch-size 4 --max-prompt-length 512 --max-response-length 256" \
    "cal-p40-ppo-m8-opt:--micro-batch-size 8 --offload optimizer --max-prompt-length 256 --max-response-length 128" \
    "cal-p40-grpo-m4:--algo grpo --batch-size 8 --micro-batch-size 4 --offload optimizer --max-prompt-length 512 --max-response-length 256"
}

stage_calibrate_a10() {
  calibrate --profile a10 --rollout hf --attention sdpa -- \
    "cal-a10-ppo-m8:--micro-batch-size 8 --max-prompt-length 512 --max-response-length 256" \
    "cal-a10-ppo-m4-nockpt:--micro-batch-size 4 --no-gradient-checkpointing --max-prompt-length 256 --max-response-length 256" \
    "cal-a10-grpo-m8:--algo grpo --batch-size 16 --micro-batch-size 8 --max-prompt-length 512 --max-response-length 256"
}

stage_calibrate_check() {
  # an independent check of the eager bf16 entropy coefficient that cal-a10-ppo-m8 / cal-a10-grpo-m8 fitted:
  # another micro-batch (log-prob 32) and sequence split (256/256); the planner puts its peak in the old log-prob
  calibrate --profile a10 --rollout hf --attention sdpa -- \
    "cal-a10-grpo-m16-256:--algo grpo --batch-size 8 --micro-batch-size 16 --max-prompt-length 256 --max-response-length 256"
}

learn_data() {  # the synthetic problems and the SFT-warmed small model, shared by learn, learn_lora, soak and fault stages
  # one maker at a time: --parallel soak_ppo soak_grpo fault_worker fault_disk all need them (flock: the others wait)
  (
  flock 9
  # the raw problems beside the prepared folder, not inside it: verlfit writes prepared data only into a folder that
  # holds nothing else
  local synth=$WORK/synthetic raw=$WORK/synthetic-raw small=$WORK/small-sft
  [ -f "$raw/train.jsonl" ] || python3 benchmarks/gsm8k_synthetic.py --output "$raw" --train-size 4096 --test-size 256
  [ -f "$synth/train.parquet" ] || verlfit prepare-gsm8k --input "$raw" --output "$synth" --tokenizer "$MODEL" --max-prompt-length 256
  # seed 2 stopped at step 450 with 0.340 on the dev split (the stop rule is >= 0.25), ~30 s on an H200;
  # 0.315 greedy accuracy on 200 test problems (call 5 of 2026-11-29)
  [ -f "$small/config.json" ] || python3 benchmarks/sft_warmup.py --data-dir "$raw" --output "$small" --tokenizer-dir "$MODEL" --seed 2 | tail -n 3 | tee -a "$RUNS/stages.log"
  ) 9> "$WORK/.learn_data.lock"
}

stage_learn_data() {  # learn_data alone: stages started --parallel after it do not race to make the small model
  learn_data
}

stage_learn() {
  local synth=$WORK/synthetic small=$WORK/small-sft lr
  learn_data
  # responses up to 128 tokens: the synthetic answers take 49-88 tokens (median 62) with the local tokenizer,
  # so 64 would cut off the final "#### N" of about one in six.
  # --save-freq 200: one checkpoint, of the last step (verl also saves on the last step whatever the frequency),
  # for stage export_eval; the small model's checkpoint is a few hundred MB
  # LEARN_ALGOS (default "ppo grpo"), LEARN_TAG (a suffix for the run names) and LEARN_EXTRA (more verlfit train
  # words, e.g. "-- +actor_rollout_ref.actor.trim_padding=True") run variants of the same check
  local algo extra=()
  # shellcheck disable=SC2206  # LEARN_EXTRA is words without spaces
  [ -z "${LEARN_EXTRA:-}" ] || extra=(${LEARN_EXTRA})
  for lr in ${LEARN_LRS:-1e-5 3e-5}; do
    for algo in ${LEARN_ALGOS:-ppo grpo}; do
      if [ "$algo" = ppo ]; then
        train "learn-ppo-lr$lr${LEARN_TAG:-}" --emulate p40 --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
          --max-response-length 128 --actor-lr "$lr" --critic-lr 5e-5 --skip-checks --test-freq "${LEARN_TEST_FREQ:-20}" --save-freq 200 "${extra[@]}" &
      else
        train "learn-grpo-lr$lr${LEARN_TAG:-}" --emulate p40 --algo grpo --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
          --max-response-length 128 --actor-lr "$lr" --skip-checks --test-freq "${LEARN_TEST_FREQ:-20}" --save-freq 200 "${extra[@]}" &
      fi
    done
  done
  wait
}

stage_export_eval() {
  # The learning check's final checkpoint as a Hugging Face model, scored against the model it started from on the
  # 256 held-out problems its validation used (same greedy decoding, same strict score, fp32 + SDPA from the run's
  # p40 profile, responses <= 128 tokens from the run's settings). Call 5 of 2026-11-29 validated learn-grpo-lr1e-5
  # at 0.320 (step 0) and 0.520 (step 200): eval should agree within noise (about +-0.03 for one accuracy on 256 rows).
  local synth=$WORK/synthetic small=$WORK/small-sft name=${EXPORT_RUN:-learn-grpo-lr1e-5} status=0 step out
  local run=$RUNS/$name
  step=$(cat "$run/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
  log "export_eval $name: verlfit export (checkpoint of step $step), then verlfit eval --compare $small"
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit export "$run" --force > "$RUNS/$name.export.console" 2>&1 || status=$?
  log "end export $name: status $status"; tail -n 3 "$RUNS/$name.export.console" | sed "s/^/  export| /"
  [ "$status" -eq 0 ] || return 0
  out=$run/eval/global_step_$step-test
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit eval "$run/export/global_step_$step" --data "$synth" --limit 256 --batch-size 64 \
    --compare "$small" --output "$out" > "$RUNS/$name.eval.console" 2>&1 || status=$?
  log "end eval $name: status $status"; tail -n 4 "$RUNS/$name.eval.console" | sed "s/^/  eval| /" | tee -a "$RUNS/stages.log"
  [ -f "$out/comparison.json" ] && cp "$out/comparison.json" "$RUNS/$name.eval.json"
  python3 -m verlfit report "$run" > /dev/null 2>&1 && grep -E '^(validation|eval) ' "$run/report/summary.txt" | tee -a "$RUNS/stages.log" || true
}

own_data() {  # the own task's problems, prepared by verlfit prepare-data with the local tokenizer (all models here share it)
  (
  flock 9
  [ -f "$OWN/raw/train.jsonl" ] || python3 benchmarks/own_task.py --output "$OWN/raw" --train-size 4096 --test-size 256
  if [ ! -f "$OWN/data/train.parquet" ]; then
    verlfit prepare-data --train "$OWN/raw/train.jsonl" --test "$OWN/raw/test.jsonl" --question-column problem --answer-column solution \
      --data-source verlfit/shelf-stock --prompt-template "$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.PROMPT_TEMPLATE)')" \
      --tokenizer "$MODEL" --max-prompt-length 256 --output "$OWN/data" 2>&1 | tail -n 4 | tee -a "$RUNS/stages.log"
  fi
  ) 9> "$WORK/.own_data.lock"
}

own_export_eval() {  # own_export_eval NAME [EVAL ARGS...]: export the run's last checkpoint, eval it with the own reward
  local name=$1 status=0 step out; shift
  local run=$RUNS/$name
  step=$(cat "$run/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit export "$run" --force > "$RUNS/$name.export.console" 2>&1 || status=$?
  log "end export $name (checkpoint of step $step): status $status"; tail -n 3 "$RUNS/$name.export.console" | sed "s/^/  export| /"
  [ "$status" -eq 0 ] || return 0
  out=$run/eval/global_step_$step-test
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit eval "$run/export/global_step_$step" --data "$OWN/data" --batch-size 64 \
    --reward-function "$OWN_REWARD_FILE:compute_score" --output "$out" "$@" > "$RUNS/$name.eval.console" 2>&1 || status=$?
  log "end eval $name: status $status"; tail -n 5 "$RUNS/$name.eval.console" | sed "s/^/  eval| /" | tee -a "$RUNS/stages.log"
  [ -f "$out/summary.json" ] && cp "$out/summary.json" "$RUNS/$name.eval.json"
  [ -f "$out/comparison.json" ] && cp "$out/comparison.json" "$RUNS/$name.eval.json"
  return 0
}

stage_own_task() {
  own_data
  local name
  # GRPO with LoRA on the Qwen3-1.7B shape; PPO full-parameter on the Qwen3-0.6B shape: 4 steps each, no validation,
  # one checkpoint of the last step for export; the plan first (its predicted peak against the run's measured one)
  if [ -f "$MODEL_QWEN3_1P7B/config.json" ]; then
    name=own-grpo-lora-qwen3-1p7b
    verlfit plan --model "$MODEL_QWEN3_1P7B" --emulate p40 --algo grpo --lora-rank 16 --batch-size 16 --max-prompt-length 256 --max-response-length 128 > "$RUNS/$name.plan" 2>&1 || true
    train "$name" --emulate p40 --algo grpo --lora-rank 16 --model "$MODEL_QWEN3_1P7B" --data "$OWN/data" --steps 4 --batch-size 16 \
      --max-prompt-length 256 --max-response-length 128 --skip-checks --no-validate-before-train --test-freq -1 --save-freq 4 "${OWN_REWARD[@]}"
    own_export_eval "$name" --limit 64
  else
    log "own_task: no $MODEL_QWEN3_1P7B (run setup with this stage named)"
  fi
  if [ -f "$MODEL_QWEN3_0P6B/config.json" ]; then
    name=own-ppo-qwen3-0p6b
    verlfit plan --model "$MODEL_QWEN3_0P6B" --emulate p40 --batch-size 16 --max-prompt-length 256 --max-response-length 128 > "$RUNS/$name.plan" 2>&1 || true
    train "$name" --emulate p40 --model "$MODEL_QWEN3_0P6B" --data "$OWN/data" --steps 4 --batch-size 16 \
      --max-prompt-length 256 --max-response-length 128 --skip-checks --no-validate-before-train --test-freq -1 --save-freq 4 "${OWN_REWARD[@]}"
    own_export_eval "$name" --limit 64
  else
    log "own_task: no $MODEL_QWEN3_0P6B (run setup with this stage named)"
  fi
}

own_warmup() {  # the small model warmed up on the own task's problems (sft_warmup.py from learn's small-sft), $WORK/own-sft
  # learn's small-sft, warmed up on GSM8K-style problems, scored 0.016 on the own task's held-out problems and GRPO
  # moved it to 0.023 in 200 steps: with 4 samples a prompt almost every group earned nothing, so its advantages were
  # zero. A model that sometimes earns reward (0.2-0.4, as learn's) is what a learning check needs: warm it up on
  # own-task problems (never the RL splits' ones: own_task.write_warmup_splits), prompted exactly as the RL run is.
  (
  flock 9
  local small=$WORK/small-sft own_small=$WORK/own-sft
  [ -f "$OWN/warmup/train.jsonl" ] || python3 benchmarks/own_task.py --warmup --output "$OWN/warmup" --train-size 4096 --test-size 256
  [ -f "$own_small/config.json" ] || python3 benchmarks/sft_warmup.py --init-model "$small" --data-dir "$OWN/warmup" --output "$own_small" \
    --instruction "$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); import own_task; print(own_task.instruction())')" \
    --seed 2 --eval-every 10 --max-new-tokens 128 | tail -n 3 | tee -a "$RUNS/stages.log"
  ) 9> "$WORK/.own_warmup.lock"
}

stage_learn_own() {
  learn_data
  own_data
  own_warmup
  local start=$WORK/own-sft name=learn-own-grpo
  # as learn's GRPO run at its first learning rate, on the own task and scored by its reward function (training and
  # validation: verl uses the custom reward for both); the 256 held-out problems are validated every 20 steps
  train "$name" --emulate p40 --algo grpo --model "$start" --data "$OWN/data" --steps 200 --batch-size 64 --max-prompt-length 256 \
    --max-response-length 128 --actor-lr 1e-5 --skip-checks --test-freq 20 --save-freq 200 "${OWN_REWARD[@]}"
  grep -o '"val-core/verlfit/shelf-stock/reward/mean@1": [0-9.]*' "$RUNS/$name/metrics.jsonl" 2>/dev/null | sed -n '1p;$p' | sed "s/^/  $name validation| /" | tee -a "$RUNS/stages.log" || true
  own_export_eval "$name" --compare "$start"
  log "learn_own: expected a held-out difference (model - start) of at least +0.10 in $RUNS/$name.eval.json"
}

# issue 26 item 6: LoRA on the new families, --emulate p40, 3 steps each, all at once (each capped at 22.5 GiB), with
# the plan first; the planner's sizes (auto-fit). NAME|MAKE_MODEL_SHAPE|DATA (gsm8k, own)|verlfit train words
LORA_FAMILY_RUNS=(
  "lora-qwen3-0p6b-ppo-gsm8k|qwen3-0.6b|gsm8k|--lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
  "lora-qwen3-1p7b-ppo-own|qwen3-1.7b|own|--lora-rank 16 --batch-size 16 --max-prompt-length 256 --max-response-length 128"
  "lora-qwen3-4b-grpo-own|qwen3-4b|own|--algo grpo --lora-rank 16 --batch-size 8 --max-prompt-length 256 --max-response-length 128"
  "lora-llama-3.2-1b-grpo-gsm8k|llama-3.2-1b|gsm8k|--algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
  "lora-llama-3.2-3b-grpo-gsm8k|llama-3.2-3b|gsm8k|--algo grpo --lora-rank 16 --batch-size 8 --max-prompt-length 512 --max-response-length 256"
  # Llama 3.2 through PPO's whole path (actor, critic with its value head, GAE); full-parameter PPO of the 1B does not
  # fit a P40 (the planner: critic update 28.1 GiB of 22.5), so both roles carry adapters
  "lora-llama-3.2-1b-ppo-gsm8k|llama-3.2-1b|gsm8k|--lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256"
  # the same as the 1B run with the p40 profile's trims off (patches 0020-0021): the planner's full widths, so the
  # LoRA terms are checked apart from the trims' effect
  "lora-llama-3.2-1b-grpo-gsm8k-untrimmed|llama-3.2-1b|gsm8k|--algo grpo --lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256 -- +actor_rollout_ref.actor.trim_padding=False +actor_rollout_ref.ref.trim_padding=False +actor_rollout_ref.rollout.trim_padding=False"
)

lora_family_run() {  # lora_family_run SPEC: make the model if missing, plan, train 3 steps (LORA_FAMILY_RUNS' format)
  local name shape data words model
  IFS='|' read -r name shape data words <<< "$1"
  model=$WORK/$shape-random
  (
  flock 9
  [ -f "$model/config.json" ] || python3 benchmarks/make_model.py --shape "$shape" --output "$model" --tokenizer-dir "$MODEL" > "$RUNS/$name.make.console" 2>&1
  ) 9> "$WORK/.$shape.lock" || { log "lora_families: making $model failed: status $?"; return 0; }
  local reward=()
  case $data in gsm8k) data=$DATA ;; own) own_data; data=$OWN/data; reward=("${OWN_REWARD[@]}") ;; esac
  local plan_words=${words%% -- *}
  # shellcheck disable=SC2086  # words: the run's verlfit train words, split on spaces by design
  verlfit plan --model "$model" --emulate p40 $plan_words > "$RUNS/$name.plan" 2>&1 || true
  # shellcheck disable=SC2086
  train "$name" --emulate p40 --model "$model" --data "$data" --steps 3 "${COMMON[@]}" "${reward[@]}" $words
}

stage_lora_families() {  # LORA_FAMILY_NAMES: run only these names (e.g. two waves that do not share the GPU's memory)
  local spec
  for spec in "${LORA_FAMILY_RUNS[@]}"; do
    if [ -n "${LORA_FAMILY_NAMES:-}" ] && ! grep -qxF -- "${spec%%|*}" <<< "${LORA_FAMILY_NAMES// /$'\n'}"; then continue; fi
    lora_family_run "$spec" &
  done
  wait
}

stage_bench() {
  local gsm=()
  [ -f "$GSM8K_DIR/train.jsonl" ] && gsm=(--gsm8k "$GSM8K_DIR")
  local mode
  for mode in ${BENCH_MODES:-card emulate_p40}; do
    case $mode in
      # the card as it is: an H200 (9.0) gets the a10 profile, whose vLLM rollout and FlashAttention-2 this stack
      # lacks (no vllm, no flash_attn: bench refuses at once without them), so HF generate and SDPA, as on an A10
      # without them (profiles/a10.yaml fallbacks); the public recipe keeps its eager attention
      card) verlfit bench --rollout hf --attention sdpa --work "$WORK/bench" --output "$OUT/bench-h200.json" "${gsm[@]}" 2>&1 | tee -a "$RUNS/stages.log" | tail -n 20 || log "bench: status $?" ;;
      emulate_p40) verlfit bench --emulate p40 --work "$WORK/bench" --output "$OUT/bench-h200-emulate-p40.json" "${gsm[@]}" 2>&1 | tee -a "$RUNS/stages.log" | tail -n 20 || log "bench --emulate p40: status $?" ;;
      *) log "stage bench: unknown mode '$mode' (card emulate_p40)" ;;
    esac
  done
}

adapters() {  # adapters NAME: the adapter's norms per checkpoint into the log and NAME.adapters.json
  python3 benchmarks/adapter_norm.py "$RUNS/$1" --json "$RUNS/$1.adapters.json" 2>&1 | sed "s/^/  $1 adapter| /" | tee -a "$RUNS/stages.log" || true
  if [ -z "${KEEP_FULL_CHECKPOINTS:-}" ]; then
    # verl saves the whole FSDP state (frozen base included) beside lora_adapter/: ~12 GiB a checkpoint here;
    # once the adapters are read, only lora_adapter/ is kept of every checkpoint but the newest (a run cut by a
    # call's deadline is resumed from it by the next call: train_or_resume)
    local newest
    newest=$(cat "$RUNS/$1/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo none)
    find "$RUNS/$1/checkpoints" -path '*/global_step_*' -not -path "*/global_step_$newest/*" -name '*.pt' -delete 2>/dev/null || true
  fi
}

train_or_resume() {  # train_or_resume NAME ARGS...: a new run, or `verlfit train --resume` of one a deadline cut short
  local name=$1; shift
  if [ ! -f "$RUNS/$name/run.json" ]; then
    train "$name" "$@"
    return 0
  fi
  # the stage's --steps is the run's total: a run that finished fewer (LORA_3B_STEPS lower in an earlier call) is
  # extended to it by `--resume --steps N`; one whose checkpoint already reaches it is left as it is
  local steps="" previous="" word checkpoint
  for word in "$@"; do [ "$previous" != --steps ] || steps=$word; previous=$word; done
  checkpoint=$(cat "$RUNS/$name/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0)
  if [ -n "$steps" ] && [ "$checkpoint" -ge "$steps" ]; then
    log "$name: finished (its checkpoint of step $checkpoint reaches --steps $steps): not resumed"
    return 0
  fi
  log "resume $name: verlfit train --resume $RUNS/$name${steps:+ --steps $steps}"
  local start=$SECONDS status=0
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit train --resume "$RUNS/$name" ${steps:+--steps "$steps"} >> "$RUNS/$name.console" 2>&1 || status=$?
  log "end $name resume: status $status after $((SECONDS - start)) s"
  tail -n 5 "$RUNS/$name.console" | sed "s/^/  $name| /"
}

stage_lora_1p5b_ppo() {
  [ -f "$MODEL_1P5B/config.json" ] || { log "lora_1p5b_ppo: no $MODEL_1P5B (run setup with this stage named)"; return 0; }
  verlfit plan --model "$MODEL_1P5B" --emulate p40 --lora-rank 32 --batch-size 32 > "$RUNS/lora-1p5b-ppo.plan" 2>&1 || true
  # the planner's verdict for full-parameter PPO of the same model, for the README table
  verlfit plan --model "$MODEL_1P5B" --emulate p40 --batch-size 32 > "$RUNS/full-1p5b-ppo.plan" 2>&1 || true
  local extra=()
  # shellcheck disable=SC2206  # LORA_EXTRA is words without spaces
  [ -z "${LORA_EXTRA:-}" ] || extra=(${LORA_EXTRA})
  train_or_resume lora-1p5b-ppo --emulate p40 --model "$MODEL_1P5B" --data "$DATA" --steps 10 --batch-size 32 --max-prompt-length 512 \
    --max-response-length 256 --lora-rank 32 --skip-checks --no-validate-before-train --test-freq -1 --save-freq 5 "${extra[@]}"
  adapters lora-1p5b-ppo
}

stage_lora_3b_grpo() {
  [ -f "$MODEL_3B/config.json" ] || { log "lora_3b_grpo: no $MODEL_3B (run setup with this stage named)"; return 0; }
  local batch=${LORA_3B_BATCH:-32} samples=${LORA_3B_SAMPLES:-4} steps=${LORA_3B_STEPS:-5} extra=()
  # shellcheck disable=SC2206  # LORA_EXTRA is words without spaces
  [ -z "${LORA_EXTRA:-}" ] || extra=(${LORA_EXTRA})
  verlfit plan --model "$MODEL_3B" --emulate p40 --algo grpo --samples "$samples" --lora-rank 32 --batch-size "$batch" > "$RUNS/lora-3b-grpo.plan" 2>&1 || true
  # save at step 3 and at the last step (verl saves every --save-freq steps and at the end)
  train_or_resume lora-3b-grpo --emulate p40 --algo grpo --samples "$samples" --model "$MODEL_3B" --data "$DATA" --steps "$steps" --batch-size "$batch" \
    --max-prompt-length 512 --max-response-length 256 --lora-rank 32 --skip-checks --no-validate-before-train --test-freq -1 --save-freq 3 "${extra[@]}"
  adapters lora-3b-grpo
}

stage_learn_lora() {
  # The learning check of stage_learn with LoRA. Rank 32 on the small model (hidden 256, 4 layers): an eighth of
  # the full rank of its square projections, enough room that capacity is not what is tested, and the adapter
  # stays small (720,896 parameters on the 4 layers). alpha 32 (scaling 1) and learning rates ten times the
  # full-parameter check's: Schulman et al., "LoRA Without Regret" (Thinking Machines, 2025) find the best
  # LoRA learning rate about 10x full fine-tuning's, roughly independent of the rank under alpha/r scaling,
  # and RL (policy gradient) as well served by LoRA as by full fine-tuning even at small ranks. The critic (LoRA at
  # the same rank, its value head trained in full, patch 0011) gets ten times its full-parameter rate too.
  local synth=$WORK/synthetic small=$WORK/small-sft lr algo extra=()
  for algo in ${LEARN_LORA_ALGOS:-ppo grpo}; do  # a typo would run nothing and say nothing: a device call lost
    case $algo in ppo | grpo) ;; *) log "learn_lora: LEARN_LORA_ALGOS has '$algo'; write ppo, grpo or both (\"ppo grpo\"): nothing run"; return 0 ;; esac
  done
  learn_data
  # shellcheck disable=SC2206  # LORA_EXTRA is words without spaces
  [ -z "${LORA_EXTRA:-}" ] || extra=(${LORA_EXTRA})
  for lr in ${LEARN_LORA_LRS:-1e-4 3e-4}; do
    # --save-freq 50: a run a call's deadline cuts is resumed by the next call (train_or_resume)
    grep -qw ppo <<< "${LEARN_LORA_ALGOS:-ppo grpo}" && train_or_resume "learn-lora-ppo-lr$lr" --emulate p40 --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
      --max-response-length 128 --actor-lr "$lr" --critic-lr 5e-4 --lora-rank 32 --lora-alpha 32 --skip-checks --test-freq "${LEARN_TEST_FREQ:-20}" --save-freq 50 "${extra[@]}" &
    grep -qw grpo <<< "${LEARN_LORA_ALGOS:-ppo grpo}" && train_or_resume "learn-lora-grpo-lr$lr" --emulate p40 --algo grpo --model "$small" --data "$synth" --steps 200 --batch-size 64 --max-prompt-length 256 \
      --max-response-length 128 --actor-lr "$lr" --lora-rank 32 --lora-alpha 32 --skip-checks --test-freq "${LEARN_TEST_FREQ:-20}" --save-freq 50 "${extra[@]}" &
  done
  wait
}

# issue 36: LoRA with the frozen base stored in 16 bits (patch 0026; verlfit sets it with --lora-rank, the profile's
# dtype: bf16 on p40/a10, fp16 on t4). The three targets, each planned (NAME.plan, the planner's auto-fit as train
# runs it) and then trained 3 steps on random weights made here: NAME|MAKE_MODEL_SHAPE|verlfit plan and train words
LORA16_SIZE="--lora-rank 32 --batch-size 16 --max-prompt-length 512 --max-response-length 256"
LORA16_TARGETS=(
  "lora16-qwen3-4b-grpo-t4|qwen3-4b|--emulate t4 --algo grpo $LORA16_SIZE"
  "lora16-qwen2.5-3b-ppo-p40|qwen2.5-3b|--emulate p40 $LORA16_SIZE"
  # this stack has neither vLLM nor flash-attn: the a10 profile's bf16 path with the HF rollout and SDPA
  "lora16-qwen2.5-7b-grpo-a10|qwen2.5-7b|--emulate a10 --rollout hf --attention sdpa --algo grpo $LORA16_SIZE"
)

lora16_model() {  # lora16_model SHAPE: $WORK/SHAPE-random, made once (random weights, the 0.5B's tokenizer)
  local model=$WORK/$1-random
  (
  flock 9
  [ -f "$model/config.json" ] || python3 benchmarks/make_model.py --shape "$1" --output "$model" --tokenizer-dir "$MODEL" \
    > "$RUNS/make-$1.console" 2>&1
  ) 9> "$WORK/.$1.lock"
}

lora16_target() {  # lora16_target SPEC: make the model if missing, plan, train 3 steps (LORA16_TARGETS' format)
  local name shape words
  IFS='|' read -r name shape words <<< "$1"
  lora16_model "$shape" || { log "lora16: making $WORK/$shape-random failed: status $?"; return 0; }
  # shellcheck disable=SC2086  # words: verlfit's words, split on spaces by design
  verlfit plan --model "$WORK/$shape-random" --auto-fit $words > "$RUNS/$name.plan" 2>&1 || true
  # shellcheck disable=SC2086
  train "$name" --model "$WORK/$shape-random" --data "$DATA" --steps 3 "${COMMON[@]}" $words
}

lora16_speed() {  # (c): auto-fit's speed pick against the memory-first choice, one after the other
  # LoRA PPO of the 0.5B shape on the P40 card (rank 32, batch 32, 512/256): the speed pick takes the fp32 base at
  # micro-batch 16 (the P40's estimate: no upcast per unit and decode step); with --frozen-base-dtype bfloat16 and
  # --gradient-checkpointing kept, auto-fit makes the memory-first choice (bf16 base, the largest micro-batches)
  local words=(--emulate p40 --lora-rank 32 --batch-size 32 --max-prompt-length 512 --max-response-length 256)
  local name extra
  for name in chosen memory-first; do
    extra=()
    [ "$name" = chosen ] || extra=(--frozen-base-dtype bfloat16 --gradient-checkpointing)
    verlfit plan --model "$MODEL" --auto-fit "${words[@]}" "${extra[@]}" > "$RUNS/lora16-speed-$name.plan" 2>&1 || true
    train "lora16-speed-$name" --model "$MODEL" --data "$DATA" --steps "${LORA16_SPEED_STEPS:-4}" "${COMMON[@]}" \
      "${words[@]}" "${extra[@]}"
  done
}

stage_lora16_speed() {  # (c) of stage lora16 alone, for a comparison with the GPU to itself
  lora16_speed
}

stage_lora16() {
  # (a) the targets, all at once (caps 14 + 22.5 + 22 GiB), and the 7B's plan on a P40 (no run: its verdict is
  # "does not fit"; the plan shows the arithmetic per phase). (b) the learning check of learn_lora's GRPO run (the
  # SFT-warmed small model, rank 32, alpha 32, lr 1e-4, 200 steps) with the base in 16 bits, beside the same run
  # with --frozen-base-dtype float32 (LORA16_LEARN_BASES, default "bfloat16 float32"). The small model is fp32 on disk
  # (sft_warmup.py): the 16-bit run rounds its frozen base to bf16 when verl loads it, so its reference policy (the
  # adapter off) is that rounding, while the float32 run keeps the weights as saved.
  local synth=$WORK/synthetic small=$WORK/small-sft base spec
  learn_data
  for base in ${LORA16_LEARN_BASES:-bfloat16 float32}; do
    case $base in
      bfloat16 | float32) ;;
      *) log "lora16: LORA16_LEARN_BASES has '$base'; write bfloat16, float32 or both"; continue ;;
    esac
    train "lora16-learn-grpo-$base" --emulate p40 --algo grpo --model "$small" --data "$synth" --steps 200 \
      --batch-size 64 --max-prompt-length 256 --max-response-length 128 --actor-lr 1e-4 --lora-rank 32 --lora-alpha 32 \
      --frozen-base-dtype "$base" --skip-checks --test-freq "${LEARN_TEST_FREQ:-50}" --save-freq -1 &
  done
  # (c) once the targets are done (the learning check's small model still shares the GPU, with both runs alike);
  # LORA16_SPEED=0 leaves it out (stage lora16_speed runs it alone)
  {
    for spec in "${LORA16_TARGETS[@]}"; do
      lora16_target "$spec" &
    done
    wait
    [ "${LORA16_SPEED:-1}" = 0 ] || lora16_speed
  } &
  # shellcheck disable=SC2086  # LORA16_SIZE: words, split on spaces by design
  (lora16_model qwen2.5-7b && verlfit plan --model "$WORK/qwen2.5-7b-random" --emulate p40 --algo grpo $LORA16_SIZE \
    --auto-fit > "$RUNS/lora16-qwen2.5-7b-grpo-p40.plan" 2>&1 || true) &
  wait
}

stage_multigpu() {
  local steps=${MULTIGPU_STEPS:-10} big=$WORK/qwen2.5-1.5b-random port=${MULTIGPU_RAY_PORT:-6390}
  local args=(--emulate p40 --model "$MODEL" --data "$DATA" --steps "$steps" --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}")
  { verlfit doctor --profile p40 --data "$DATA" --model "$MODEL" || true; nvidia-smi topo -m || true; } > "$RUNS/multigpu-topology.console" 2>&1
  grep -A12 ' topology ' "$RUNS/multigpu-topology.console" | tee -a "$RUNS/stages.log" || true
  train multigpu-gpus1 "${args[@]}" --gpus 1
  train multigpu-gpus2 "${args[@]}" --gpus 2
  NCCL_P2P_DISABLE=1 train multigpu-gpus2-no-p2p "${args[@]}" --gpus 2
  [ -f "$big/config.json" ] || python3 benchmarks/make_model.py --shape qwen2.5-1.5b --output "$big" --tokenizer-dir "$MODEL"
  verlfit plan --emulate p40 --model "$big" --gpus 2 > "$RUNS/multigpu-1.5b.plan" 2>&1 || log "plan 1.5B on 2 emulated P40s: status $? (the planner says it does not fit)"
  train multigpu-1.5b-gpus2 --emulate p40 --model "$big" --data "$DATA" --steps 10 --max-prompt-length 512 --max-response-length 256 "${COMMON[@]}" \
    --gpus 2 --plan off --micro-batch-size 1 --offload optimizer
  # two nodes on one host: each raylet sees one GPU; a pre-started cluster's workers take their environment from
  # `ray start` (verl's main_ppo.py:42-45), so the profile's knobs and the emulated card's limit go there
  local defaults
  defaults=$(verlfit profiles p40 --env-shell)
  (
    eval "$defaults"
    export VERLFIT_GPU_MEMORY_LIMIT_GIB=22.5
    CUDA_VISIBLE_DEVICES=0 python3 -m ray.scripts.scripts start --head --port="$port" --num-gpus=1 --disable-usage-stats
    CUDA_VISIBLE_DEVICES=1 python3 -m ray.scripts.scripts start --address="127.0.0.1:$port" --num-gpus=1 --disable-usage-stats
  ) > "$RUNS/multigpu-ray.console" 2>&1 || log "ray start: status $?"
  RAY_ADDRESS="127.0.0.1:$port" train multigpu-nodes2 "${args[@]}" --nodes 2 --gpus 1
  python3 -m ray.scripts.scripts stop --force >> "$RUNS/multigpu-ray.console" 2>&1 || true
}

soak() {  # soak NAME TOTAL PLAN TRAIN_ARGS...: one run through its interruption plan (benchmarks/soak_run.py), re-entrant
  local name=$1 total=$2 plan=$3 status=0; shift 3
  local deadline=()
  [ -z "${DEADLINE:-}" ] || deadline=(--deadline "$DEADLINE")
  log "soak $name: $total steps, plan '$plan'$( [ -f "$RUNS/$name.events" ] && echo "; events so far: $(cut -f2 "$RUNS/$name.events" | paste -sd, -)")"
  python3 benchmarks/soak_run.py --runs "$RUNS" --name "$name" --total "$total" --plan "$plan" "${deadline[@]}" -- "$@" || status=$?
  log "soak $name: status $status"
}

soak_data() {  # $WORK/gsm8k-val256: $DATA's training set, the first 256 rows of its test set (validation every 100 steps)
  (
  flock 9
  local val=$WORK/gsm8k-val256
  [ -f "$val/test.parquet" ] && exit 0
  mkdir -p "$val"
  ln -sfn "$DATA/train.parquet" "$val/train.parquet"
  python3 - "$DATA/test.parquet" "$val/test.parquet" <<'PY'
import os, sys
import pyarrow.parquet as pq
source, target = sys.argv[1:3]
pq.write_table(pq.read_table(source).slice(0, 256), target + ".partial")
os.replace(target + ".partial", target)
PY
  ) 9> "$WORK/.soak_data.lock"
}

SOAK_ARGS=(--emulate p40 --max-prompt-length 512 --max-response-length 256 --batch-size 64 --save-freq 50 --test-freq 100 --skip-checks)

stage_soak_ppo() {
  learn_data
  soak_data
  local steps=${SOAK_PPO_STEPS:-500}
  soak soak-ppo "$steps" "${SOAK_PPO_PLAN-sigint@150 sigkill@300}" --model "$WORK/small-sft" --data "$WORK/gsm8k-val256" --steps "$steps" "${SOAK_ARGS[@]}"
}

stage_soak_grpo() {
  learn_data
  soak_data
  local steps=${SOAK_GRPO_STEPS:-300}
  soak soak-grpo "$steps" "${SOAK_GRPO_PLAN-sigint@120}" --algo grpo --samples 4 --model "$WORK/small-sft" --data "$WORK/gsm8k-val256" --steps "$steps" "${SOAK_ARGS[@]}"
}

run_outcome() {  # run_outcome RUN_DIR: run.json's outcome as one JSON line (none: the run finished or has no record)
  python3 -c 'import json, sys; print(json.dumps(json.load(open(sys.argv[1])).get("outcome")))' "$1/run.json" 2>/dev/null || echo "no $1/run.json"
}

stage_fault_oom() {
  if [ -f "$RUNS/fault-oom/run.json" ]; then log "fault_oom: done in an earlier call ($RUNS/fault-oom): $(run_outcome "$RUNS/fault-oom")"; return 0; fi
  train fault-oom --emulate p40 --plan off --batch-size 64 --mini-batch-size 64 --micro-batch-size 64 --model "$MODEL" --data "$DATA" --steps 2 \
    --max-prompt-length 512 --max-response-length 256 --skip-checks --no-validate-before-train --test-freq -1 --save-freq -1
  grep '^verlfit:\|^  fix:' "$RUNS/fault-oom.console" | tail -n 8 | sed 's/^/  fault-oom| /' | tee -a "$RUNS/stages.log" || true
  log "fault_oom outcome: $(run_outcome "$RUNS/fault-oom")"
}

FAULT_SMALL_ARGS=(--emulate p40 --batch-size 64 --max-prompt-length 256 --max-response-length 128 --skip-checks --no-validate-before-train --test-freq -1)

stage_fault_worker() {
  learn_data
  soak fault-worker 12 "${FAULT_WORKER_PLAN-kill-worker@7}" --model "$WORK/small-sft" --data "$WORK/synthetic" --steps 12 --save-freq 5 "${FAULT_SMALL_ARGS[@]}"
}

checkpoints_in() {  # checkpoints_in RUN_DIR: its global_step_* folders, in step order, on one line
  find "$1/checkpoints" -maxdepth 1 -name 'global_step_*' -printf '%f\n' 2>/dev/null | sort -V | paste -sd' ' -
}

stage_fault_disk() {
  local mnt=$RUNS/fault-disk-mnt keep=$RUNS/fault-disk used size status=0 start out
  local run=$mnt/run
  if [ -f "$keep/run.json" ]; then log "fault_disk: done in an earlier call ($keep): $(run_outcome "$keep")"; return 0; fi
  learn_data
  mkdir -p "$mnt"
  if mountpoint -q "$mnt"; then log "fault_disk: $mnt is still mounted from an earlier call: unmounting, starting again"; umount "$mnt" || return 0; fi
  # big at first: the step-2 checkpoint's real size is measured, then the tmpfs is shrunk around it
  if ! out=$(mount -t tmpfs -o size=16g tmpfs "$mnt" 2>&1); then log "tmpfs mount refused: $out"; return 0; fi
  log "fault_disk: tmpfs of 16 GiB at $mnt; verlfit train --run-dir $run, checkpoints every 2 steps"
  start=$SECONDS
  timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit train --run-dir "$run" --model "$WORK/small-sft" --data "$WORK/synthetic" --steps 6 --save-freq 2 \
    "${FAULT_SMALL_ARGS[@]}" > "$RUNS/fault-disk.console" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null && [ ! -f "$run/checkpoints/latest_checkpointed_iteration.txt" ]; do sleep 1; done
  if [ -f "$run/checkpoints/latest_checkpointed_iteration.txt" ]; then
    used=$(df --output=used -B1 "$mnt" | tail -n 1 | tr -d ' ')
    size=$(( used * 3 / 2 ))
    if mount -o remount,size="$size" "$mnt"; then
      log "fault_disk: step-2 checkpoint complete, $used bytes used; tmpfs shrunk to $size bytes: the step-4 checkpoint cannot fit"
    else
      log "fault_disk: remount to $size bytes refused"
    fi
    du -sb "$run/checkpoints/"global_step_* 2>/dev/null | sed 's/^/  fault-disk| /' | tee -a "$RUNS/stages.log" || true
  fi
  wait "$pid" || status=$?
  log "end fault-disk: status $status after $((SECONDS - start)) s (expected: a failure at the step-4 save)"
  grep '^verlfit:\|^  fix:' "$RUNS/fault-disk.console" | tail -n 8 | sed 's/^/  fault-disk| /' | tee -a "$RUNS/stages.log" || true
  log "fault_disk outcome: $(run_outcome "$run")"
  log "fault_disk checkpoints left: $(checkpoints_in "$run") (tracker: $(cat "$run/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo none))"
  find "$run/checkpoints" -path '*global_step_*' -type f -printf '%s %P\n' 2>/dev/null | sed 's/^/  fault-disk file| /' >> "$RUNS/stages.log" || true
  printf '%s\tfull disk at the step-4 save\t%s\t-\t%s\t%s\n' "$(date +%Y-%m-%dT%H:%M:%S%z)" "$(cat "$run/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0)" "$status" \
    "$(grep '^verlfit:' "$RUNS/fault-disk.console" | tail -n 1 | tr '\t' ' ')" >> "$RUNS/fault-disk.events"
  if [ -f "$run/run.json" ]; then
    used=$(df --output=used -B1 "$mnt" | tail -n 1 | tr -d ' ')
    mount -o remount,size=$(( (used + 1) * 8 )) "$mnt" && log "fault_disk: tmpfs grown to $(( (used + 1) * 8 )) bytes; verlfit train --resume $run"
    status=0
    echo "== resume" >> "$RUNS/fault-disk.console"
    local before; before=$(wc -c < "$RUNS/fault-disk.console")
    timeout -s INT -k 20 "$(run_limit)" python3 -m verlfit train --resume "$run" >> "$RUNS/fault-disk.console" 2>&1 || status=$?
    log "end fault-disk resume: status $status"
    tail -n 5 "$RUNS/fault-disk.console" | sed 's/^/  fault-disk| /'
    # the resume's own last word (verlfit's line, or the display's "finished at step N/M"), not the failed run's
    printf '%s\tresume after growing the disk\t%s\t-\t%s\t%s\n' "$(date +%Y-%m-%dT%H:%M:%S%z)" "$(cat "$run/checkpoints/latest_checkpointed_iteration.txt" 2>/dev/null || echo 0)" "$status" \
      "$(tail -c +$((before + 1)) "$RUNS/fault-disk.console" | grep -E '^(verlfit:|finished at step)' | tail -n 1 | tr '\t' ' ' | grep . || echo -)" >> "$RUNS/fault-disk.events"
    log "fault_disk checkpoints after the resume: $(checkpoints_in "$run")"
    mkdir -p "$keep"
    cp "$run/run.json" "$run/metrics.jsonl" "$keep/" 2>/dev/null || true
    tail -n 400 "$run/train.log" > "$keep/train.log" 2>/dev/null || true
  fi
  umount "$mnt" || log "fault_disk: umount $mnt: status $?"
}

stage_noeos() {
  # issue 29: the CUDA-graph decoder raised TypeError on eos_token_id=None at the first generation (and verl's HF
  # rollout itself died one line after generate: patch 0025); expected now: 3 steps, every response of full length
  [ -f "$MODEL/tokenizer.json" ] || { log "noeos: no $MODEL (run setup first: it makes the tokenizer and GSM8K)"; return 0; }
  [ -f "$MODEL_NO_EOS/config.json" ] || python3 benchmarks/qwen3_no_eos_model.py --output "$MODEL_NO_EOS" --tokenizer-dir "$MODEL" \
    || { log "noeos: making $MODEL_NO_EOS failed: status $?"; return 0; }
  train noeos-qwen3-0.6b --emulate p40 --model "$MODEL_NO_EOS" --data "$DATA" --steps 3 "${COMMON[@]}"
  log "noeos outcome: $(run_outcome "$RUNS/noeos-qwen3-0.6b")"
  # without an EOS every response is response_length tokens long: min = mean = max, clip_ratio 1.0
  python3 -c 'import json, sys; [print("step", r["step"], "response_length min/mean/max/clip_ratio", *(r.get("response_length/" + k) for k in ("min", "mean", "max", "clip_ratio"))) for r in map(json.loads, open(sys.argv[1])) if "response_length/mean" in r]' \
    "$RUNS/noeos-qwen3-0.6b/metrics.jsonl" 2>&1 | sed 's/^/  noeos| /' | tee -a "$RUNS/stages.log" || true
}

stage_pack() {
  local list name
  for name in soak-ppo soak-grpo; do
    [ -f "$RUNS/$name/run.json" ] || continue
    python3 benchmarks/soak_check.py "$RUNS/$name" --json "$RUNS/$name.soak.json" 2>&1 | sed "s/^/  $name soak| /" | tee -a "$RUNS/stages.log" || true
  done
  list=$(cd "$RUNS" && find . -maxdepth 2 \( -name run.json -o -name metrics.jsonl -o -name '*.console' -o -name '*.eval.json' -o -name stages.log -o -name train.log -o -name '*.adapters.json' -o -name '*.plan' \
    -o -name '*.rss.csv' -o -name '*.events' -o -name '*.soak.json' \) -not -path './fault-disk-mnt/*' | sort)
  # train.log can be long: keep its last 400 lines
  (cd "$RUNS" && for f in $list; do case $f in *train.log) tail -n 400 "$f" > "$f.tail" && echo "$f.tail";; *) echo "$f";; esac; done) > "$RUNS/.pack"
  tar -C "$RUNS" -czf "$OUT/runs.tar.gz" -T "$RUNS/.pack"
  python3 benchmarks/collect.py "$RUNS" --json "$OUT/results.json" --markdown "$OUT/results.md" && cat "$OUT/results.md"
  ls -la "$OUT"
}

parallel=""
if [ "$1" = "--parallel" ]; then parallel=1; shift; fi
if [ $# -eq 0 ]; then usage >&2; echo "device_run.sh: name at least one stage" >&2; exit 2; fi
known=$(declare -F | sed -n 's/^declare -f stage_//p')
for stage in "$@"; do
  if ! grep -qx -- "$stage" <<< "$known"; then
    echo "device_run.sh: unknown stage '$stage'; stages: $(echo "$known" | tr '\n' ' ')(--help for what each does)" >&2
    exit 2
  fi
done
STAGES="$*"  # what this call runs: setup builds the bigger models only for the stages that train them
mkdir -p "$WORK" "$RUNS" "$OUT"
if [ -n "$parallel" ]; then
  for stage in "$@"; do
    log "== stage $stage (parallel)"
    "stage_$stage" &
  done
  wait
else
  for stage in "$@"; do
    log "== stage $stage"
    "stage_$stage"
  done
fi
