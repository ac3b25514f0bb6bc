"""``python -m seqrec.fit --config X.yaml [--section.key value ...]``: fit, then test the best checkpoint.

Configs are LightningCLI YAML validated by jsonargparse: several ``--config`` files stack (later ones
override), and any key can be overridden with a dotted flag (``--trainer.max_epochs 3``,
``--data.max_len 100``). A bare name (``sasrec_ml100k.yaml`` or ``configs/sasrec_ml100k.yaml``) that
is not a file in the current directory is looked up among the configs shipped with the package.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import re
import sys
import time
from pathlib import Path

import lightning as L
import torch
from jsonargparse import ArgumentError, Namespace
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.cli import LightningCLI

from seqrec.callbacks.macs import MACsCallback
from seqrec.callbacks.memory import MemoryCallback
from seqrec.callbacks.rng import RNGStateCheckpoint
from seqrec.callbacks.throughput import ThroughputCallback
from seqrec.loggers.run_logger import RunLogger, check_logger_names

CONFIG_DIR = Path(__file__).parent / "configs"
log = logging.getLogger("seqrec.fit")


def resolve_config(name: str) -> str:
    """A config path as given if it exists, else the shipped config of that name; FileNotFoundError otherwise."""
    if Path(name).exists():
        return name
    candidates = [CONFIG_DIR / name, CONFIG_DIR / f"{name}.yaml"]
    if name.startswith("configs/"):
        candidates.insert(0, CONFIG_DIR / name[len("configs/") :])
    for candidate in candidates:
        if candidate.is_file():
            return str(candidate)
    shipped = sorted(str(p.relative_to(CONFIG_DIR)) for p in CONFIG_DIR.rglob("*.yaml"))
    raise FileNotFoundError(f"config {name!r} is neither a file nor a shipped config; shipped configs: {shipped}")


def resolve_config_args(argv: list[str]) -> list[str]:
    """Rewrite every ``--config NAME`` / ``--config=NAME`` so that NAME is an existing file."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--config" and i + 1 < len(argv):
            out += [arg, resolve_config(argv[i + 1])]
            i += 2
            continue
        if arg.startswith("--config="):
            arg = "--config=" + resolve_config(arg.split("=", 1)[1])
        out.append(arg)
        i += 1
    return out


def default_threads() -> int:
    """Cores this process may run on (affinity-aware); torch's intra-op pool should not exceed them."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


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


def check_strategy(trainer_cfg: Namespace) -> None:
    """Fail at start, with what to use instead, when the strategy cannot run on this machine."""
    strategy = trainer_cfg.get("strategy")
    text = str(strategy.get("class_path", "") if isinstance(strategy, Namespace) else strategy or "")
    if "deepspeed" not in text.lower():
        return
    if not torch.cuda.is_available() or str(trainer_cfg.get("accelerator", "auto")).lower() == "cpu":
        raise ValueError(
            f"DeepSpeed (trainer.strategy={text!r}) needs CUDA GPUs, and this run has none "
            f"(torch.cuda.is_available() is {torch.cuda.is_available()}, accelerator="
            f"{trainer_cfg.get('accelerator', 'auto')!r}). On CPU use several processes with "
            "--config configs/trainer/ddp.yaml --trainer.accelerator cpu --trainer.devices N, or one process "
            "without a trainer/*.yaml config."
        )
    try:
        import deepspeed  # noqa: F401
    except ImportError as error:
        raise ValueError(
            f"trainer.strategy={text!r} needs the deepspeed package: pip install 'seqrec[deepspeed]'"
        ) from error


def name_run_logger(config: Namespace) -> None:
    """Check a RunLogger's backend names; name it after the first config file (``sasrec_ml100k``), else "run"."""
    logger = config.trainer.get("logger")
    if not isinstance(logger, Namespace) or not str(logger.get("class_path", "")).endswith(".RunLogger"):
        return
    check_logger_names(logger.init_args.get("loggers"))
    if logger.init_args.get("name") is None:
        files = [str(p) for p in (config.get("config") or []) if p is not None]
        logger.init_args.name = Path(files[0]).stem if files else "run"


