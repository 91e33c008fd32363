#!/usr/bin/env bash
# What issue 32 leaves to measure on a GPU, in one call of under 10 minutes (one H100 80GB).
#
# Steps, most needed first; a step starts only if its estimate (H100 minutes: a BERT-Base
# compile 30-50 s, BERT-Large 75 s, torch.compile 30-85 s) fits in what is left of --budget,
# and every step runs under the time that is left. JAX's persistent compilation cache is on,
# so gpu_step.py's second compile of a step (to name its attention) is a cache hit. What did
# not fit is printed at the end: run it in the next call with --only.
#   dropout_check    bench/gpu/cudnn_dropout_check.py: does cuDNN's attention dropout draw a new
#                    mask each step, row, head and layer, the backward the forward's?
#   cudnn_tests      tests/test_attention_kernels.py on the GPU: cuDNN lengths and segments
#                    (3 slots, packed rows) against the reference (needs pytest there)
#   base             gpu_step.py base bf16 128x128 and 32x512, dropout 0, --check (the auto
#                    kernels: cuDNN per-row lengths), torch eager beside it
#   kernels          gpu_kernels.py base bf16 32x512: the kernel table of the default step
#   dropout          gpu_step.py base bf16 32x512, attention dropout 0.1 on both sides
#                    (bert-jax's reference path), --check
#   dropout_fused    the same with --fused-attention-dropout (cuDNN's own dropout)
#   packed           gpu_packing.py base bf16 32 x 512: packed (3 a row; auto = XLA's
#                    attention, and cuDNN segments) against unpacked rows, real tokens/s
#   large            gpu_step.py large bf16 32x512, dropout 0, --check
#   joined           base and large bf16 32x512 with the query, key and value projections as
#                    one product (precision.projections=joined, opt-in): set beside base's and
#                    large's (apart, the default), torch eager the yardstick in both (issue 50:
#                    joined, BERT-Large's census has 385 fewer kernels but 1.5 GB more bytes)
#   band_tests       tests/test_band_kernel.py on the GPU: the Pallas band kernel compiled by
#                    Triton, against full attention
#   band             gpu_band_attention.py: a ModernBERT sliding layer's core at 16 x 1,024
#                    and 2 x 8,192, full T x T, XLA's bands and the band kernel, checked
#                    against each other and timed (issue 50)
#   compiled         gpu_step.py base bf16 128x128 and 32x512 with torch.compile
# Each step's log is OUT_DIR/NAME.log; gpu_step's tables also go to NAME.md and NAME.json.
#
# Usage: bash bench/gpu/gpu_session.sh [--out DIR] [--budget 540] [--only a,b] [--list]
#        bash bench/gpu/gpu_session.sh --smoke   # on a CPU: every step on BERT-tiny (minutes)
# On the lent H100 (the device tool; $OUT comes back): bash bench/gpu/gpu_session.sh --out "$OUT"
# The GPU image lacks ml_collections: download its wheel into gpu_wheels/ here first
#   pip download --no-deps --only-binary=:all: --python-version 3.12 -d gpu_wheels ml_collections==1.1.0
# and the script installs it there (pip --no-index --target).
set -uo pipefail
cd "$(dirname "$0")/../.."

OUT_DIR="${OUT:-bench/out/gpu_session}"
BUDGET=540
ONLY=""
SMOKE=""
LIST=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT_DIR="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    --list) LIST=1; shift ;;
    *) echo "gpu_session.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

PYTHON="${PYTHON:-python3}"
# Every script, and tests/conftest.py (whose default is the CPU), on the GPU; --smoke: CPU.
export JAX_PLATFORMS="${JAX_PLATFORMS:-$([ -n "$SMOKE" ] && echo cpu || echo cuda)}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false TQDM_DISABLE=1
export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-/tmp/bert-jax-xla}"
export JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=1
STEP_ARGS="--rounds 3 --steps 10 --compile none"
if [ -n "$SMOKE" ]; then
  PYTHON="${PYTHON_SMOKE:-$PYTHON}"
  BUDGET=100000
  STEP_ARGS="--smoke"
fi

