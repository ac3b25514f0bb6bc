#!/usr/bin/env bash
# GPU check: the paths only a CUDA GPU runs, in one short script (< 5 minutes on one GPU), written to results/GPU.md.
#
#   scripts/gpu_check.sh                # on a machine with a CUDA GPU
#   scripts/gpu_check.sh --cpu_dry_run  # the same steps, tiny, on CPU: checks the script itself (no GPU needed)
#
# Steps (each a real `python -m seqrec.fit` run on ML-1M, 1 GPU, loggers [csv], one after the other; the shipped
# sasrec_ml100k.yaml / lru_ml1m.yaml models with the data swapped for ML-1M and 2 short epochs):
#   sasrec_fp32, sasrec_bf16, lru_bf16   peak accelerator memory and training samples/s (bf16 mixed precision;
#                                        the LRU keeps its complex recurrence in float32 under autocast)
#   sasrec_deepspeed2                    DeepSpeed ZeRO stage 2 on 1 GPU, bf16
#   sasrec_deepspeed3                    DeepSpeed ZeRO stage 3 on 1 GPU (its validation/test pitfalls)
# A step that fails or runs out of time is recorded as such and the next one runs; steps that would start
# after BUDGET_S seconds are skipped. Without CUDA the script says so and exits 0: the project builds and
# passes its tests without a GPU (`make test`).
#
# Environment: PYTHON (default .venv/bin/python, else python3) must have CUDA torch and this package's
# dependencies; SEQREC_SHARED_DATA (a folder of real copies) holds lrurec/ml-1m.txt.gz. Without
# that file an ML-1M-shaped synthetic file (6,040 users, 3,416 items, ~1M events) is used and marked as such.
# DeepSpeed steps are skipped (and say so) when the deepspeed package is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DRY=0
case "${1:-}" in
  --cpu_dry_run) DRY=1 ;;
  --cpu-dry-run) DRY=1; echo "note: --cpu-dry-run is now --cpu_dry_run" >&2 ;;  # the old spelling, as seqrec's
  "") ;;
  *) echo "usage: scripts/gpu_check.sh [--cpu_dry_run]" >&2; exit 2 ;;
esac

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
OUT=${GPU_CHECK_OUT:-}
BUDGET_S=${BUDGET_S:-250}
STEP_TIMEOUT_S=${STEP_TIMEOUT_S:-100}
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export WANDB_MODE=offline

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "gpu_check: $PY cannot import torch; set PYTHON to an interpreter with torch and this package installed" >&2
  exit 2
fi
if [ "$DRY" = 0 ] && ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "gpu_check: no CUDA GPU is visible to torch $("$PY" -c 'import torch; print(torch.__version__)') on this machine: nothing to check."
  echo "gpu_check: the project builds and passes its tests without a GPU (make test); run this script on a machine with one"
  echo "gpu_check: (or scripts/gpu_check.sh --cpu_dry_run to exercise the script itself on CPU)."
  exit 0
fi
missing=$("$PY" - <<'EOF'
import importlib.util
need = ["seqrec", "lightning", "torchmetrics", "jsonargparse", "fvcore", "matplotlib", "yaml"]
print(" ".join(n for n in need if importlib.util.find_spec(n) is None))
EOF
)
if [ -n "$missing" ]; then
  echo "gpu_check: $PY lacks: $missing. Install the package first: $PY -m pip install -e . (torch with CUDA stays as is)" >&2
  exit 2
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
export SEQREC_CACHE="$WORK/cache"
if [ -z "$OUT" ]; then  # a dry run never overwrites the GPU figures
  if [ "$DRY" = 1 ]; then OUT="$WORK/GPU.md"; else OUT=results/GPU.md; fi
fi
echo "gpu_check: working in $WORK"

# --- data: the LRURec ML-1M file, or an ML-1M-shaped stand-in -------------------------------------------
DATA_NOTE="ML-1M as LRURec trains on it (lrurec/ml-1m.txt.gz: 6,040 users, 3,416 items, 999,611 events)"
ML1M=""
if [ -n "${SEQREC_SHARED_DATA:-}" ] && [ -f "$SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz" ]; then
  ML1M="$SEQREC_SHARED_DATA/lrurec/ml-1m.txt.gz"
fi
if [ -z "$ML1M" ]; then
  ML1M="$WORK/ml-1m-synthetic.txt"
  DATA_NOTE="SYNTHETIC ML-1M-shaped data (ml-1m.txt.gz not found: set SEQREC_SHARED_DATA); metrics meaningless, cost figures comparable"
  "$PY" - "$ML1M" <<'EOF'
