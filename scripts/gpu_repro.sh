#!/usr/bin/env bash
# GPU reproduction: LRURec's cells in priority order within one time budget, each to early stopping, on one GPU;
# then scripts/gpu_check.sh. Results are written as each cell finishes, labelled with the hardware.
#
#   scripts/gpu_repro.sh [--budget SECONDS] [--per_cell SECONDS] [--precision 32-true|bf16-mixed]
#                        [--results DIR] [--runs_dir DIR] [--copy_to DIR] [--parallel N] [--mps] [--no_check]
#                        [--plan FILE] [--resume] [--cpu_dry_run] [CELL ...]
#
# CELL: shipped configs, run in the order given (default: lru_ml1m sasrec_ml1m lru_beauty sasrec_beauty, then
# Video, Sports, Steam and XLong, LRURec before SASRec). --plan FILE adds cells from a file, one per line:
# `CONFIG[@VARIANT] [FLAGS...]` (`#` starts a comment), where a variant (`sasrec_ml1m@dropout_04
# --model.net.dropout 0.4`, `lru_ml1m@seed_43 --seed_everything 43`) is `python -m seqrec repro --variant`'s own
# cell with the flags after --. For each cell in turn, while the budget lasts:
#   - its allowance is --per_cell, or by default 1.5 × its estimated H200 time to converge
#     (seqrec.bench.repro.estimate_seconds) + 60 s, never more than what is left of the budget once the
#     reserve of scripts/gpu_check.sh (CHECK_RESERVE_S, 250 s) is set aside; a cell whose allowance would be
#     under MIN_CELL_S (60 s) is not started ("skipped: budget");
#   - one process: `python -m seqrec repro --configs CELL` -> `python -m seqrec fit` with --trainer.accelerator gpu,
#     devices 1, evaluation batches of EVAL_BATCH (4096; XLong 512), --sitting_time (fit's too) = the
#     allowance less OVERHEAD_S (60 s: imports, data, the step-0 validation, the test), sent SIGTERM at the
#     allowance + GRACE_S (60 s; repro passes it to the fit, which stops at its next resume point) and SIGKILL
#     GRACE_S later; at its time a cell checkpoints at an exact resume point and its best-validation checkpoint so far is
#     tested (exit 75, "time limit"), so a cell stopped by its time is a partial result that resumes, not a lost one;
#   - its result joins results/reproduction.json and results/REPRODUCTION.md (labelled with the GPU's name and
#     the precision) and a row of the "Reproduction cells" section of results/GPU.md, at once. Each process writes
#     its own ledger (a copy of results/reproduction.json in the working folder) and the script adopts its entry
#     into results/ when it ends, so cells run side by side never rewrite one file at once.
# --parallel N runs up to N cells at once on the one GPU (each with --threads cores/N); these models leave the
# GPU idle between small kernels, so N cells take about the time of one. --mps starts NVIDIA's Multi-Process
# Service first (kernels of the N processes then share the GPU instead of taking turns), checked with one CUDA
# allocation and left off, with a message, where it does not start. The hardware label says "N cells sharing
# it", since a cell's wall time is then not one GPU's own.
# --resume continues each cell's last run in --runs_dir (`seqrec repro --resume true`), e.g. a second call on a lent
# machine that is still warm, whose runs folder outlived the first call; the ledger counts the sittings and their time
# where the hardware label is the same (give the same --parallel and --mps, which the label names).
# Then scripts/gpu_check.sh runs with what is left (its own BUDGET_S; --no_check: not at all) and its report
# becomes results/GPU.md with the cells' section kept. --copy_to DIR copies the result files there after every
# cell (a lent machine's output folder), with runs.tgz (every run directory less its checkpoints and wandb
# folders, and the cells' logs). Precision: fp32 by default (32-true; TF32 stays off), because a bf16 score keeps 8 significant
# bits and ties count for the target (PROTOCOLS.md §6), so bf16 evaluation would flatter every ranking metric;
# --precision bf16-mixed trains and evaluates under autocast (faster, labelled as such).
#
# Data: the configs' own sources (downloads need network access), or LRURec's files from SEQREC_SHARED_DATA
# (a folder of real copies: lrurec/{ml-1m,beauty,video,sports,steam}.txt.gz, xlong/), as
# `python -m seqrec repro --shared_data` reads them. A cell whose data cannot be had fails in seconds, says why,
# and the next one runs.
#
# Without CUDA the script says so and exits 0. --cpu_dry_run runs every step on the CPU with tiny settings on
# fixture data in the real formats (a few training steps per cell, gpu_check.sh --cpu_dry_run with a 1 s budget)
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
PARALLEL=1
MPS=0
CHECK=1
PLAN=""
RESUME=false
CELLS=()
usage() { echo "usage: scripts/gpu_repro.sh [--budget S] [--per_cell S] [--precision 32-true|bf16-mixed] [--results DIR] [--runs_dir DIR] [--copy_to DIR] [--parallel N] [--mps] [--no_check] [--plan FILE] [--resume] [--cpu_dry_run] [CELL ...]" >&2; exit 2; }
while [ $# -gt 0 ]; do
  flag=$1
  case "$flag" in --cpu-dry-run|--per-cell|--runs-dir|--copy-to|--no-check)  # old spellings: one note line, as seqrec's
    old=${flag#--}; flag="--${old//-/_}"; echo "note: $1 is now $flag" >&2 ;;
  esac
  case "$flag" in
    --cpu_dry_run) DRY=1 ;;
    --budget) BUDGET_S=${2:?}; shift ;;
    --per_cell) PER_CELL=${2:?}; shift ;;
    --precision) PRECISION=${2:?}; shift ;;
    --results) RESULTS=${2:?}; shift ;;
    --runs_dir) RUNS=${2:?}; shift ;;
    --copy_to) COPY_TO=${2:?}; shift ;;
    --parallel) PARALLEL=${2:?}; shift ;;
    --mps) MPS=1 ;;
    --no_check) CHECK=0 ;;
    --plan) PLAN=${2:?}; shift ;;
    --resume) RESUME=true ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) CELLS+=("$1") ;;
  esac
  shift
