"""``python -m seqrec fit --config X.yaml [--section.key value ...]`` (also ``python -m seqrec.fit``):
fit, then test the best checkpoint.

The run is built by ``seqrec.build`` (config files, composition, overrides, links); this module runs it:
optional step-0 validation, ``Trainer.fit``, the test of the best checkpoint, and ``fit_summary.json`` /
``test_metrics.json`` in the run directory.

Resuming (``--ckpt_path``) continues one run directory, ``runs/<experiment>/version_N``:

- ``last``: the run of this experiment whose ``last.ckpt`` is newest, if its saved config equals the one
  resolved now (``RESUMABLE_KEYS`` may differ: a longer budget, a thread count); otherwise an error that
  lists the runs and how to pick one;
- a run directory (``runs/<experiment>/version_N``): its ``checkpoints/last.ckpt``, same config check;
- a checkpoint file: inside a run directory of this experiment it continues that run (same check),
  anywhere else it starts a new run from it.

The checkpoint is verified (``check_checkpoint``) and the configs compared before anything is built or
written. SIGINT/SIGTERM during training save a checkpoint and exit 130/143; ``--sitting_time DD:HH:MM:SS`` ends
the sitting the same way after that much training and exits 75 (``seqrec.callbacks.signals``);
every failure is one line (``seqrec.errors.run_command``).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback, EarlyStopping, ModelCheckpoint

from seqrec.atomic import write_json
from seqrec.build import build, parse
from seqrec.callbacks.checkpoint_io import check_checkpoint
from seqrec.callbacks.rng import RNGStateCheckpoint
from seqrec.callbacks.signals import TIME_UP, Interrupted, SignalCheckpoint, sitting_seconds, stop_on_signals
from seqrec.checks import check_catalogue, config_leaves, flag_name
from seqrec.errors import run_command
from seqrec.loggers.report import read_csv_rows
from seqrec.loggers.run_logger import SittingMarker
from seqrec.runs import last_checkpoints

log = logging.getLogger("seqrec.fit")

# keys a resumed sitting may change: budgets and how the process runs, not what is trained
RESUMABLE_KEYS = (
    "ckpt_path", "threads", "test", "validate_first", "sitting_time", "config", "compose",
    "trainer.max_epochs", "trainer.max_steps", "trainer.max_time", "trainer.enable_progress_bar",
    "trainer.logger.init_args.version", "trainer.logger.init_args.save_dir", "trainer.default_root_dir",
)


def run_base(trainer_cfg: Namespace) -> Path:
    """``<logger save_dir>/<logger name>``: where this experiment's run directories live."""
    logger = trainer_cfg.get("logger")
    if not isinstance(logger, Namespace) or "init_args" not in logger:
        raise ValueError("--ckpt_path needs trainer.logger (a RunLogger with save_dir and name) to find the run")
    return Path(logger.init_args.get("save_dir") or ".") / (logger.init_args.get("name") or "")


def config_differences(run_dir: Path, config: Namespace) -> list[str]:
    """How the config resolved now differs from the one ``run_dir`` ran with (``RESUMABLE_KEYS`` aside)."""
    saved = run_dir / "config.yaml"
    if not saved.is_file():
        return [f"{saved} is missing"]
    try:
        before = parse(["--config", str(saved)])
    except (Exception, SystemExit) as error:  # noqa: BLE001 (an old or damaged config.yaml is a difference)
        return [f"its config.yaml no longer parses ({' '.join(str(error).split())[:200]})"]
    old, new = dict(config_leaves(before)), dict(config_leaves(config))

    def resumable(key: str) -> bool:
        return any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS)

    keys = sorted(k for k in set(old) | set(new) if not resumable(k) and old.get(k) != new.get(k))
    return [f"{flag_name(k)}: {old.get(k)!r} in the run, {new.get(k)!r} now" for k in keys]


def resolve_last_checkpoint(trainer_cfg: Namespace) -> str | None:
    """``last.ckpt`` of the newest run of this experiment (by that file's time), or None when there is none."""
    found = last_checkpoints(run_base(trainer_cfg))
    return str(found[0]) if found else None


