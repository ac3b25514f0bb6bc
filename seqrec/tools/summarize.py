"""Turn a run directory into a learning-curve PNG and a markdown summary, for people who never open wandb.

    seqrec summarize runs/sasrec_ml100k/version_0 [more run dirs] [--out DIR]
    seqrec summarize runs/sasrec_ml100k          # the newest version_N inside

Reads what every run directory holds (metrics.csv from the CSV logger, config.yaml from the CLI,
test_metrics.json from ``seqrec.fit``) and writes next to them (or into ``--out``):

- ``learning_curve.png``: training loss (mean per epoch) and every validation ranking metric per epoch;
- ``metrics_at_k.csv``: the test metrics as a table, one row per cut-off k, one column per metric kind;
- ``summary.md``: model and data, test metrics at every k, cost (``cost/*``: MACs, memory, state
  bytes), throughput, best validation epoch, the plot, and where the wandb offline run is.
"""

from __future__ import annotations

import sys

from seqrec.cli import main as cli_main
from seqrec.loggers.report import write_report


def main(argv: list[str] | None = None) -> int:
    """``seqrec summarize`` (``seqrec.cli``); returns the exit status."""
    return cli_main(["summarize", *(sys.argv[1:] if argv is None else argv)])


def command(runs: list[str], out: str | None = None) -> int:
    """Rebuild a run's report: learning_curve.png, metrics_at_k.csv and summary.md beside its metrics.

    Reads metrics.csv, config.yaml and test_metrics.json of each run; a run that cannot be read is one line, and
    the exit status (returned) is 1 after the others are written.

    Args:
        runs: run directories (runs/<name>/version_N) or experiment folders (runs/<name>: the newest version)
        out: write here instead of into each run directory (one run only)
    """
    if out is not None and len(runs) > 1:
        raise ValueError("--out takes one run directory")
    status = 0
    for run in runs:
        try:
            written = write_report(run, out)
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
