#!/usr/bin/env bash
# GPU reproduction: LRURec's cells in priority order within one time budget, each to early stopping, on one GPU;
# then scripts/gpu_check.sh. Results are written as each cell finishes, labelled with the hardware.
#
#   scripts/gpu_repro.sh [--budget SECONDS] [--per-cell SECONDS] [--precision 32-true|bf16-mixed]
#                        [--results DIR] [--runs-dir DIR] [--copy-to DIR] [--cpu-dry-run] [CELL ...]
#
# CELL: shipped configs, run in the order given (default: lru_ml1m sasrec_ml1m lru_beauty sasrec_beauty, then
# Video, Sports, Steam and XLong, LRURec before SASRec). For each cell in turn, while the budget lasts:
#   - its allowance is --per-cell, or by default 1.5 × its estimated H200 time to converge
#     (seqrec.bench.repro.estimate_seconds) + 60 s, never more than what is left of the budget once the
#     reserve of scripts/gpu_check.sh (CHECK_RESERVE_S, 250 s) is set aside; a cell whose allowance would be
#     under MIN_CELL_S (60 s) is not started ("skipped: budget");
#   - one process: `python -m seqrec repro --configs CELL` -> `python -m seqrec fit` with --trainer.accelerator gpu,
#     devices 1, evaluation batches of EVAL_BATCH (4096; XLong 512), --sitting_time (fit's too) = the
#     allowance less OVERHEAD_S (60 s: imports, data, the step-0 validation, the test), killed at the allowance
#     + 60 s; at its time a cell checkpoints at an exact resume point and its best-validation checkpoint so far is
#     tested (exit 75, "time limit"), so a cell stopped by its time is a partial result that resumes, not a lost one;
#   - its result joins results/reproduction.json and results/REPRODUCTION.md (labelled with the GPU's name and
#     the precision) and a row of the "Reproduction cells" section of results/GPU.md, at once.
# Then scripts/gpu_check.sh runs with what is left (its own BUDGET_S) and its report becomes results/GPU.md with
# the cells' section kept. --copy-to DIR copies the three result files there after every cell (a lent machine's
# output folder). Precision: fp32 by default (32-true; TF32 stays off), because a bf16 score keeps 8 significant
# bits and ties count for the target (PROTOCOLS.md §6), so bf16 evaluation would flatter every ranking metric;
# --precision bf16-mixed trains and evaluates under autocast (faster, labelled as such).
#
# Data: the configs' own sources (downloads need network access), or LRURec's files from SEQREC_SHARED_DATA
# (a folder of real copies: lrurec/{ml-1m,beauty,video,sports,steam}.txt.gz, xlong/), as
# `python -m seqrec repro --shared_data` reads them. A cell whose data cannot be had fails in seconds, says why,
# and the next one runs.
#
# Without CUDA the script says so and exits 0. --cpu-dry-run runs every step on the CPU with tiny settings on
# fixture data in the real formats (a few training steps per cell, gpu_check.sh --cpu-dry-run with a 1 s budget)
# and writes its results into a temporary folder (never results/): it checks the script, not the GPU.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DRY=0
BUDGET_S=${BUDGET_S:-780}
PER_CELL=""
PRECISION=32-true
RESULTS=""
RUNS=""
COPY_TO=${GPU_REPRO_COPY_TO:-}
CHECK_RESERVE_S=${CHECK_RESERVE_S:-250}
MIN_CELL_S=${MIN_CELL_S:-60}
OVERHEAD_S=${OVERHEAD_S:-60}
GRACE_S=${GRACE_S:-60}
EVAL_BATCH=${EVAL_BATCH:-4096}
CELLS=()
usage() { echo "usage: scripts/gpu_repro.sh [--budget S] [--per-cell S] [--precision 32-true|bf16-mixed] [--results DIR] [--runs-dir DIR] [--copy-to DIR] [--cpu-dry-run] [CELL ...]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-dry-run) DRY=1 ;;
    --budget) BUDGET_S=${2:?}; shift ;;
    --per-cell) PER_CELL=${2:?}; shift ;;
    --precision) PRECISION=${2:?}; shift ;;
    --results) RESULTS=${2:?}; shift ;;
    --runs-dir) RUNS=${2:?}; shift ;;
    --copy-to) COPY_TO=${2:?}; shift ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) CELLS+=("$1") ;;
  esac
  shift
