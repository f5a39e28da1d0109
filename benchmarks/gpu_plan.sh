#!/usr/bin/env bash
# The GPU measurements issue 23 still needs (step 6, issue 25's verdict, ran in session 22), one step per device call
# (each well under its 10 minutes).
#
# Once, on your own machine, from the project root:  bash ../shared/gpu/prepare.sh .venv/bin/python
# Then one device call per step, carrying .gpu:       bash benchmarks/gpu_plan.sh 1     (then 2, 3, ...)
# Each step writes $OUT/step<N>.txt (and the studies' SQLite file, $OUT/studies.db, which comes back).
# The steps and what each decides: benchmarks/RESULTS.md, "What remains to measure on a GPU".
#
# A dry run on the CPU (no kit): SKIP_SETUP=1 PY=.venv/bin/python SST2_DIR=../shared/data/sst2 DEVICE=cpu MODEL=tiny-bert \
#   CHECK_MODEL=tiny-bert BERT=tiny-random ROWS=400 GPU_ROWS=400 OUT=/tmp/plan bash benchmarks/gpu_plan.sh 6
# (ROWS: the studies' training rows; GPU_ROWS: the benchmarks.gpu steps' rows, 4000 or 6000 on the GPU.
#  Session 30 ran u, c, 5c and 5e so on the CPU: each finished; the captured rows say "CUDA only".)
set -uo pipefail
step=${1:?"which step: 1, 1b, 1c, u, c, 2 to 5, 5e, 5c, 6 to 8 (benchmarks/RESULTS.md lists them)"}
DEVICE=${DEVICE:-cuda}
MODEL=${MODEL:-/tmp/minilm}        # all-MiniLM-L6-v2 in fp32, made by .gpu/setup.sh
BERT=${BERT:-/tmp/bert-base}       # BERT-base, random init, made by .gpu/setup.sh
CHECK_MODEL=${CHECK_MODEL:-bert-base-random}  # steps u and c: hpo check's random-init model (a dry run: tiny-bert)
SST2=${SST2_DIR:-.gpu/sst2}
ROWS=${ROWS:-8000}
WHOLE_STEP=${WHOLE_STEP:-ours-compile-step}  # steps 7-8: ours-capture-step if steps c and 2 say so
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ -z "${SKIP_SETUP:-}" ]; then . .gpu/setup.sh || exit 1; fi
PY=${PY:-python3}
log="$OUT/step$step.txt"

# ROWS training rows sampled with a fixed seed, written unchanged (csv module, tabs, no quoting).
subset() {
  "$PY" - "$SST2/train.tsv" "$OUT/train_$ROWS.tsv" "$ROWS" <<'PY'
import csv, random, sys
source, target, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(source, newline="") as f:
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    header, *body = list(reader)
with open(target, "w", newline="") as f:
    writer = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(random.Random(0).sample(body, rows))
PY
}

data_flags() {
  echo --data "$OUT/train_$ROWS.tsv" --text-column sentence --label-column label --valid-data "$SST2/dev.tsv" \
       --device "$DEVICE" --storage "sqlite:///$OUT/studies.db" --artifact-store /tmp/hpo-artifacts
}

gpu() { "$PY" -m benchmarks.gpu --device "$DEVICE" --model "$BERT" --data-dir "$SST2" "$@"; }

