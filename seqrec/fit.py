"""``python -m seqrec fit --config X.yaml [--section.key value ...]`` (also ``python -m seqrec.fit``):
fit, then test the best checkpoint.

The run is built by ``seqrec.build`` (config files, composition, overrides, links); this module runs it:
optional step-0 validation, ``Trainer.fit`` (resuming with ``--ckpt_path last``), the test of the best
checkpoint, and ``fit_summary.json`` / ``test_metrics.json`` in the run directory.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch.callbacks import EarlyStopping

from seqrec.atomic import write_json
from seqrec.build import build
from seqrec.callbacks.rng import RNGStateCheckpoint

log = logging.getLogger("seqrec.fit")


def resolve_last_checkpoint(trainer_cfg: Namespace) -> str | None:
    """``last.ckpt`` of the newest run of this experiment, continuing that run's log version; None if none.

    The run directory is ``<logger save_dir>/<logger name>/version_N`` (CSVLogger/TensorBoard layout);
    the logger is pointed back at that version so metrics and checkpoints continue in one place.
    """
    logger = trainer_cfg.get("logger")
    if not isinstance(logger, Namespace) or "init_args" not in logger:
        raise ValueError("--ckpt_path last needs trainer.logger with save_dir and name to find the previous run")
    base = Path(logger.init_args.get("save_dir") or ".") / (logger.init_args.get("name") or "")
    found = sorted(base.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        log.warning("--ckpt_path last: no last.ckpt under %s; starting a new run", base)
        return None
    last = found[-1]
    logger.init_args.version = last.parent.parent.name
    log.info("resuming %s", last)
    return str(last)


def resolve_resume(config: Namespace) -> None:
    """``--ckpt_path last``: the run's last checkpoint, with the logger pointed back at its version."""
    if config.ckpt_path == "last":
        config.ckpt_path = resolve_last_checkpoint(config.trainer)


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Entry point: parse, fit, test the best checkpoint, print and save the test metrics."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run = build(list(sys.argv[1:] if argv is None else argv), adjust=resolve_resume)
    cli, trainer, task, data = run.cli, run.trainer, run.task, run.datamodule
    if trainer.world_size > 1 and not any(p.requires_grad for p in task.parameters()):
        raise ValueError(
            f"{type(getattr(task, 'model', task)).__name__} has no trainable parameters: its statistics would be "
            f"counted on each of the {trainer.world_size} processes' shard of the data. Run it in one process "
            "(leave out configs/trainer/ddp.yaml, or --trainer.devices 1)."
        )
    trainer.callbacks.append(RNGStateCheckpoint())
    ckpt_path = cli.config.ckpt_path
    if cli.config.validate_first and ckpt_path is None:
        trainer.validate(task, datamodule=data, verbose=False)
    started = time.perf_counter()
    first_epoch = trainer.current_epoch
    trainer.fit(task, datamodule=data, ckpt_path=ckpt_path)
    out_dir = Path(trainer.log_dir or trainer.default_root_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = fit_summary(trainer, time.perf_counter() - started, trainer.current_epoch - first_epoch)
    if trainer.is_global_zero:
        write_json(out_dir / "fit_summary.json", summary)
    log.info("fit: %s", summary)
    results: dict[str, float] = {}
    if cli.config.test:
        has_best = trainer.checkpoint_callback is not None and trainer.checkpoint_callback.best_model_path
        [results] = trainer.test(task, datamodule=data, ckpt_path="best" if has_best else None)
        if trainer.is_global_zero:
            write_json(out_dir / "test_metrics.json", results)
        log.info("test metrics written to %s", out_dir / "test_metrics.json")
    for logger in trainer.loggers:  # RunLogger: report (plot, per-k table, summary.md) and finish the wandb run
        if callable(getattr(logger, "close", None)):
            logger.close()
    return results


def fit_summary(trainer: L.Trainer, seconds: float, epochs_this_sitting: int) -> dict:
    """Why and when fitting stopped, and how long this sitting took (for results tables)."""
    early = [cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping) and cb.stopped_epoch > 0]
    if early:
        status = "early_stopping"
    elif trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
        status = "max_steps"
    elif trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
        status = "max_epochs"
    else:
        status = "interrupted_or_time_limit"  # trainer.max_time, Ctrl-C or a signal: resume with --ckpt_path last
    best = trainer.checkpoint_callback
    return {
        "status": status,
        "epochs": trainer.current_epoch,
        "global_step": trainer.global_step,
        "seconds_this_sitting": round(seconds, 1),
        "seconds_per_epoch": round(seconds / max(epochs_this_sitting, 1), 2),
        "best_checkpoint": getattr(best, "best_model_path", None) or None,
        "best_score": float(best.best_model_score) if getattr(best, "best_model_score", None) is not None else None,
    }


if __name__ == "__main__":
    main()