# name, estimate in seconds (H100), command
STEPS=(
  "dropout_check|60|bench/gpu/cudnn_dropout_check.py ${SMOKE:+--smoke}"
  "cudnn_tests|40|-m pytest -q -p no:cacheprovider tests/test_attention_kernels.py -k on_a_gpu"
  "base|150|bench/gpu/gpu_step.py --presets base --configs bf16:128x128,bf16:32x512 $STEP_ARGS --check"
  "kernels|70|bench/gpu/gpu_kernels.py --preset base --config bf16:32x512 ${SMOKE:+--smoke}"
  "dropout|90|bench/gpu/gpu_step.py --presets base --configs bf16:32x512 --attention-dropout 0.1 $STEP_ARGS --check"
  "dropout_fused|90|bench/gpu/gpu_step.py --presets base --configs bf16:32x512 --attention-dropout 0.1 --fused-attention-dropout $STEP_ARGS --check"
  "packed|180|bench/gpu/gpu_packing.py ${SMOKE:+--smoke}"
  "large|150|bench/gpu/gpu_step.py --presets large --configs bf16:32x512 $STEP_ARGS --check"
  "joined|240|bench/gpu/gpu_step.py --presets base,large --configs bf16:32x512 --projections joined $STEP_ARGS"
  "band_tests|40|-m pytest -q -p no:cacheprovider tests/test_band_kernel.py"
  "band|110|bench/gpu/gpu_band_attention.py ${SMOKE:+--smoke}"
  "compiled|300|bench/gpu/gpu_step.py --presets base --configs bf16:128x128,bf16:32x512 ${STEP_ARGS/--compile none/--compile all} --check"
)

if [ -n "$LIST" ]; then
  total=0
  for step in "${STEPS[@]}"; do
    IFS='|' read -r name estimate command <<< "$step"
    total=$((total + estimate))
    printf '%-22s ~%4s s  %s %s\n' "$name" "$estimate" "$PYTHON" "$command"
  done
  echo "all steps: ~$total s; budget $BUDGET s"
  exit 0
fi

mkdir -p "$OUT_DIR"
if ! "$PYTHON" -c "import ml_collections" 2>/dev/null && ls gpu_wheels/*.whl >/dev/null 2>&1; then
  "$PYTHON" -m pip install -q --no-index --target /tmp/bert-jax-deps gpu_wheels/*.whl
  export PYTHONPATH="/tmp/bert-jax-deps${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null | tee "$OUT_DIR/card.txt"
date -u | tee -a "$OUT_DIR/card.txt"

start=$(date +%s)
skipped=()
failed=()
for step in "${STEPS[@]}"; do
  IFS='|' read -r name estimate command <<< "$step"
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then continue; fi
  left=$((BUDGET - ($(date +%s) - start)))
  if [ "$left" -lt "$estimate" ]; then
    skipped+=("$name")
    continue
  fi
  echo "=== $name (~$estimate s; $left s left): $PYTHON $command"
  outputs=""
  if [[ "$command" == bench/gpu/gpu_step.py* ]]; then
    outputs="--markdown-out $OUT_DIR/$name.md --json-out $OUT_DIR/$name.json"
  fi
  # shellcheck disable=SC2086  # the command's words are meant to split
  timeout "$left" "$PYTHON" $command $outputs > "$OUT_DIR/$name.log" 2>&1
  status=$?
  grep -v "^WARNING\|^E0000\|warnings.warn\|Online softmax\|split the reduction\|important use case\|softmax\.$" \
    "$OUT_DIR/$name.log" | tail -n 25
  if [ "$status" -ne 0 ]; then
    failed+=("$name (exit $status)")
  fi
done

echo "=== done in $(($(date +%s) - start)) s"
[ ${#failed[@]} -eq 0 ] || echo "failed or checks not met: ${failed[*]}"
[ ${#skipped[@]} -eq 0 ] || echo "not run (no time left): --only $(IFS=,; echo "${skipped[*]}")"
if [ -n "$SMOKE" ]; then
  echo "smoke: every step ran on the CPU; its timings and --check verdicts mean nothing"
  exit 0
fi
[ ${#failed[@]} -eq 0 ]