done
declare -A CELL_FLAGS=()  # a plan's flags per cell, after repro's --
for cell in "${CELLS[@]}"; do CELL_FLAGS[$cell]=""; done
if [ -n "$PLAN" ]; then
  if [ ! -f "$PLAN" ]; then echo "gpu_repro: --plan $PLAN: no such file" >&2; exit 2; fi
  while read -r cell rest || [ -n "$cell" ]; do
    cell=${cell%%#*}
    [ -z "$cell" ] && continue
    if [ -n "${CELL_FLAGS[$cell]+set}" ]; then echo "gpu_repro: cell $cell is named twice (--plan $PLAN)" >&2; exit 2; fi
    rest=${rest%%#*}
    CELLS+=("$cell"); CELL_FLAGS[$cell]=${rest%"${rest##*[![:space:]]}"}  # less the comment and trailing blanks
  done < "$PLAN"
fi
if [ ${#CELLS[@]} -eq 0 ]; then
  CELLS=(lru_ml1m sasrec_ml1m lru_beauty sasrec_beauty lru_video sasrec_video lru_sports sasrec_sports
         lru_steam sasrec_steam lru_xlong sasrec_xlong)
fi
case "$PRECISION" in 32-true|32|bf16-mixed) ;; *) echo "gpu_repro: --precision must be 32-true or bf16-mixed" >&2; exit 2 ;; esac
for n in "$BUDGET_S" "${PER_CELL:-0}"; do
  case "$n" in ''|*[!0-9]*) echo "gpu_repro: --budget and --per_cell take whole seconds, got '$n'" >&2; exit 2 ;; esac
done
case "$PARALLEL" in ''|*[!0-9]*|0) echo "gpu_repro: --parallel takes a whole number of cells >= 1, got '$PARALLEL'" >&2; exit 2 ;; esac

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline PYTHONUNBUFFERED=1
for cell in "${CELLS[@]}"; do
  if [ ! -f "seqrec/configs/${cell%%@*}.yaml" ]; then echo "gpu_repro: no shipped config ${cell%%@*} (seqrec/configs/${cell%%@*}.yaml)" >&2; exit 2; fi
done
if ! TORCH=$("$PY" -c "import torch, seqrec; print(torch.__version__, int(torch.cuda.is_available()))" 2>/dev/null); then
  echo "gpu_repro: $PY cannot import torch and seqrec; set PYTHON to an interpreter with both (pip install -e .)" >&2
  exit 2