def _run_of(checkpoint: Path, base: Path) -> Path | None:
    """The run directory (``<base>/version_N``) holding ``checkpoint`` in its checkpoints/, else None."""
    run_dir = checkpoint.parent.parent
    if checkpoint.parent.name == "checkpoints" and run_dir.parent.resolve() == base.resolve():
        return run_dir
    return None


def _pick_hint(base: Path, config: Namespace) -> str:
    """The runs of ``base`` that have a last.ckpt, each with whether its config matches, and how to pick one."""
    described = []
    for path in last_checkpoints(base)[:8]:
        run_dir = path.parent.parent
        diff = config_differences(run_dir, config)
        described.append(f"{run_dir.name} ({'same config' if not diff else 'differs in ' + ', '.join(d.split(':')[0] for d in diff[:3])})")
    return (f"runs with a last.ckpt, newest first: {'; '.join(described)}. Continue one with --ckpt_path "
            f"{base}/version_N (add --config {base}/version_N/config.yaml to continue it under its own config), "
            "or leave out --ckpt_path to start a new run")


def resolve_resume(config: Namespace) -> None:
    """``--ckpt_path``: verify the checkpoint and the config, then point the logger at the run it continues.

    Runs before anything is built: a checkpoint that does not load or a config that differs from the run's
    is a one-line error and nothing in the run directory is touched.
    """
    value = config.ckpt_path
    if value is None:
        return
    if value == "last":
        base = run_base(config.trainer)
        last = resolve_last_checkpoint(config.trainer)
        if last is None:
            log.warning("--ckpt_path last: no last.ckpt under %s; starting a new run", base)
            config.ckpt_path = None
            return
        checkpoint = Path(last)
        run_dir = checkpoint.parent.parent
        diff = config_differences(run_dir, config)
        if diff:
            raise ValueError(
                f"--ckpt_path last: the newest run, {run_dir}, ran with another config ({'; '.join(diff[:4])}"
                f"{'; ...' if len(diff) > 4 else ''}); {_pick_hint(base, config)}"
            )
    else:
        path = Path(value)
        if path.is_dir():
            checkpoint = path / "checkpoints" / "last.ckpt" if (path / "checkpoints").is_dir() else path / "last.ckpt"
            if not checkpoint.is_file():
                raise FileNotFoundError(f"--ckpt_path {path}: no last.ckpt in it (expected a run directory "
                                        "runs/<experiment>/version_N or a checkpoint file)")
            run_dir = checkpoint.parent.parent
        else:
            checkpoint = path
            run_dir = _run_of(path, run_base(config.trainer)) if path.is_file() and _logger_version(config) != "none" else None
        if run_dir is not None:
            diff = config_differences(run_dir, config)
            if diff:
                raise ValueError(
                    f"--ckpt_path {value}: {run_dir} ran with another config ({'; '.join(diff[:4])}"
                    f"{'; ...' if len(diff) > 4 else ''}); continue it under its own config with --config "
                    f"{run_dir}/config.yaml --ckpt_path {run_dir}, or leave out --ckpt_path to start a new run"
                )
    check_checkpoint(checkpoint)
    if run_dir is not None and _logger_version(config) != "none":
        logger = config.trainer.logger
        if run_dir.parent.resolve() != run_base(config.trainer).resolve():  # elsewhere: continue it where it is
            logger.init_args.save_dir = str(run_dir.parent.parent)
            logger.init_args.name = run_dir.parent.name
        logger.init_args.version = run_dir.name
        log.info("resuming %s from %s", run_dir, checkpoint)
    config.ckpt_path = str(checkpoint)


def _logger_version(config: Namespace) -> Any:
    """The run logger's configured version (None: the next free one), or "none" without a configurable logger."""
    logger = config.trainer.get("logger")
    if isinstance(logger, Namespace) and "init_args" in logger:
        return logger.init_args.get("version")
    return "none"


