"""Which checkpoint ``--ckpt_path`` resumes, checked before anything is built or written.

A fit continues one run directory, ``runs/<experiment>/version_N`` (the layout: ``seqrec.runs``):

- ``last``: the run of this experiment whose ``last.ckpt`` is newest, if its saved config equals the one
  resolved now (``RESUMABLE_KEYS`` may differ: a longer budget, a thread count); otherwise an error that
  lists the runs and how to pick one;
- a run directory (``runs/<experiment>/version_N``): its ``checkpoints/last.ckpt``, same config check;
- a checkpoint file: inside a run directory of this experiment it continues that run (same check),
  anywhere else it starts a new run from it.

The checkpoint is verified (``check_checkpoint``) and the configs compared before anything is built; every
mismatch is a one-line error that says how to continue.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from seqrec.build import parse
from seqrec.callbacks.checkpoint_io import check_checkpoint
from seqrec.checks import config_leaves, flag_name
from seqrec.runs import CHECKPOINTS, CONFIG, LAST, last_checkpoints

log = logging.getLogger("seqrec.resume")

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


def resumable(key: str) -> bool:
    """Whether a resumed sitting may change config key ``key`` (one of ``RESUMABLE_KEYS`` or inside one)."""
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE_KEYS)


def config_differences(run_dir: Path, config: Namespace) -> list[str]:
    """How the config resolved now differs from the one ``run_dir`` ran with (``RESUMABLE_KEYS`` aside)."""
    saved = run_dir / CONFIG
    if not saved.is_file():
        return [f"{saved} is missing"]
    try:
        before = parse(["--config", str(saved)])
    except (Exception, SystemExit) as error:  # noqa: BLE001 (an old or damaged config.yaml is a difference)
        return [f"its config.yaml no longer parses ({' '.join(str(error).split())[:200]})"]
    old, new = dict(config_leaves(before)), dict(config_leaves(config))
    keys = sorted(k for k in set(old) | set(new) if not resumable(k) and old.get(k) != new.get(k))
    return [f"{flag_name(k)}: {old.get(k)!r} in the run, {new.get(k)!r} now" for k in keys]


def resolve_last_checkpoint(trainer_cfg: Namespace) -> str | None:
    """``last.ckpt`` of the newest run of this experiment (by that file's time), or None when there is none."""
    found = last_checkpoints(run_base(trainer_cfg))
    return str(found[0]) if found else None


def run_of(checkpoint: Path, base: Path) -> Path | None:
    """The run directory (``<base>/version_N``) holding ``checkpoint`` in its checkpoints/, else None."""
    run_dir = checkpoint.parent.parent
    if checkpoint.parent.name == CHECKPOINTS and run_dir.parent.resolve() == base.resolve():
        return run_dir
    return None


def pick_hint(base: Path, config: Namespace) -> str:
    """The runs of ``base`` that have a last.ckpt, each with whether its config matches, and how to pick one."""
    described = []
    for path in last_checkpoints(base)[:8]:
        run_dir = path.parent.parent
        diff = config_differences(run_dir, config)
        described.append(f"{run_dir.name} ({'same config' if not diff else 'differs in ' + ', '.join(d.split(':')[0] for d in diff[:3])})")
    return (f"runs with a last.ckpt, newest first: {'; '.join(described)}. Continue one with --ckpt_path "
            f"{base}/version_N (add --config {base}/version_N/config.yaml to continue it under its own config), "
            "or leave out --ckpt_path to start a new run")


def logger_version(config: Namespace) -> Any:
    """The run logger's configured version (None: the next free one), or "none" without a configurable logger."""
    logger = config.trainer.get("logger")
    if isinstance(logger, Namespace) and "init_args" in logger:
        return logger.init_args.get("version")
    return "none"


def resolve_resume(config: Namespace) -> None:
    """``--ckpt_path``: verify the checkpoint and the config, then point the logger at the run it continues.

    Runs before anything is built (``seqrec.build.build(adjust=...)``): a checkpoint that does not load or a
    config that differs from the run's is a one-line error and nothing in the run directory is touched.
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
                f"{'; ...' if len(diff) > 4 else ''}); {pick_hint(base, config)}"
            )
    else:
        path = Path(value)
        if path.is_dir():
            checkpoint = path / CHECKPOINTS / LAST if (path / CHECKPOINTS).is_dir() else path / LAST
            if not checkpoint.is_file():
                raise FileNotFoundError(f"--ckpt_path {path}: no last.ckpt in it (expected a run directory "
                                        "runs/<experiment>/version_N or a checkpoint file)")
            run_dir = checkpoint.parent.parent
        else:
            checkpoint = path
            run_dir = run_of(path, run_base(config.trainer)) if path.is_file() and logger_version(config) != "none" else None
        if run_dir is not None:
            diff = config_differences(run_dir, config)
            if diff:
                raise ValueError(
                    f"--ckpt_path {value}: {run_dir} ran with another config ({'; '.join(diff[:4])}"
                    f"{'; ...' if len(diff) > 4 else ''}); continue it under its own config with --config "
                    f"{run_dir}/config.yaml --ckpt_path {run_dir}, or leave out --ckpt_path to start a new run"
                )
    check_checkpoint(checkpoint)
    if run_dir is not None and logger_version(config) != "none":
        logger = config.trainer.logger
        if run_dir.parent.resolve() != run_base(config.trainer).resolve():  # elsewhere: continue it where it is
            logger.init_args.save_dir = str(run_dir.parent.parent)
            logger.init_args.name = run_dir.parent.name
        logger.init_args.version = run_dir.name
        log.info("resuming %s from %s", run_dir, checkpoint)
    config.ckpt_path = str(checkpoint)
