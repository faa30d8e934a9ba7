#!/usr/bin/env bash
# The GPU check of issue 33, item 1: one command on the device machine (an NVIDIA H200, 16 cores,
# no network), from the repo root, writing everything to $OUT within about 8 minutes:
#
#   1. install   the carried wheels into /tmp/site (pip --no-index --no-deps --target); mleforge
#                itself runs from src/ (PYTHONPATH)
#   2. env       nvidia-smi, torch, CUDA, Triton, the packages, torch.cuda.is_bf16_supported(),
#                and whether TRL would take its Triton log-prob path (benchmarks/gpu/versions.py)
#   3. model     the carried Qwen2.5-Coder-0.5B architecture, random weights, real tokenizer
#                (benchmarks/gpu/build_model.py)
#   4. isolation the sandbox's bwrap probe; where bwrap cannot run, the rest runs unisolated
#                (MLEFORGE_ISOLATION=none) and gpu_check.json says so
#   5. train     `mleforge train --preset gpu-1x` for a few real GRPO steps (TRAIN_ARGS below),
#                through benchmarks/gpu/train_probe.py, which counts TRL's log-prob path
#   6. sandbox   benchmarks/sandbox.py, short, at up to 16 workers
# Each phase runs under `timeout` (a share of GPU_CHECK_BUDGET_S); a failing phase is recorded
# with its error tail and the next one still runs. After every phase gpu_check.json is rewritten,
# so a call stopped at its limit still brings back what was done.
#
# $OUT gets (8 files, the device tool's most): gpu_check.json (the summary: benchmarks/gpu/summary.py),
# check.log (every phase's output but training's), train.log, metrics.jsonl, run.json, config.yaml,
# rollouts.jsonl (every rollout, all steps) and sandbox.json.
#
# Before: benchmarks/gpu/prepare.sh HERE fills .gpu-carry/ (ignored; ~16 MiB). The device call:
#     run(command="bash benchmarks/gpu/check.sh", carry=[".gpu-carry"], timeout_s=540)
#
# The model's weights are random, so its completions are random tokens: every rollout is a format
# error, each group's rewards tie and the advantages are zero. The steps are real all the same
# (generation, the sandbox, the reward, TRL's loss and backward through its log-prob kernels, the
# optimizer, checkpoints): the check proves the GPU path and times it, not learning.
#
# The CPU test of everything up to the GPU (this machine, Python 3.11; cp312 wheels do not
# install on 3.11, so the test carries its own Python 3.11 download; PYTHONPATH may put the
# device's transformers 5.17, huggingface_hub 1.33, accelerate 1.15 and tokenizers 0.23.2 first):
#     GPU_CARRY=/tmp/carry-311 GPU_CARRY_PYTHON=3.11 benchmarks/gpu/prepare.sh
#     OUT=/tmp/gpuout GPU_CHECK_DEVICE=cpu GPU_CHECK_CARRY=/tmp/carry-311 GPU_CHECK_PYTHON=/opt/venv/bin/python \
#         GPU_CHECK_BUDGET_S=1800 GPU_CHECK_LIMIT_SCALE=4 bash benchmarks/gpu/check.sh
# GPU_CHECK_DEVICE=cpu turns the preset's CUDA, bf16 and bfloat16 into CPU, no bf16 and float32,
# sends the trainer down its GPU branch (TRL's fused head, in torch tiles: train_probe.py) and
# shrinks the model, the run and the benchmark (about 2 minutes on 2 cores).
#
# Environment: OUT (required), GPU_CHECK_CARRY (.gpu-carry), GPU_CHECK_PYTHON (python3: the
# device's, with torch), GPU_CHECK_SITE (/tmp/site), GPU_CHECK_WORK (/tmp/gpu-check),
# GPU_CHECK_DEVICE (cuda), GPU_CHECK_PHASES (all six; e.g. "install sandbox" to redo one on a
# warm machine: install is always needed, model before train), GPU_CHECK_BUDGET_S (480: the whole
# script; the call's timeout_s must leave a minute above it), GPU_CHECK_LIMIT_SCALE (1: multiplies
# every phase's limit; for a slow CPU test, with a larger budget).
set -uo pipefail # no -e: a failing phase is recorded and the next one runs

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$REPO" || exit 1
: "${OUT:?set OUT to the folder that comes back}"
CARRY=${GPU_CHECK_CARRY:-$REPO/.gpu-carry}
PY=${GPU_CHECK_PYTHON:-python3}
SITE=${GPU_CHECK_SITE:-/tmp/site}
WORK=${GPU_CHECK_WORK:-/tmp/gpu-check}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
BUDGET_S=${GPU_CHECK_BUDGET_S:-480}
PHASES=" ${GPU_CHECK_PHASES:-install env model isolation train sandbox} "
MODEL_DIR=$WORK/model
RUN_DIR=$WORK/run