done
if [ ${#CELLS[@]} -eq 0 ]; then
  CELLS=(lru_ml1m sasrec_ml1m lru_beauty sasrec_beauty lru_video sasrec_video lru_sports sasrec_sports
         lru_steam sasrec_steam lru_xlong sasrec_xlong)
fi
case "$PRECISION" in 32-true|32|bf16-mixed) ;; *) echo "gpu_repro: --precision must be 32-true or bf16-mixed" >&2; exit 2 ;; esac
for n in "$BUDGET_S" "${PER_CELL:-0}"; do
  case "$n" in ''|*[!0-9]*) echo "gpu_repro: --budget and --per-cell take whole seconds, got '$n'" >&2; exit 2 ;; esac
done

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline
for cell in "${CELLS[@]}"; do
  if [ ! -f "seqrec/configs/$cell.yaml" ]; then echo "gpu_repro: no shipped config $cell (seqrec/configs/$cell.yaml)" >&2; exit 2; fi
done
if ! TORCH=$("$PY" -c "import torch, seqrec; print(torch.__version__, int(torch.cuda.is_available()))" 2>/dev/null); then
  echo "gpu_repro: $PY cannot import torch and seqrec; set PYTHON to an interpreter with both (pip install -e .)" >&2
  exit 2
fi
if [ "$DRY" = 0 ] && [ "${TORCH##* }" != 1 ]; then
  echo "gpu_repro: no CUDA GPU is visible to torch ${TORCH% *} on this machine: nothing to run."
  echo "gpu_repro: the CPU path is python -m seqrec repro (hours per cell; results/REPRODUCTION.md lists the estimates);"
  echo "gpu_repro: scripts/gpu_repro.sh --cpu-dry-run exercises this script on CPU."
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_repro.XXXXXX")
if [ -z "$RESULTS" ]; then
  if [ "$DRY" = 1 ]; then RESULTS="$WORK/results"; else RESULTS=results; fi
fi
RUNS=${RUNS:-$WORK/runs}
mkdir -p "$RESULTS" "$RUNS"
REPORT="$RESULTS/REPRODUCTION.md"
GPU_MD="$RESULTS/GPU.md"
: > "$WORK/cells.tsv"
echo "gpu_repro: working in $WORK; results in $RESULTS"

# --- hardware, flags, data ----------------------------------------------------------------------------------
SHARED=""
if [ "$DRY" = 1 ]; then
  export SEQREC_CACHE="$WORK/cache"
  SHARED="$WORK/data"
  "$PY" - "$SHARED" <<'EOF'