def checkpoint_callback(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The run's first ModelCheckpoint (None without one)."""
    return next((cb for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)), None)


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
        check_catalogue(run.config, getattr(run.datamodule, "num_items", None))
        run.trainer.callbacks.extend(callbacks)
        return _fit_run(run)


def _fit_run(run: Any) -> dict[str, float]:
    cli, trainer, task, data = run.cli, run.trainer, run.task, run.datamodule
    if trainer.world_size > 1 and not any(p.requires_grad for p in task.parameters()):
        raise ValueError(
            f"{type(getattr(task, 'model', task)).__name__} has no trainable parameters: its statistics would be "
            f"counted on each of the {trainer.world_size} processes' shard of the data. Run it in one process "
            "(leave out configs/trainer/ddp.yaml, or --trainer.devices 1)."
        )
    limit = cli.config.get("sitting_time")
    resume_point = SignalCheckpoint(sitting_seconds(limit) if limit is not None else None)
    trainer.callbacks.extend([RNGStateCheckpoint(), resume_point, SittingMarker()])
    ckpt_path = cli.config.ckpt_path
    if ckpt_path is not None:
        for callback in trainer.callbacks:
            if isinstance(callback, ModelCheckpoint):
                # a file of the same name here was written by the sitting that crashed, from the same state:
                # overwrite it rather than keep it and add best-...-v1.ckpt beside it
                callback._enable_version_counter = False
    new_dir = _logger_version(cli.config) is None  # this process claims a fresh version_N
    started = time.perf_counter()
    first_epoch = trainer.current_epoch
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
            _finish(trainer, out_dir, fit_summary(trainer, time.perf_counter() - started, trainer.current_epoch - first_epoch, "interrupted"))
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
    summary = fit_summary(trainer, time.perf_counter() - started, trainer.current_epoch - first_epoch,
                          "sitting_time_limit" if paused is not None else None)
    if trainer.is_global_zero:
        write_json(out_dir / "fit_summary.json", summary)
    log.info("fit: %s", summary)
    results: dict[str, float] = {}
    if cli.config.test:
        best = checkpoint_callback(trainer)
        has_best = best is not None and best.best_model_path
        [results] = trainer.test(task, datamodule=data, ckpt_path="best" if has_best else None)
        if trainer.is_global_zero:
            write_json(out_dir / "test_metrics.json", results)
        log.info("test metrics written to %s", out_dir / "test_metrics.json")
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
        write_json(out_dir / "fit_summary.json", summary)
    _close_loggers(trainer, "interrupted")


def _close_loggers(trainer: L.Trainer, status: str = "success") -> None:
    """RunLogger: report (plot, per-k table, summary.md) and finish the wandb run."""
    for logger in trainer.loggers:
        if callable(getattr(logger, "close", None)):
            logger.close(status) if status != "success" else logger.close()


def remove_if_unused(run_dir: Path) -> None:
    """Remove a run directory this process created, when the run failed before it trained anything.

    Unused: no checkpoint and no training, validation or test row in metrics.csv (the cost rows written at
    start do not count), so a failure at start leaves no empty ``version_N`` behind.
    """
    if not run_dir.is_dir():
        return
    if any((run_dir / "checkpoints").glob("*.ckpt")):
        return
    metrics = run_dir / "metrics.csv"
    if metrics.is_file():
        if any(key.startswith(("train/", "val/", "test/")) for row in read_csv_rows(metrics) for key in row):
            return
    shutil.rmtree(run_dir, ignore_errors=True)


def fit_summary(trainer: L.Trainer, seconds: float, epochs_this_sitting: int, status: str | None = None) -> dict:
    """Why and when fitting stopped, and how long this sitting took (for results tables)."""
    early = [cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping) and cb.stopped_epoch > 0]
    if status is not None:
        pass
    elif early:
        status = "early_stopping"
    elif trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
        status = "max_steps"
    elif trainer.max_epochs not in (None, -1) and trainer.current_epoch >= trainer.max_epochs:
        status = "max_epochs"
    else:
        status = "interrupted_or_time_limit"  # Lightning's trainer.max_time: resume with --ckpt_path last
    best = checkpoint_callback(trainer)
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