import sys
import numpy as np
rng = np.random.default_rng(0)
lengths = np.clip(rng.lognormal(4.6, 1.0, 6040).astype(int), 20, 2314)
lengths = (lengths * (999_611 / lengths.sum())).astype(int).clip(20)
with open(sys.argv[1], "w") as out:
    for user, n in enumerate(lengths, 1):
        items = (rng.integers(1, 3417) + np.cumsum(rng.integers(1, 4, n))) % 3416 + 1
        out.write("".join(f"{user} {i}\n" for i in items))
EOF
fi
echo "gpu_check: data: $DATA_NOTE"

# --- the steps ---------------------------------------------------------------------------------------------
cat > "$WORK/gpu.yaml" <<EOF
validate_first: false
trainer:
  max_epochs: 2
  limit_train_batches: 150
  val_check_interval: 1.0
  check_val_every_n_epoch: 1
  enable_progress_bar: false
  logger:
    class_path: seqrec.loggers.run_logger.RunLogger
    init_args:
      save_dir: $WORK/runs
      loggers: [csv]
data:
  class_path: seqrec.datamodules.next_item.NextItemDataModule
  init_args:
    source:
      class_path: seqrec.data.sources.sasrec_text.SASRecText
      init_args:
        name: ml-1m
        path: $ML1M
    preprocessing:
      min_item_interactions: 0
      min_user_interactions: 0
      kcore: one_pass
      sort_by: time
    max_len: 200
    batch_size: 128
    eval_batch_size: 256
EOF

if [ "$DRY" = 1 ]; then
  HW=(--trainer.accelerator cpu --trainer.devices 1 --data.init_args.max_len 20 --trainer.limit_train_batches 3
      --trainer.limit_val_batches 2 --trainer.limit_test_batches 2 --trainer.max_epochs 1 --threads 1)
else
  HW=(--trainer.accelerator gpu --trainer.devices 1)
fi
# the experiment config first, then this check's data/trainer/logger settings, then the hardware
SASREC=(--config configs/sasrec_ml100k.yaml --config "$WORK/gpu.yaml" "${HW[@]}")
LRU=(--config configs/lru_ml1m.yaml --config "$WORK/gpu.yaml" "${HW[@]}")
HAS_DEEPSPEED=$("$PY" -c "import importlib.util; print(int(importlib.util.find_spec('deepspeed') is not None))")

STARTED=$(date +%s)
: > "$WORK/steps.tsv"
run_step() {  # name, args of seqrec.fit...
  local name=$1; shift
  local elapsed=$(( $(date +%s) - STARTED ))
  if [ "$elapsed" -ge "$BUDGET_S" ]; then
    printf '%s\tskipped\t0\t%s\n' "$name" "time budget (${BUDGET_S}s) spent" >> "$WORK/steps.tsv"; return
  fi
  echo "gpu_check: [$name] running (${elapsed}s elapsed)"
  local begin=$(date +%s) status=ok note=""
  timeout "$STEP_TIMEOUT_S" "$PY" -m seqrec.fit "$@" --trainer.logger.init_args.name "$name" \
    > "$WORK/$name.log" 2>&1
  local rc=$?
  if [ $rc -eq 124 ]; then status=timeout; note="over ${STEP_TIMEOUT_S}s";
  elif [ $rc -ne 0 ]; then status=failed; note=$(grep -E "Error|error" "$WORK/$name.log" | tail -1 | cut -c1-200 | tr '\t|' '  '); fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - begin ))" "$note" >> "$WORK/steps.tsv"
  echo "gpu_check: [$name] $status ($(( $(date +%s) - begin ))s)${note:+: $note}"
}
skip_step() { printf '%s\tskipped\t0\t%s\n' "$1" "$2" >> "$WORK/steps.tsv"; echo "gpu_check: [$1] skipped: $2"; }

run_step sasrec_fp32 "${SASREC[@]}"
run_step sasrec_bf16 "${SASREC[@]}" --trainer.precision bf16-mixed
run_step lru_bf16 "${LRU[@]}" --trainer.precision bf16-mixed
if [ "$DRY" = 1 ]; then
  skip_step sasrec_deepspeed2 "CPU dry run (DeepSpeed needs CUDA)"
  skip_step sasrec_deepspeed3 "CPU dry run (DeepSpeed needs CUDA)"
