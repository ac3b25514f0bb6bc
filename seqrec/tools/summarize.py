"""Turn a run directory into a learning-curve PNG and a markdown summary, for people who never open wandb.

    python -m seqrec.tools.summarize runs/sasrec_ml100k/version_0 [more run dirs] [--out DIR]
    python -m seqrec.tools.summarize runs/sasrec_ml100k          # the newest version_N inside

Reads what every run directory holds (metrics.csv from the CSV logger, config.yaml from the CLI,
test_metrics.json from ``seqrec.fit``) and writes next to them (or into ``--out``):

- ``learning_curve.png``: training loss (mean per epoch) and every validation ranking metric per epoch;
- ``metrics_at_k.csv``: the test metrics as a table, one row per cut-off k, one column per metric kind;
- ``summary.md``: model and data, test metrics at every k, cost (``cost/*``: MACs, memory, state
  bytes), throughput, best validation epoch, the plot, and where the wandb offline run is.
"""

from __future__ import annotations

import argparse
import sys

from seqrec.loggers.report import write_report


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; prints the files written."""
    parser = argparse.ArgumentParser(prog="python -m seqrec.tools.summarize", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run directories (runs/<name>/version_N) or experiment folders (runs/<name>)")
    parser.add_argument("--out", default=None, help="write here instead of into each run directory (one run only)")
    args = parser.parse_args(argv)
    if args.out is not None and len(args.runs) > 1:
        parser.error("--out takes one run directory")
    status = 0
    for run in args.runs:
        try:
            written = write_report(run, args.out)
        except FileNotFoundError as error:
            print(f"error: {error}", file=sys.stderr)
            status = 1
            continue
        for kind, path in written.items():
            print(f"{kind}: {path}")
        if "plot" not in written:
            print("(no learning_curve.png: matplotlib is not installed or the run logged no epoch)", file=sys.stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