import gzip, sys
from pathlib import Path
import numpy as np
root = Path(sys.argv[1])
(root / "lrurec").mkdir(parents=True)
for seed, name in enumerate(["ml-1m", "beauty", "video", "sports", "steam"]):  # SASRec/LRURec "user item" pairs
    rng = np.random.default_rng(seed)
    lines = [f"{u} {(u * 3 + 7 * t + int(rng.integers(3))) % 40 + 1}" for u in range(1, 41) for t in range(12)]
    (root / "lrurec" / f"{name}.txt.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
xlong = root / "xlong"
xlong.mkdir()
for name, rows in (("train_corpus_total_dual.txt", range(0, 20)), ("test_corpus_total_dual.txt", range(20, 40))):
    with open(xlong / name, "w") as out:  # index \t user \t history \t target \t negatives
        for row in rows:
            seq = [500 + (3 * row + 7 * t) % 45 for t in range(31)]
            out.write(f"{row}\t{row}\t{','.join(map(str, seq[:-1]))}\t{seq[-1]}\t501\n")
EOF
  HW_LABEL="CPU dry run of scripts/gpu_repro.sh (not a result)"
  FLAGS=(--trainer.accelerator cpu --trainer.devices 1 --threads 1 --data.init_args.max_len 10
         --trainer.max_steps 4 --trainer.val_check_interval 2 --trainer.limit_val_batches 2 --trainer.limit_test_batches 2
         --data.init_args.eval_batch_size 32 --data.init_args.expected_counts null --trainer.enable_progress_bar false
         --trainer.logger.init_args.loggers '[csv]')
  CHECK_RESERVE_S=0
else
  if [ -n "${SEQREC_SHARED_DATA:-}" ] && [ -d "$SEQREC_SHARED_DATA/lrurec" ]; then SHARED="$SEQREC_SHARED_DATA"; fi
  GPU_NAME=$("$PY" -c "import torch; print(torch.cuda.get_device_name(0))")
  HW_LABEL="1× $GPU_NAME, $PRECISION (scripts/gpu_repro.sh)"
  FLAGS=(--trainer.accelerator gpu --trainer.devices 1 --trainer.enable_progress_bar false
         --trainer.logger.init_args.loggers '[csv]')
  if [ "$PRECISION" = bf16-mixed ]; then FLAGS+=(--trainer.precision bf16-mixed); fi
fi
echo "gpu_repro: hardware: $HW_LABEL; shared data: ${SHARED:-none, each config reads its own source}"

copy_out() {
  if [ -n "$COPY_TO" ]; then
    mkdir -p "$COPY_TO"
    for f in "$REPORT" "$RESULTS/reproduction.json" "$GPU_MD"; do [ -f "$f" ] && cp "$f" "$COPY_TO/"; done
  fi
}
write_cells_section() {  # the "Reproduction cells" section of GPU.md, from cells.tsv and the ledger
  "$PY" - "$WORK/cells.tsv" "$GPU_MD" "$RESULTS/reproduction.json" "$HW_LABEL" "$BUDGET_S" "$DRY" <<'EOF'
import csv, json, sys
from pathlib import Path
from seqrec.bench.report import write_section
rows, gpu_md, ledger, hw, budget, dry = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1"
cells = json.loads(ledger.read_text())["cells"] if ledger.is_file() else {}
lines = [f"`scripts/gpu_repro.sh{' --cpu-dry-run' if dry else ''}` on {hw}; total budget {budget} s. Each cell: one "
         "`python -m seqrec repro` process, the shipped config to early stopping within its allowance, then the test of "
         "the best-validation checkpoint; results/REPRODUCTION.md holds the metrics against the paper.", "",
         "| cell | script status | allowance s | wall s | run status | test Recall@10 | test NDCG@10 | note |",
         "|---|---|---|---|---|---|---|---|"]
for cell, status, allowance, wall, note in csv.reader(open(rows), delimiter="\t"):
    entry = next((e for e in reversed(cells.get(cell, [])) if e.get("hardware") == hw), {})
    metrics = entry.get("metrics", {})
    fmt = lambda v: "" if v is None else f"{v:.5f}"
    lines.append(f"| {cell} | {status} | {allowance} | {wall} | {entry.get('status', '')} | {fmt(metrics.get('recall@10'))} "
                 f"| {fmt(metrics.get('ndcg@10'))} | {note} |")
write_section(gpu_md, "Reproduction cells (scripts/gpu_repro.sh)", "\n".join(lines))
EOF
}

# --- the cells ------------------------------------------------------------------------------------------------
STARTED=$(date +%s)
for cell in "${CELLS[@]}"; do
  elapsed=$(( $(date +%s) - STARTED ))
  left=$(( BUDGET_S - CHECK_RESERVE_S - elapsed ))
  if [ -n "$PER_CELL" ]; then want=$PER_CELL
  elif [ "$DRY" = 1 ]; then want=120
  else want=$("$PY" -c "from seqrec.bench.repro import estimate_seconds; print(int(1.5 * estimate_seconds('$cell', 'h200')) + $OVERHEAD_S)")
  fi
  allowance=$(( want < left ? want : left ))
  if [ "$allowance" -lt "$MIN_CELL_S" ]; then
    printf '%s\tskipped: budget\t0\t0\t%s\n' "$cell" "${left}s of the budget left (${MIN_CELL_S}s needed)" >> "$WORK/cells.tsv"
    echo "gpu_repro: [$cell] skipped: ${left}s of the budget left"
    write_cells_section; copy_out
    continue
  fi
  max_time=$(( allowance - OVERHEAD_S )); [ "$max_time" -lt 30 ] && max_time=30
  cell_flags=("${FLAGS[@]}")
  if [ "$DRY" = 0 ]; then
    case "$cell" in *_xlong) cell_flags+=(--data.init_args.eval_batch_size 512) ;; *) cell_flags+=(--data.init_args.eval_batch_size "$EVAL_BATCH") ;; esac
  fi
  shared_args=()
  [ -n "$SHARED" ] && shared_args=(--shared_data "$SHARED")
  echo "gpu_repro: [$cell] allowance ${allowance}s (training at most ${max_time}s), ${elapsed}s of ${BUDGET_S}s spent"
  begin=$(date +%s)
  timeout $(( allowance + GRACE_S )) "$PY" -m seqrec repro --configs "$cell" --runs_dir "$RUNS" --out "$REPORT" \
    --hardware "$HW_LABEL" --sitting_time "$(printf '00:%02d:%02d:%02d' $(( max_time / 3600 )) $(( max_time % 3600 / 60 )) $(( max_time % 60 )))" \
    "${shared_args[@]}" -- "${cell_flags[@]}" > "$WORK/$cell.log" 2>&1
  rc=$?
  wall=$(( $(date +%s) - begin ))
  status=ok; note=""
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=killed; note="over ${allowance}s + ${GRACE_S}s: no test of this sitting"
  elif [ $rc -eq 75 ]; then status="time limit"; note="partial: resume with --resume"
  elif [ $rc -ne 0 ]; then status=failed; note=$(grep -E "^error|Error" "$WORK/$cell.log" | tail -1 | cut -c1-200 | tr '\t|' '  '); fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$cell" "$status" "$allowance" "$wall" "$note" >> "$WORK/cells.tsv"
  echo "gpu_repro: [$cell] $status (${wall}s)${note:+: $note}"
  write_cells_section; copy_out
