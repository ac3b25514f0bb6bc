"""``python -m seqrec fit --config X.yaml [--section.key value ...]`` (also ``python -m seqrec.fit``):
fit, then test the best checkpoint.

The run is built by ``seqrec.build`` (config files, composition, overrides, links); this module runs it:
optional step-0 validation, ``Trainer.fit``, the test of the best checkpoint, and ``fit_summary.json`` /
``test_metrics.json`` in the run directory.

Resuming (``--ckpt_path``) continues one run directory; which checkpoint and run it resumes, and the config
check, are ``seqrec.resume``'s; ``fit_summary.json`` is ``seqrec.fit_summary``'s. What runs during the fit is
declared in configs/trainer/default.yaml; the resume callbacks (``seqrec.build.resume_callbacks``) are added
here. SIGINT/SIGTERM during training save a checkpoint and exit 130/143; ``--sitting_time DD:HH:MM:SS`` ends
the sitting the same way after that much training and exits 75 (``seqrec.callbacks.signals``); every failure
is one line (``seqrec.errors.run_command``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from seqrec.atomic import write_json
from seqrec.build import build, resume_callbacks
from seqrec.callbacks.signals import TIME_UP, Interrupted, SignalCheckpoint, stop_on_signals
from seqrec.checks import check_catalogue
from seqrec.datamodules.base import RecommendationData
from seqrec.errors import run_command
from seqrec.fit_summary import checkpoint_callback, fit_summary
from seqrec.lightning_private import disable_version_counter
from seqrec.loggers.run_logger import SittingMarker
from seqrec.resume import logger_version, resolve_resume
from seqrec.runs import SUMMARY, TEST_METRICS, remove_if_unused, write_test_results
from seqrec.tasks.base import RecommendationTask

__all__ = ["fit", "main"]

log = logging.getLogger("seqrec.fit")

def main(argv: list[str] | None = None) -> dict[str, float]:
    """Entry point: parse, fit, test the best checkpoint, print and save the test metrics; failures are one line."""
    return run_command(fit, argv)


def fit(argv: list[str], callbacks: Sequence[Callback] = ()) -> dict[str, float]:
    """Parse, fit, test the best checkpoint, save the test metrics (errors propagate; ``main`` reports them).

    At ``--sitting_time``'s end the best checkpoint so far is tested (a partial result, ``fit_summary.json``
    status ``sitting_time_limit``), then ``Interrupted`` (exit 75) says how to resume. ``callbacks`` join the
    trainer's own (``seqrec.tune`` adds its pruning callback, which holds a live Optuna trial: not a config value).
    """
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    with stop_on_signals():  # outside training a signal just stops (nothing to save)
        run = build(list(argv), adjust=resolve_resume)
        check_catalogue(run.config, run.datamodule.num_items if isinstance(run.datamodule, RecommendationData) else None)
        run.trainer.callbacks.extend(callbacks)
        return _fit_run(run)


def _fit_run(run: Any) -> dict[str, float]:
    """Fit ``run``, then test its best checkpoint; a signal or the sitting's end stops at a resume point."""
    cli, trainer, task, data = run.cli, run.trainer, run.task, run.datamodule
    if trainer.world_size > 1 and not any(p.requires_grad for p in task.parameters()):
        raise ValueError(
            f"{type(task.net if isinstance(task, RecommendationTask) else task).__name__} has no trainable parameters: "
            f"its statistics would be counted on each of the {trainer.world_size} processes' shard of the data. "
            "Run it in one process "
            "(leave out configs/trainer/ddp.yaml, or --trainer.devices 1)."
        )
    trainer.callbacks.extend(resume_callbacks(cli.config.get("sitting_time")))
    ckpt_path = cli.config.ckpt_path
    if ckpt_path is not None:
        for callback in trainer.callbacks:
            if isinstance(callback, ModelCheckpoint):
                # a file of the same name here was written by the sitting that crashed, from the same state:
                # overwrite it rather than keep it and add best-...-v1.ckpt beside it
                disable_version_counter(callback)
    new_dir = logger_version(cli.config) is None  # this process claims a fresh version_N
    started = time.perf_counter()
    marker = next((cb for cb in trainer.callbacks if isinstance(cb, SittingMarker)), None)

    def summary_now(status: str | None) -> dict[str, Any]:
        """fit_summary of this sitting: from the step and epoch training (re)started at (none before it started)."""
        started_training = marker is not None and marker.start_step is not None
        start_step = marker.start_step if started_training else trainer.global_step
        start_epoch = marker.start_epoch if started_training else trainer.current_epoch
        return fit_summary(trainer, time.perf_counter() - started, start_step, start_epoch, status)

    paused: Interrupted | None = None  # the sitting's time ran out: test the best so far, then exit 75
    try:
        if cli.config.validate_first and ckpt_path is None:
            trainer.validate(task, datamodule=data, verbose=False)
        trainer.fit(task, datamodule=data, ckpt_path=ckpt_path)
    except Interrupted as stop:
        out_dir = local_run_directory(trainer)
        if stop.checkpoint is not None and stop.signum == TIME_UP:
            paused = stop
        elif stop.checkpoint is not None:
            _finish(trainer, out_dir, summary_now("interrupted"))
            stop.args = (f"{stop}; resume with the same command and --ckpt_path {out_dir}",)
            raise
        else:
            if new_dir and trainer.is_global_zero:
                _close_loggers(trainer, "failed")
                remove_if_unused(out_dir)
            raise
    except BaseException:
        if new_dir and trainer.is_global_zero:
            _close_loggers(trainer, "failed")
            remove_if_unused(local_run_directory(trainer))
        raise
    out_dir = Path(trainer.log_dir or trainer.default_root_dir)  # after fit: under several processes, rank 0's
    trainer.callbacks = [cb for cb in trainer.callbacks if not isinstance(cb, SignalCheckpoint)]  # one Checkpoint for "best"
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = summary_now("sitting_time_limit" if paused is not None else None)
    if trainer.is_global_zero:
        write_json(out_dir / SUMMARY, summary)
    log.info("fit: %s", summary)
    results: dict[str, float] = {}
    if cli.config.test:
        best = checkpoint_callback(trainer)
        has_best = best is not None and best.best_model_path
        [results] = trainer.test(task, datamodule=data, ckpt_path="best" if has_best else None)
        if trainer.is_global_zero:
            write_test_results(out_dir, results, task)
        log.info("test metrics written to %s", out_dir / TEST_METRICS)
    if paused is not None:  # a partial result: the test above is of the best checkpoint so far
        _close_loggers(trainer, "interrupted")
        paused.args = (f"{paused}; resume with the same command and --ckpt_path {out_dir}",)
        raise paused
    _close_loggers(trainer)
    return results


def local_run_directory(trainer: L.Trainer) -> Path:
    """This process's idea of the run directory (no collective call: safe on a failure path; right on rank 0)."""
    logger = trainer.logger
    log_dir = getattr(logger, "log_dir", None) if logger is not None else None
    return Path(log_dir or trainer.default_root_dir)


def _finish(trainer: L.Trainer, out_dir: Path, summary: dict) -> None:
    """After a signal: fit_summary.json and the report from the whole history."""
    if trainer.is_global_zero and out_dir.is_dir():
        write_json(out_dir / SUMMARY, summary)
    _close_loggers(trainer, "interrupted")


def _close_loggers(trainer: L.Trainer, status: str = "success") -> None:
    """RunLogger: report (plot, per-k table, summary.md) and finish the wandb run."""
    for logger in trainer.loggers:
        if callable(getattr(logger, "close", None)):
            logger.close(status) if status != "success" else logger.close()


if __name__ == "__main__":
    main()