def explain_parse_error(message: str) -> str:
    """Add the accepted argument names of the class named in a jsonargparse error about an unknown key."""
    unknown = re.findall(r"(?:Option|Key) '([^']+)' is not (?:accepted|expected)", message)
    classes = re.findall(r"given class_path '([^']+)'", message)
    if not unknown or not classes:
        return message
    module_name, _, cls_name = classes[-1].rpartition(".")
    try:
        cls = getattr(__import__(module_name, fromlist=[cls_name]), cls_name)
        valid = [n for n in inspect.signature(cls.__init__).parameters if n not in ("self", "args", "kwargs")]
    except (ImportError, AttributeError, ValueError):
        return message
    return f"unknown key {unknown[-1]!r} for {classes[-1]}; valid keys: {', '.join(valid)}"


class SeqRecCLI(LightningCLI):
    """LightningCLI with the data's catalogue size and length linked into the model."""

    def add_arguments_to_parser(self, parser) -> None:  # noqa: ANN001 (jsonargparse parser)
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume fit from this checkpoint ('last' for the run's last one)")
        parser.add_argument("--threads", type=int | None, default=None, help="torch intra-op threads (default: the cores available)")
        parser.add_argument("--test", type=bool, default=True, help="test the best checkpoint after fitting")
        parser.add_argument("--validate_first", type=bool, default=False, help="validate once before training (LRURec's step-0 validation)")
        parser.link_arguments("data.num_items", "model.init_args.model.init_args.num_items", apply_on="instantiate")
        # item-feature models (MLP4Rec): names, kinds and vocabulary sizes from the data; skipped by jsonargparse
        # when the model has no feature_spec or the datamodule no item_feature_spec
        parser.link_arguments(
            "data.item_feature_spec", "model.init_args.model.init_args.feature_spec", apply_on="instantiate"
        )
        # every run reports what it cost (--macs.*, --memory.*, --throughput.*) and logs to its run directory
        parser.add_lightning_class_args(MACsCallback, "macs")
        parser.add_lightning_class_args(MemoryCallback, "memory")
        parser.add_lightning_class_args(ThroughputCallback, "throughput")
        parser.set_defaults({"trainer.logger": {"class_path": f"{RunLogger.__module__}.RunLogger", "init_args": {"save_dir": "runs"}}})

    def parse_arguments(self, parser, args) -> None:  # noqa: ANN001 (jsonargparse parser)
        """Parse; on an unknown key, name it and list the keys the class at that place accepts."""
        parser.exit_on_error = False
        try:
            self.config = parser.parse_args(args)
        except ArgumentError as error:
            print(f"error: {explain_parse_error(str(error))}\n(python -m seqrec.fit --help lists every key)", file=sys.stderr)
            raise SystemExit(2) from None

    def before_instantiate_classes(self) -> None:
        """Set threads; resolve ``--ckpt_path last``; copy ``data.max_len`` into models that take ``max_len``."""
        config = self.config
        torch.set_num_threads(config.threads or default_threads())
        check_strategy(config.trainer)
        name_run_logger(config)
        if config.ckpt_path == "last":
            config.ckpt_path = resolve_last_checkpoint(config.trainer)
        model_cfg = config.model.init_args.get("model")
        if isinstance(model_cfg, Namespace) and model_cfg.get("class_path"):
            module_name, _, cls_name = model_cfg.class_path.rpartition(".")
            cls = getattr(__import__(module_name, fromlist=[cls_name]), cls_name)
            if "max_len" in inspect.signature(cls.__init__).parameters:
                model_cfg.init_args.max_len = config.data.init_args.max_len


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Entry point: parse, fit, test the best checkpoint, print and save the test metrics."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = resolve_config_args(list(sys.argv[1:] if argv is None else argv))
    cli = SeqRecCLI(
        L.LightningModule,
        L.LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        run=False,
        args=args,
        seed_everything_default=42,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"allow_abbrev": False},  # a typo such as --trainer.max_epoch must fail, not match a prefix
    )
    trainer, task, data = cli.trainer, cli.model, cli.datamodule
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


def write_json(path: Path, payload: dict) -> None:
    """Write JSON atomically (temp file, then rename)."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1, sort_keys=True))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
