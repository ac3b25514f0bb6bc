"""``python -m seqrec test --config X.yaml --ckpt_path PATH``: test a checkpoint under a config.

The run is built exactly as ``fit`` builds it (same data, split, frozen negatives and metrics), the
checkpoint is verified (``check_checkpoint``: one line naming it when it is missing, truncated or corrupt),
its weights are loaded by ``Trainer.test`` and the metrics are written to ``test_metrics.json`` in the new
run directory. Failures are one line (``seqrec.errors.run_command``).
"""

from __future__ import annotations

import logging
from pathlib import Path

from jsonargparse import Namespace

from seqrec.build import build
from seqrec.callbacks.checkpoint_io import check_checkpoint
from seqrec.callbacks.signals import stop_on_signals
from seqrec.checks import check_catalogue
from seqrec.datamodules.base import RecommendationData
from seqrec.errors import run_command
from seqrec.runs import TEST_METRICS, write_test_results

log = logging.getLogger("seqrec.evaluate")


def check_test_checkpoint(config: Namespace) -> None:
    """A given ``--ckpt_path`` must be a usable checkpoint file (checked before anything is built)."""
    if config.ckpt_path is not None:
        check_checkpoint(config.ckpt_path)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Build the run, test ``--ckpt_path`` (required for trained models), write and return the metrics."""
    return run_command(run_test, argv)


def run_test(argv: list[str]) -> dict[str, float]:
    """``main`` without the one-line error reporting."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with stop_on_signals():
        run = build(list(argv), adjust=check_test_checkpoint)
        check_catalogue(run.config, run.datamodule.num_items if isinstance(run.datamodule, RecommendationData) else None)
        ckpt_path = run.config.ckpt_path
        trainable = any(p.requires_grad for p in run.task.parameters())
        if ckpt_path is None and trainable:
            raise ValueError("python -m seqrec test needs --ckpt_path PATH (a checkpoint of a run of this config, "
                             "e.g. runs/<config>/version_N/checkpoints/best-*.ckpt)")
        [results] = run.trainer.test(run.task, datamodule=run.datamodule, ckpt_path=ckpt_path)
        out_dir = Path(run.trainer.log_dir or run.trainer.default_root_dir)
        if run.trainer.is_global_zero:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_test_results(out_dir, results, run.task)
            log.info("test metrics written to %s", out_dir / TEST_METRICS)
        for logger in run.trainer.loggers:
            if callable(getattr(logger, "close", None)):
                logger.close()
    return results


if __name__ == "__main__":
    main()