elif [ "$HAS_DEEPSPEED" = 1 ]; then
  DS=(--trainer.devices 1 --trainer.precision bf16-mixed --trainer.max_epochs 1 --trainer.limit_train_batches 100)
  run_step sasrec_deepspeed2 "${SASREC[@]}" --config configs/trainer/deepspeed_stage2.yaml "${DS[@]}"
  run_step sasrec_deepspeed3 "${SASREC[@]}" --config configs/trainer/deepspeed_stage3.yaml "${DS[@]}"
else
  skip_step sasrec_deepspeed2 "deepspeed is not installed ($PY -m pip install deepspeed)"
  skip_step sasrec_deepspeed3 "deepspeed is not installed ($PY -m pip install deepspeed)"
fi

# --- the report ----------------------------------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
"$PY" - "$WORK" "$OUT" "$DATA_NOTE" "$DRY" "$(( $(date +%s) - STARTED ))" <<'EOF'
import csv, json, platform, sys
from pathlib import Path
import torch
work, out, data_note, dry, total = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5]

def last(rows, key):
    values = [float(r[key]) for r in rows if r.get(key) not in (None, "")]
    return values[-1] if values else None

def fmt(value, spec):
    return "" if value is None else format(value, spec)

versions = {"torch": torch.__version__}
for name in ("lightning", "deepspeed", "fvcore"):
    try:
        versions[name] = __import__(name).__version__
    except Exception:
        versions[name] = "not installed"
device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else f"CPU ({platform.processor() or platform.machine()})"
lines = [
    "# GPU check" + (" (CPU dry run of the script: not GPU figures)" if dry else ""),
    "",
    f"Written by `scripts/gpu_check.sh{' --cpu_dry_run' if dry else ''}` in {total} s. Device: {device}; "
    + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
    f"Data: {data_note}. SASRec: configs/sasrec_ml100k.yaml's model (d=64, 2 blocks, 1 head); LRURec:"
    " configs/lru_ml1m.yaml's (d=64, 2 layers, scan=auto: the parallel scan on GPU); max_len 200 (the dry run: 20),"
    " batch 128, full-softmax CE, full ranking; 2 epochs of 150 batches (DeepSpeed: 1 of 100).",
    "",
    "| step | status | wall s | epochs | train samples/s | train tokens/s | peak GPU MiB (train) | peak GPU MiB (test) "
    "| test users/s | MACs per train sample | test NDCG@10 | note |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
]
for name, status, seconds, note in csv.reader(open(work / "steps.tsv"), delimiter="\t"):
    runs = sorted((work / "runs" / name).glob("version_*"))
    rows, test = [], {}
    if runs:
        run = runs[-1]
        if (run / "metrics.csv").is_file():
            rows = list(csv.DictReader(open(run / "metrics.csv")))
        if (run / "test_metrics.json").is_file():
            test = json.loads((run / "test_metrics.json").read_text())
    # Lightning's own epoch-end logging carries an epoch column; values the callbacks send at test end do not
    train_rows = [r for r in rows if r.get("epoch") not in (None, "")]
    test_rows = [r for r in rows if r.get("epoch") in (None, "")]
    epochs = len({r["epoch"] for r in rows if r.get("train/samples_per_s_epoch")})
    lines.append("| " + " | ".join([
        name, status, seconds, str(epochs or ""),
        fmt(last(rows, "train/samples_per_s_epoch"), ",.0f"), fmt(last(rows, "train/tokens_per_s_epoch"), ",.0f"),
        fmt(last(train_rows, "cost/peak_accelerator_memory_mib"), ",.0f"), fmt(last(test_rows, "cost/peak_accelerator_memory_mib"), ",.0f"),
        fmt(last(test_rows, "test/users_per_s"), ",.0f"), fmt(test.get("cost/macs_per_train_sample"), ".3g"),
        fmt(test.get("test/ndcg@10"), ".4f"), note,
    ]) + " |")
lines += [
    "",
    "Samples/s and peak memory are from the last training epoch (the first one includes warm-up); bf16 rows use",
    "`--trainer.precision bf16-mixed`; DeepSpeed rows stack `configs/trainer/deepspeed_stage{2,3}.yaml` on one GPU",
    "for one epoch. Logs of every step: the working folder printed at the start.",
]
out.write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
echo "gpu_check: wrote $OUT (logs in $WORK)"
