#!/usr/bin/env bash
# scripts/gpu_check.sh OUTDIR: the checks that need a real GPU, in one run of under 5 minutes on a
# machine with one H200 and no network. Each part is time-boxed and logs to OUTDIR:
#   1. build for sm_90a only: the trainer (make) and the dev/cuda kernel harnesses
#   2. GPT-2 124M (12 layers, 12 heads, 768 wide, vocab 50257, seq 1024) trained in bf16 on
#      random tokens for ~30 steps: ms/step, tokens/s and MFU, averaged over the steps after the
#      first few (warmup)
#   3. the test suite natively (scripts/run_tests.py --native, plus --gpt when PyTorch is
#      installed: the trainer-vs-PyTorch checks need torch for reference.py and
#      check_reference.py; without it they are skipped and the summary says so)
#   4. every dev/cuda harness: full-size correctness checks (bf16 and fp32 builds) and the
#      benchmarks (bf16 build)
# OUTDIR/summary.txt gets the results and the table printed at the end; raw logs sit next to it.
# Environment: CUDA_HOME (default /usr/local/cuda), TRAIN_BATCH (sequences per step, default 8),
# TRAIN_STEPS (default 30), DEADLINE_S (whole-run budget in seconds, default 290).
# Exit status 0 only when every part ran and passed.
set -uo pipefail

if [ $# -ne 1 ] || [ "$1" = "--help" ]; then
    echo "usage: $0 OUTDIR   (runs the GPU checks, writes OUTDIR/summary.txt and raw logs)" >&2
    exit 2
fi
mkdir -p "$1" || exit 1
OUT=$(cd "$1" && pwd)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export PATH="$CUDA_HOME/bin:$PATH"
GPU_ARCH="-gencode arch=compute_90a,code=sm_90a"
TRAIN_BATCH=${TRAIN_BATCH:-8}
TRAIN_STEPS=${TRAIN_STEPS:-30}
DEADLINE_S=${DEADLINE_S:-290}
HARNESSES="layernorm_forward layernorm_backward attention_forward attention_backward fused_classifier adamw"
SUMMARY="$OUT/summary.txt"
START=$(date +%s)
: >"$SUMMARY"
TABLE=()  # rows of the final table: "part|status|seconds|detail"

log() { echo "$*" | tee -a "$SUMMARY"; }
row() { TABLE+=("$1|$2|$3|$4"); }

# Seconds left of the whole-run budget, at most $1 (a part's own box).
budget() {
    local left=$((DEADLINE_S - ($(date +%s) - START)))
    if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# run NAME BOX LOGFILE CMD...: runs CMD with stdout+stderr to LOGFILE, killed after
# min(BOX, time left) seconds. Sets RC (124: timed out, 125: no time left) and SECS.
run() {
    local name=$1 box=$2 logfile=$3
    shift 3
    local limit
    limit=$(budget "$box")
    local t0
    t0=$(date +%s)
    if [ "$limit" -le 5 ]; then
        echo "[$name skipped: the ${DEADLINE_S} s budget is spent]" >"$logfile"
        RC=125
    else
        timeout --kill-after=10 "$limit" "$@" >"$logfile" 2>&1
        RC=$?
        [ "$RC" -eq 124 ] && echo "[$name timed out after $limit s]" >>"$logfile"
    fi
    SECS=$(($(date +%s) - t0))
}

status_of() {  # status word for an exit code
    case "$1" in
        0) echo ok ;;
        124) echo TIMEOUT ;;
        125) echo SKIPPED ;;
        *) echo "FAIL($1)" ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# 0. The machine.
log "gpu_check.sh $(date -u +%Y-%m-%dT%H:%M:%SZ) in $ROOT"
{
    nvidia-smi 2>&1
    nvcc --version 2>&1
    git -C "$ROOT" log -1 --oneline 2>&1
    git -C "$ROOT" status --short 2>&1
} >"$OUT/environment.log"
log "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -n 1)"
log "nvcc: $(nvcc --version 2>&1 | grep -o 'release [0-9.]*' || echo 'not found')"