fi
if [ "$DRY" = 0 ] && [ "${TORCH##* }" != 1 ]; then
  echo "gpu_repro: no CUDA GPU is visible to torch ${TORCH% *} on this machine: nothing to run."
  echo "gpu_repro: the CPU path is python -m seqrec repro (hours per cell; results/REPRODUCTION.md lists the estimates);"
  echo "gpu_repro: scripts/gpu_repro.sh --cpu_dry_run exercises this script on CPU."
  exit 0
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_repro.XXXXXX")
if [ -z "$RESULTS" ]; then
  if [ "$DRY" = 1 ]; then RESULTS="$WORK/results"; else RESULTS=results; fi
fi
RUNS=${RUNS:-$WORK/runs}
mkdir -p "$RESULTS" "$RUNS"
RUNS=$(cd "$RUNS" && pwd)
REPORT="$RESULTS/REPRODUCTION.md"
GPU_MD="$RESULTS/GPU.md"
: > "$WORK/cells.tsv"
echo "gpu_repro: working in $WORK; results in $RESULTS"

# --- hardware, flags, data ----------------------------------------------------------------------------------
SHARED=""
if [ "$DRY" = 1 ]; then
  export SEQREC_CACHE="$WORK/cache"
  # beside the runs folder, so that a --resume call over the same --runs_dir finds its runs' data path unchanged
  SHARED="$(dirname "$RUNS")/dry_run_data"
  "$PY" - "$SHARED" <<'EOF'