# ==== the training command (mleforge's CLI; adapt this ONE line when its flags change) ====
TRAIN_ARGS=(train --preset gpu-1x --model "hf:$MODEL_DIR" --run-dir "$RUN_DIR" --tasks penguins,breast-cancer --eval-tasks "" --sft none --steps 3 --groups-per-step 2 --max-new-tokens 256 --expert-steps 3)
# ==== the sandbox benchmark: short, at 1, 4 and 16 concurrent runs ====
SANDBOX_ARGS=(--task titanic --repeats 3 --throughput-runs 16 --workers 1,4,16 --pool-runs 64 --out "$OUT/sandbox.json")
# Seconds each phase may take at most (less when the budget runs short; training leaves the
# sandbox benchmark its share).
declare -A LIMIT=([install]=90 [env]=90 [model]=120 [isolation]=60 [train]=300 [sandbox]=150)
for name in "${!LIMIT[@]}"; do LIMIT[$name]=$((LIMIT[$name] * ${GPU_CHECK_LIMIT_SCALE:-1})); done
SUMMARY_RESERVE_S=15
MODEL_ARGS=(--device cuda)

if [[ $DEVICE == cpu ]]; then # the CPU test: the same path, smaller and shorter
    export GPU_CHECK_DEVICE=cpu
    MODEL_ARGS=(--device cpu --layers 2 --hidden 64)
    TRAIN_ARGS+=(--steps 2 --group-size 2 --groups-per-step 1 --micro-batch 2 --max-new-tokens 8 --generation trl --expert-steps 2)
    SANDBOX_ARGS+=(--repeats 1 --throughput-runs 2 --workers 1,2 --pool-runs 5)
fi

# The benchmark's unprivileged part runs as `nobody` (as root); without that user it would stop.
id nobody >/dev/null 2>&1 || SANDBOX_ARGS+=(--as-user "")

rm -rf "$WORK" && mkdir -p "$WORK" "$OUT" || exit 1
export PYTHONPATH="$REPO/src:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 MLEFORGE_DATA=$WORK/data
# Nothing is reachable there: no waiting on a hub.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
DEADLINE=$(($(date +%s) + BUDGET_S))

say() { echo "[$(date +%T)] $*" | tee -a "$OUT/check.log"; }