# ---------------------------------------------------------------------------------------------
# 1. Build, sm_90a only; without NCCL or MPI headers the trainer builds single-GPU.
MULTI=()
nccl_h=""
for d in "$CUDA_HOME/include" /usr/include; do [ -f "$d/nccl.h" ] && nccl_h="$d/nccl.h"; done
mpi_h=""
if command -v mpicxx >/dev/null 2>&1; then
    for d in $(mpicxx --showme:incdirs 2>/dev/null) /usr/include; do [ -f "$d/mpi.h" ] && mpi_h="$d/mpi.h"; done
fi
if [ -z "$nccl_h" ] || [ -z "$mpi_h" ]; then
    MULTI=(NO_MULTI_GPU=1)
    log "build: single-GPU (NO_MULTI_GPU=1): nccl.h ${nccl_h:-missing}, mpi.h ${mpi_h:-missing}"
fi
# The trainer's four binaries and the twelve harnesses build side by side on the 16 cores.
(
    run "build trainer" 180 "$OUT/build_trainer.log" make -j16 GPU_ARCH="$GPU_ARCH" ${MULTI[@]+"${MULTI[@]}"} all
    exit "$RC"
) &
pid_trainer=$!
run "build dev/cuda" 180 "$OUT/build_dev_cuda.log" make -j16 -C dev/cuda GPU_ARCH="$GPU_ARCH" all
RC_DEVCUDA=$RC
wait "$pid_trainer"
RC_TRAINER=$?
# (the background subshell's RC reaches this shell only as its exit status)
SECS=$(($(date +%s) - START))
row "build trainer" "$(status_of "$RC_TRAINER")" "$SECS" "make all $GPU_ARCH${MULTI[*]+ ${MULTI[*]}}"
row "build dev/cuda" "$(status_of "$RC_DEVCUDA")" "$SECS" "make -C dev/cuda"
log "build: trainer $(status_of "$RC_TRAINER"), dev/cuda $(status_of "$RC_DEVCUDA") ($SECS s; logs build_*.log)"

# ---------------------------------------------------------------------------------------------
# 2. GPT-2 124M in bf16 on random tokens (before the suite, so the deadline cannot starve it).
TRAIN_ARGS=(--vocab 50257 --layers 12 --heads 12 --embd 768 --seq 1024 --batch "$TRAIN_BATCH"
            --steps "$TRAIN_STEPS" --warmup 10 --lr 6e-4 --peak-flops 989e12)
train_detail=""
if [ "$RC_TRAINER" -ne 0 ] || [ ! -x ./train_gpt ]; then
    row "train GPT-2 124M" SKIPPED 0 "./train_gpt was not built"
else
    # flags may change as the trainer grows: name any flag this script uses that --help lacks
    ./train_gpt --help >"$OUT/train_help.log" 2>&1
    missing=""
    for f in "${TRAIN_ARGS[@]}"; do
        case "$f" in --*) grep -q -- "$f" "$OUT/train_help.log" || missing="$missing $f" ;; esac
    done
    if [ -n "$missing" ]; then
        row "train GPT-2 124M" SKIPPED 0 "./train_gpt --help lacks:$missing"
        log "train: SKIPPED: ./train_gpt --help lacks:$missing (see train_help.log)"
    else
        run "train" 150 "$OUT/train.log" ./train_gpt "${TRAIN_ARGS[@]}"
        # step lines: "step N/M | loss L | lr ... | norm ... | X ms | Y tok/s | MFU Z%"; skip 3 warmup steps
        train_detail=$(awk -F'|' '/^step/ {
                n++; loss = $2; sub(/ *loss */, "", loss); sub(/ *$/, "", loss)
                if (n <= 3) next
                ms = $5; sub(/ *ms */, "", ms); tok = $6; sub(/ *tok\/s */, "", tok)
                mfu = $7; sub(/ *MFU */, "", mfu); sub(/%.*/, "", mfu)
                k++; sms += ms; stok += tok; smfu += mfu
            } END {
                if (k == 0) { printf "no timed steps (%d step lines)", n; exit }
                printf "%d steps, %.1f ms/step, %.0f tok/s, MFU %.1f%% (mean of steps 4-%d), last loss %s",
                       n, sms / k, stok / k, smfu / k, n, loss
            }' "$OUT/train.log")
        if [ "$RC" -eq 0 ] && grep -qiE 'loss (nan|-?inf)' "$OUT/train.log"; then RC=1; train_detail="non-finite loss; $train_detail"; fi
        row "train GPT-2 124M" "$(status_of "$RC")" "$SECS" "B $TRAIN_BATCH T 1024 bf16: $train_detail"
        log "train: $(status_of "$RC"): ./train_gpt ${TRAIN_ARGS[*]}"
        log "  $train_detail (log train.log)"
    fi