import gzip, sys
from pathlib import Path
import numpy as np
root = Path(sys.argv[1])
(root / "lrurec").mkdir(parents=True, exist_ok=True)
for seed, name in enumerate(["ml-1m", "beauty", "video", "sports", "steam"]):  # SASRec/LRURec "user item" pairs
    rng = np.random.default_rng(seed)  # 60 items: the protocol ranks @50
    lines = [f"{u} {(u * 3 + 7 * t + int(rng.integers(3))) % 60 + 1}" for u in range(1, 41) for t in range(12)]
    (root / "lrurec" / f"{name}.txt.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
xlong = root / "xlong"
xlong.mkdir(exist_ok=True)
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
THREADS=$(( $(nproc) / PARALLEL )); [ "$THREADS" -lt 1 ] && THREADS=1
if [ "$CHECK" = 0 ]; then CHECK_RESERVE_S=0; fi

# --- several cells on one GPU: NVIDIA's Multi-Process Service, where it starts ---------------------------------
MPS_ON=0
if [ "$MPS" = 1 ] && [ "$DRY" = 0 ]; then
  if command -v nvidia-cuda-mps-control > /dev/null 2>&1; then
    export CUDA_MPS_PIPE_DIRECTORY="$WORK/mps/pipe" CUDA_MPS_LOG_DIRECTORY="$WORK/mps/log"
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    if nvidia-cuda-mps-control -d && timeout 90 "$PY" -c "import torch; assert torch.ones(8, device='cuda').sum().item() == 8"; then
      MPS_ON=1
    else
      echo "gpu_repro: MPS did not start (log: $CUDA_MPS_LOG_DIRECTORY): the cells take turns on the GPU"
      echo quit | timeout 10 nvidia-cuda-mps-control > /dev/null 2>&1
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
  else
    echo "gpu_repro: --mps: nvidia-cuda-mps-control is not on this machine: the cells take turns on the GPU"
  fi
fi
stop_mps() { if [ "$MPS_ON" = 1 ]; then echo quit | timeout 10 nvidia-cuda-mps-control > /dev/null 2>&1; MPS_ON=0; fi; }
if [ "$PARALLEL" -gt 1 ]; then
  HW_LABEL="${HW_LABEL% (scripts/gpu_repro.sh)}, up to $PARALLEL cells sharing it$([ "$MPS_ON" = 1 ] && echo ' (MPS)') (scripts/gpu_repro.sh)"
fi
echo "gpu_repro: hardware: $HW_LABEL; shared data: ${SHARED:-none, each config reads its own source}"

copy_out() {  # the result files, then runs.tgz: the run directories less checkpoints and wandb, the cells' logs
  if [ -n "$COPY_TO" ]; then
    mkdir -p "$COPY_TO"
    for f in "$REPORT" "$RESULTS/reproduction.json" "$GPU_MD" "$RESULTS/reproduction_curves.png"; do
      if [ -f "$f" ]; then cp "$f" "$COPY_TO/"; fi
    done
    local logs; logs=$(cd "$WORK" && ls -- *.log cells.tsv 2> /dev/null)
    # shellcheck disable=SC2086  # the log names: cells and letters, no spaces
    tar czf "$COPY_TO/runs.tgz.tmp" --exclude='*.ckpt' --exclude=wandb -C "$(dirname "$RUNS")" "$(basename "$RUNS")" \
      -C "$WORK" $logs && mv "$COPY_TO/runs.tgz.tmp" "$COPY_TO/runs.tgz"
  fi
}
write_cells_section() {  # the "Reproduction cells" section of GPU.md, from cells.tsv and the ledger
  "$PY" - "$WORK/cells.tsv" "$GPU_MD" "$RESULTS/reproduction.json" "$HW_LABEL" "$BUDGET_S" "$DRY" <<'EOF'
import csv, json, sys
from pathlib import Path
from seqrec.bench.report import write_section
rows, gpu_md, ledger, hw, budget, dry = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6] == "1"
cells = json.loads(ledger.read_text())["cells"] if ledger.is_file() else {}
lines = [f"`scripts/gpu_repro.sh{' --cpu_dry_run' if dry else ''}` on {hw}; total budget {budget} s. Each cell: one "
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
mkdir -p "$WORK/ledgers" "$WORK/done"
launch() {  # CELL ALLOWANCE MAX_TIME: one `seqrec repro` process writing its own ledger; its status line into $WORK/done/
  local cell=$1 allowance=$2 max_time=$3 config=${1%%@*} variant=() flags=() shared_args=()
  [[ $cell == *@* ]] && variant=(--variant "${cell#*@}")
  read -ra flags <<< "${CELL_FLAGS[$cell]}"
  local cell_flags=("${FLAGS[@]}")
  if [ "$DRY" = 0 ]; then
    case "$config" in *_xlong) cell_flags+=(--data.init_args.eval_batch_size 512) ;; *) cell_flags+=(--data.init_args.eval_batch_size "$EVAL_BATCH") ;; esac
    cell_flags+=(--threads "$THREADS")
  fi
  [ -n "$SHARED" ] && shared_args=(--shared_data "$SHARED")
  local ledger="$WORK/ledgers/$cell"
  mkdir -p "$ledger"
  if [ -f "$RESULTS/reproduction.json" ]; then cp "$RESULTS/reproduction.json" "$ledger/"; fi
  local begin; begin=$(date +%s)
  timeout -k "$GRACE_S" $(( allowance + GRACE_S )) "$PY" -m seqrec repro --configs "$config" "${variant[@]}" --runs_dir "$RUNS" --resume "$RESUME" \
    --out "$ledger/REPRODUCTION.md" --hardware "$HW_LABEL" \
    --sitting_time "$(printf '00:%02d:%02d:%02d' $(( max_time / 3600 )) $(( max_time % 3600 / 60 )) $(( max_time % 60 )))" \
    "${shared_args[@]}" -- "${cell_flags[@]}" "${flags[@]}" > "$WORK/$cell.log" 2>&1
  local rc=$? status=ok note=""
  local wall=$(( $(date +%s) - begin ))
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=killed; note="over ${allowance}s + ${GRACE_S}s: no test of this sitting"
  elif [ $rc -eq 75 ]; then status="time limit"; note="partial: resume with --resume"
  elif [ $rc -ne 0 ]; then status=failed; note=$(grep -E "^error|Error" "$WORK/$cell.log" | tail -1 | cut -c1-200 | tr '\t|' '  '); fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$cell" "$status" "$allowance" "$wall" "$note" > "$WORK/done/$cell.tmp"
  mv "$WORK/done/$cell.tmp" "$WORK/done/$cell.tsv"
}
adopt_finished() {  # the cells that ended since the last call: status rows, their ledger entries into $RESULTS
  local row cell status allowance wall note finished=()
  for row in "$WORK"/done/*.tsv; do
    [ -e "$row" ] || continue
    IFS=$'\t' read -r cell status allowance wall note < "$row"
    cat "$row" >> "$WORK/cells.tsv"
    rm "$row"
    finished+=("$cell")
    FINISHED=$(( FINISHED + 1 ))
    echo "gpu_repro: [$cell] $status (${wall}s)${note:+: $note}"
  done
  [ ${#finished[@]} -eq 0 ] && return
  # one interpreter for all of them: importing seqrec.bench.repro (torch, Lightning, matplotlib) took about 20 s
  # on a lent H200 machine, so a process per cell made the cells that end together wait for one another
  "$PY" -c 'import sys; from pathlib import Path; from seqrec.bench import repro
ledger, own, hardware, report = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
for cell in sys.argv[5:]:
    cells = repro.adopt(ledger, own / cell / repro.LEDGER, cell, hardware)
repro.write_report(report, cells)' "$RESULTS/reproduction.json" "$WORK/ledgers" "$HW_LABEL" "$REPORT" "${finished[@]}" > /dev/null \
    || echo "gpu_repro: the ledger entries of ${finished[*]} could not be adopted (see above)"
  write_cells_section; copy_out
}
declare -A WANT=()  # each cell's allowance before the budget caps it: --per_cell, else 1.5 × its H200 estimate + OVERHEAD_S
for cell in "${CELLS[@]}"; do WANT[$cell]=${PER_CELL:-120}; done  # the dry run's 120 s
if [ -z "$PER_CELL" ] && [ "$DRY" = 0 ]; then
  while read -r cell seconds; do WANT[$cell]=$seconds; done < <("$PY" -c 'import sys
from seqrec.bench.repro import base_config, estimate_seconds
for cell in sys.argv[2:]:
    print(cell, int(1.5 * estimate_seconds(base_config(cell), "h200")) + int(sys.argv[1]))' "$OVERHEAD_S" "${CELLS[@]}")
fi
# A cell's end is its file in $WORK/done, polled: bash's `wait -n` missed jobs that ended while a foreground command
# ran (seen: the script waited on no children at all), so the slots are counted from the files, not the job table.
STARTED=$(date +%s)
LAUNCHED=0
FINISHED=0
for cell in "${CELLS[@]}"; do
  while [ $(( LAUNCHED - FINISHED )) -ge "$PARALLEL" ]; do sleep 2; adopt_finished; done
  adopt_finished
  elapsed=$(( $(date +%s) - STARTED ))
  left=$(( BUDGET_S - CHECK_RESERVE_S - elapsed ))
  want=${WANT[$cell]}
  allowance=$(( want < left ? want : left ))
  if [ "$allowance" -lt "$MIN_CELL_S" ]; then
    printf '%s\tskipped: budget\t0\t0\t%s\n' "$cell" "${left}s of the budget left (${MIN_CELL_S}s needed)" >> "$WORK/cells.tsv"
    echo "gpu_repro: [$cell] skipped: ${left}s of the budget left"
    write_cells_section; copy_out
    continue
  fi
  max_time=$(( allowance - OVERHEAD_S )); [ "$max_time" -lt 30 ] && max_time=30
  echo "gpu_repro: [$cell] allowance ${allowance}s (training at most ${max_time}s), ${elapsed}s of ${BUDGET_S}s spent${CELL_FLAGS[$cell]:+; flags: ${CELL_FLAGS[$cell]}}"
  launch "$cell" "$allowance" "$max_time" &
  LAUNCHED=$(( LAUNCHED + 1 ))
done
while [ $(( LAUNCHED - FINISHED )) -gt 0 ]; do sleep 2; adopt_finished; done
wait
stop_mps

# --- then the GPU check ---------------------------------------------------------------------------------------
elapsed=$(( $(date +%s) - STARTED ))
check_budget=$(( BUDGET_S - elapsed - 100 ))
if [ "$DRY" = 1 ]; then check_budget=1; fi
if [ "$CHECK" = 0 ]; then
  echo "gpu_repro: --no_check: scripts/gpu_check.sh not run"
elif [ "$check_budget" -gt 0 ]; then
  echo "gpu_repro: scripts/gpu_check.sh with BUDGET_S=$check_budget"
  check_args=(); [ "$DRY" = 1 ] && check_args=(--cpu_dry_run)
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
grep -E "^\| (cell|[a-z0-9_]+(@[a-z0-9_-]+)?) \|" "$GPU_MD" | head -40