# phase NAME COMMAND...: COMMAND under `timeout` (SIGINT first, so Python's cleanup closes the
# sandbox's processes; SIGKILL 20 s later), its output in $WORK/NAME.log, its row in phases.tsv,
# its exit status in LAST_RC ("skip" where it did not run).
LAST_RC=skip
phase() {
    local name=$1 limit=${LIMIT[$1]}
    shift
    LAST_RC=skip
    if [[ $PHASES != *" $name "* ]]; then
        say "$name: not asked for (GPU_CHECK_PHASES)"
        return 0
    fi
    local left=$((DEADLINE - $(date +%s) - SUMMARY_RESERVE_S))
    [[ $name == train && $PHASES == *" sandbox "* ]] && left=$((left - ${LIMIT[sandbox]}))
    ((limit > left)) && limit=$left
    local log="$WORK/$name.log"
    if ((limit < 10)); then
        say "$name: skipped, the budget is spent"
        printf '%s\tskip\t0\t%s\t\n' "$name" "$limit" >>"$WORK/phases.tsv"
        return 0
    fi
    say "$name: start (limit ${limit} s): $*"
    local start rc
    start=$(date +%s.%N)
    timeout --signal=INT --kill-after=20 "$limit" "$@" >"$log" 2>&1
    rc=$?
    local wall
    wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$rc" "$wall" "$limit" "$log" >>"$WORK/phases.tsv"
    if [[ $name == train ]]; then cp "$log" "$OUT/train.log"; else cat "$log" >>"$OUT/check.log"; fi
    tail -n 15 "$log"
    say "$name: exit $rc after $wall s"
    "$PY" benchmarks/gpu/summary.py "$WORK" "$OUT/gpu_check.json" || say "summary failed"
    LAST_RC=$rc
}

install_wheels() {
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "$CARRY"/wheels/*.whl && ls "$SITE"
}

probe_isolation() {
    "$PY" - "$WORK/isolation.json" <<'EOF'
import json, sys
from mleforge.sandbox import make_executor
from mleforge.sandbox.factory import describe_isolation

found = {}
for kind in ("local", "pool"):
    executor = make_executor(kind)
    try:
        found[kind] = describe_isolation(executor)
    except Exception as exc:  # recorded: check.sh falls back to unisolated runs
        found[kind] = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        executor.close()
json.dump(found, open(sys.argv[1], "w"), indent=1)
print(json.dumps(found, indent=1))
sys.exit(0 if "error" not in found["local"] else 3)
EOF
}

copy_run() {
    local f
    for f in metrics.jsonl run.json config.yaml; do
        [[ -f $RUN_DIR/$f ]] && cp "$RUN_DIR/$f" "$OUT/$f"
    done
    if compgen -G "$RUN_DIR/rollouts/step-*.jsonl" >/dev/null; then
        cat "$RUN_DIR"/rollouts/step-*.jsonl >"$OUT/rollouts.jsonl"
    fi
}

say "GPU check: repo $REPO, carry $CARRY, python $PY, device $DEVICE, budget ${BUDGET_S} s, $(nproc) cores"
export PY SITE CARRY WORK
export -f install_wheels probe_isolation # `timeout` runs programs: these through bash -c
phase install bash -c install_wheels
phase env "$PY" benchmarks/gpu/versions.py "$WORK/env.json"
phase model "$PY" benchmarks/gpu/build_model.py "$CARRY" "$MODEL_DIR" --report "$WORK/model.json" "${MODEL_ARGS[@]}"
phase isolation bash -c probe_isolation
if [[ $LAST_RC != 0 && $LAST_RC != skip ]]; then
    say "isolation: bwrap does not run here; training and the benchmark run unisolated (MLEFORGE_ISOLATION=none)"
    export MLEFORGE_ISOLATION=none
    "$PY" - "$WORK/isolation.json" <<'EOF'
import json, sys
path = sys.argv[1]
try:
    data = json.load(open(path))
except (OSError, ValueError):
    data = {}
data["fallback"] = "none: MLEFORGE_ISOLATION=none for the rest of the check"
json.dump(data, open(path, "w"), indent=1)
EOF
fi
phase train "$PY" benchmarks/gpu/train_probe.py "$WORK/probe.json" "${TRAIN_ARGS[@]}"
copy_run
phase sandbox "$PY" benchmarks/sandbox.py "${SANDBOX_ARGS[@]}"
"$PY" benchmarks/gpu/summary.py "$WORK" "$OUT/gpu_check.json"
say "done: $OUT/gpu_check.json"
"$PY" -c 'import json, sys; s = json.load(open(sys.argv[1])); print(json.dumps({k: s[k] for k in ("ok", "phases", "logprob_path")}, indent=1)[:6000]); print(json.dumps(s["train"], indent=1)[:4000])' "$OUT/gpu_check.json"