{
  echo "step $step on $("$PY" -c 'import torch; print(torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu", torch.__version__)')"
  case $step in
    1)  # Does the CUDA path run, and what do master weights buy per step (eager)? Step 1b: the compiled step.
        for knob in "--compile-step off" "--compile-step off --master-weights on"; do
          echo "== hpo check --device $DEVICE $knob"
          # shellcheck disable=SC2086
          "$PY" -m hpo check --device "$DEVICE" $knob
        done ;;
    1b|1c) # The compiled step at batch 32 (1b) or 256 (1c): a compile per precision and batch, so one
        # batch a call. faulthandler: a crash inside torch (session 22: a segfault) shows its stack.
        batch=32; [ "$step" = 1c ] && batch=256
        echo "== hpo check --device $DEVICE --compile-step on --batch-size $batch"
        "$PY" -X faulthandler -m hpo check --device "$DEVICE" --compile-step on --batch-size "$batch"
        echo "exit status $?" ;;
    u)  # What the update costs the host: compiled (today's CUDA update), eager fused, captured, compiled with graphs.
        "$PY" -m benchmarks.update_host --device "$DEVICE" --model "$CHECK_MODEL" ;;
    c)  # The captured step (capture_step: the whole step as one CUDA graph by hand), against the eager and compiled
        # steps: speed at 32 x 128 and at 32 x 32 (short rows: where the host sets the pace), then the losses without
        # dropout (must agree).
        sc() { "$PY" -m benchmarks.step_capture --device "$DEVICE" --model "$CHECK_MODEL" "$@"; }
        sc --batch-size 32 --seq-len 128 --precisions fp32,bf16 --variants eager,captured
        sc --batch-size 32 --seq-len 32 --precisions bf16 --variants eager,compiled,captured
        sc --batch-size 32 --seq-len 128 --precisions bf16 --variants eager,captured --no-dropout --steps 20 ;;
    2)  # SST-2 rows at batch 32: the cells that miss today.
        gpu --rows "${GPU_ROWS:-4000}" --kinds sst2 --batches 32 --precisions fp32,bf16 \
            --tools ours,ours-compile-step,ours-capture-step,ours-master-weights,hf,plain,plain-compiled ;;
    3)  # 128-token rows at batch 256 (target: bf16 >= 5x our fp32).
        gpu --rows "${GPU_ROWS:-6000}" --kinds long --batches 256 --precisions fp32,bf16 --tools ours,ours-compile-step,ours-capture-step,ours-master-weights,hf,plain ;;
    4)  # The other knobs on and off.
        gpu --rows "${GPU_ROWS:-4000}" --kinds sst2,long --batches 64 --precisions bf16 \
            --tools ours,ours-torch-compile,ours-varlen,ours-compile-step,ours-capture-step,ours-master-weights ;;
    5)  # Issue 23's study: 10 MiniLM trials, the whole step compiled; then its report (matched bf16 speedup,
        # host-limited flags, memory not released).
        subset
        # shellcheck disable=SC2046
        "$PY" -m hpo run --space benchmarks/spaces/minilm_cuda.yaml --model "$MODEL" $(data_flags) \
            --study-name minilm-cuda --n-trials 10 --quiet
        "$PY" -m hpo report --study-name minilm-cuda --storage "sqlite:///$OUT/studies.db" --out "$OUT/report-minilm-cuda" ;;
    5e|5c) # Step 5's study with the step eager (5e: compile_step false) or captured (5c: capture_step true, no compiler).
        subset
        way=eager; knob="compile_step: false"
        [ "$step" = 5c ] && { way=captured; knob="capture_step: true"; }
        sed "s/^  compile_step: true\$/  $knob/" benchmarks/spaces/minilm_cuda.yaml > "$OUT/minilm_cuda_$way.yaml"
        grep -q "^  $knob\$" "$OUT/minilm_cuda_$way.yaml" || { echo "no compile_step: true to replace" >&2; exit 2; }
        # shellcheck disable=SC2046
        "$PY" -m hpo run --space "$OUT/minilm_cuda_$way.yaml" --model "$MODEL" $(data_flags) \
            --study-name "minilm-cuda-$way" --n-trials 10 --quiet
        "$PY" -m hpo report --study-name "minilm-cuda-$way" --storage "sqlite:///$OUT/studies.db" --out "$OUT/report-minilm-cuda-$way" ;;
    6)  # Issue 25's GPU verdict: a short study over every precision, then 3 paired seeds per precision.
        subset
        # shellcheck disable=SC2046
        "$PY" -m hpo run --space benchmarks/spaces/minilm_verdict.yaml --model "$MODEL" $(data_flags) \
            --study-name minilm-verdict --n-trials 4 --quiet
        # shellcheck disable=SC2046
        "$PY" -m hpo verdict $(data_flags) --study-name minilm-verdict --seeds 3 --out "$OUT/verdict" ;;
    7)  # The full matrix, first half (fp32, tf32); step 8 the second (fp16, bf16). WHOLE_STEP: the whole step that won
        # steps c and 2 (ours-compile-step or ours-capture-step).
        gpu --rows "${GPU_ROWS:-4000}" --kinds sst2,long --batches 32,64,256 --precisions fp32,tf32 --tools "$WHOLE_STEP,hf,plain,plain-compiled" ;;
    8)  gpu --rows "${GPU_ROWS:-4000}" --kinds sst2,long --batches 32,64,256 --precisions fp16,bf16 --tools "$WHOLE_STEP,hf,plain,plain-compiled" ;;
    *)  echo "unknown step $step: 1, 1b, 1c, u, c, 2 to 5, 5e, 5c, 6 to 8" >&2; exit 2 ;;
  esac
} 2>&1 | tee "$log"