done

# --- then the GPU check ---------------------------------------------------------------------------------------
elapsed=$(( $(date +%s) - STARTED ))
check_budget=$(( BUDGET_S - elapsed - 100 ))
if [ "$DRY" = 1 ]; then check_budget=1; fi
if [ "$check_budget" -gt 0 ]; then
  echo "gpu_repro: scripts/gpu_check.sh with BUDGET_S=$check_budget"
  check_args=(); [ "$DRY" = 1 ] && check_args=(--cpu-dry-run)
  # the same data folder (the dry run's holds a tiny ML-1M-format fixture, so gpu_check's dry run stays short)
  SEQREC_SHARED_DATA=${SHARED:-${SEQREC_SHARED_DATA:-}} BUDGET_S=$check_budget GPU_CHECK_OUT="$WORK/gpu_check.md" \
    PYTHON="$PY" bash scripts/gpu_check.sh "${check_args[@]}" > "$WORK/gpu_check.log" 2>&1
  echo "gpu_repro: gpu_check.sh exit $? (log $WORK/gpu_check.log)"
  if [ -f "$WORK/gpu_check.md" ]; then cp "$WORK/gpu_check.md" "$GPU_MD"; fi
else
  echo "gpu_repro: no budget left for scripts/gpu_check.sh"
fi
write_cells_section; copy_out
echo "gpu_repro: wrote $REPORT, $RESULTS/reproduction.json and $GPU_MD in $(( $(date +%s) - STARTED ))s (logs in $WORK)"
grep -E "^\| (cell|[a-z]+_[a-z0-9]+) \|" "$GPU_MD" | head -20