fi

# ---------------------------------------------------------------------------------------------
# 3. The test suite, natively.
GPT_FLAG=()
if python3 -c "import torch" >/dev/null 2>&1; then
    GPT_FLAG=(--gpt)
    gpt_note="with --gpt"
else
    gpt_note="WITHOUT --gpt: PyTorch is not installed here, so the trainer-vs-PyTorch checks were skipped"
fi
if [ "$RC_TRAINER" -eq 0 ]; then
    run "tests" 120 "$OUT/tests.log" python3 scripts/run_tests.py --native -j 16 ${GPT_FLAG[@]+"${GPT_FLAG[@]}"}
    tally=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$OUT/tests.log" | tail -n 1)
    row "tests --native" "$(status_of "$RC")" "$SECS" "${tally:-no tally} ($gpt_note)"
    log "tests: $(status_of "$RC"): ${tally:-no tally line} ($gpt_note; log tests.log)"
    grep -E '^FAIL' "$OUT/tests.log" | tee -a "$SUMMARY"
else
    row "tests --native" SKIPPED 0 "the trainer did not build"
    log "tests: SKIPPED (the trainer did not build)"
fi

# ---------------------------------------------------------------------------------------------
# 4. Kernel harnesses: full checks in both precisions, benchmarks in bf16.
BENCH_LINES=()
for h in $HARNESSES; do
    for build in "" _fp32; do
        bin="build/dev-cuda/$h$build"
        name="$h$build"
        if [ ! -x "$bin" ]; then
            row "$name" SKIPPED 0 "not built"
            continue
        fi
        args=()
        box=30
        if [ -z "$build" ]; then args=(--bench); box=60; fi
        run "$name" "$box" "$OUT/dev_cuda_$name.log" "$bin" ${args[@]+"${args[@]}"}
        verdict=$(grep -E "^$h: " "$OUT/dev_cuda_$name.log" | tail -n 1)
        [ "$RC" -eq 125 ] && verdict="the ${DEADLINE_S} s budget was spent"
        row "$name" "$(status_of "$RC")" "$SECS" "${verdict:-no verdict line}"
        [ "$RC" -ne 0 ] && grep -E 'FAIL' "$OUT/dev_cuda_$name.log" | head -n 5 | tee -a "$SUMMARY"
        while IFS= read -r line; do BENCH_LINES+=("$line"); done < <(grep -E '^bench ' "$OUT/dev_cuda_$name.log")
    done
done
log ""
log "kernel benchmarks (bf16 build; logs dev_cuda_*.log):"
for line in ${BENCH_LINES[@]+"${BENCH_LINES[@]}"}; do log "  $line"; done

# ---------------------------------------------------------------------------------------------
# The table, last.
log ""
log "total $(($(date +%s) - START)) s"
{
    printf '%-24s %-9s %6s  %s\n' part status seconds detail
    for r in "${TABLE[@]}"; do
        IFS='|' read -r part status secs detail <<<"$r"
        printf '%-24s %-9s %6s  %s\n' "$part" "$status" "$secs" "$detail"
    done
} | tee -a "$SUMMARY"
# success only when every part ran and passed
for r in "${TABLE[@]}"; do
    case "$r" in *"|ok|"*) ;; *) exit 1 ;; esac
done
exit 0
