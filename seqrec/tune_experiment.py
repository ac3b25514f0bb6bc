"""What every trial of a ``seqrec tune`` study runs: the experiment's configs and flags, the metric its protocol
selects checkpoints by (the objective), and a trial's values as flags."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from seqrec.build import import_class, parse
from seqrec.checks import config_leaves, flag_name
from seqrec.resume import resumable
from seqrec.tune_space import cli_value


@dataclass
class Experiment:
    """What every trial of a study runs: the experiment's configs and flags, and where its runs go."""

    configs: list[str]
    overrides: list[str]
    study: str
    runs_dir: Path
    monitor: str = ""
    direction: str = "maximize"
    config: Namespace | None = field(default=None, repr=False)

    @property
    def base_args(self) -> list[str]:
        """``--config`` flags, then the command's flags."""
        return [a for c in self.configs for a in ("--config", c)] + self.overrides

    @property
    def folder(self) -> Path:
        """``<runs_dir>/tune/<study>``: the study's runs, best config, table and plots."""
        return self.runs_dir / "tune" / self.study

    def resolve(self) -> None:
        """Parse the experiment; find its monitor and direction; run each trial in one process."""
        config = quiet_parse(self.base_args)
        self.monitor, mode = monitored(config)
        self.direction = "maximize" if mode == "max" else "minimize"
        extra = one_process_flags(config)
        if extra:
            self.overrides = self.overrides + extra
            config = quiet_parse(self.base_args)
        self.config = config

    def identity(self) -> dict[str, Any]:
        """The resolved config (flags a resumed run may change aside): a study searches one experiment."""
        leaves = {flag_name(k): v for k, v in config_leaves(self.config) if not resumable(k)}
        return json.loads(json.dumps(leaves, default=str))


def monitored(config: Namespace) -> tuple[str, str]:
    """(monitor, mode) of the config's first ModelCheckpoint: the protocol's checkpoint selection."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    for callback in config.trainer.get("callbacks") or []:
        if not isinstance(callback, Namespace) or "class_path" not in callback:
            continue
        try:
            cls = import_class(callback.class_path)
        except (ImportError, AttributeError):
            continue
        if isinstance(cls, type) and issubclass(cls, ModelCheckpoint) and callback.init_args.get("monitor"):
            return callback.init_args.monitor, callback.init_args.get("mode") or "min"
    raise ValueError("tune optimises the metric the config's ModelCheckpoint monitors, and this config has no "
                     "ModelCheckpoint with a monitor: add one (as every shipped protocol does), e.g. "
                     "monitor: val/ndcg@10, mode: max")


def one_process_flags(config: Namespace) -> list[str]:
    """Flags that keep each trial in one process (``--trainer.devices 1`` for "auto"); a ValueError for more."""
    trainer = config.trainer
    devices, nodes = trainer.get("devices", "auto"), trainer.get("num_nodes", 1)
    strategy = trainer.get("strategy", "auto")
    strategy = strategy.get("class_path", "") if isinstance(strategy, Namespace) else str(strategy or "auto")
    several = (isinstance(devices, int) and (devices > 1 or devices == -1)) or (
        isinstance(devices, (list, tuple)) and len(devices) > 1) or (isinstance(devices, str) and devices not in (
            "auto", "1") and devices.strip() != "1") or (nodes or 1) > 1 or any(
        s in strategy.lower() for s in ("ddp", "deepspeed", "fsdp"))
    if several:
        raise ValueError(f"tune runs each trial in one process (trainer.devices {devices!r}, strategy {strategy!r}): "
                         "run one worker per device instead, e.g. CUDA_VISIBLE_DEVICES=0 python -m seqrec tune ... "
                         "--trainer.devices 1 and the same command with CUDA_VISIBLE_DEVICES=1, on one --storage")
    return ["--trainer.devices", "1"] if devices == "auto" else []


def quiet_parse(args: list[str]) -> Namespace:
    """``seqrec.build.parse`` without Lightning's "Seed set to N" line (tune parses a config many times)."""
    seed_log = logging.getLogger("lightning.fabric.utilities.seed")
    level = seed_log.level
    seed_log.setLevel(logging.WARNING)
    try:
        return parse(args)
    finally:
        seed_log.setLevel(level)


def param_args(params: dict[str, Any]) -> list[str]:
    """A trial's values as dotted flags."""
    return [a for key, value in params.items() for a in (f"--{key}", cli_value(value))]


def curve_unit(exp: Experiment) -> str:
    """Where the validation curve's points lie: "global step" (validation every n steps) or "epoch"."""
    steps = exp.config is not None and exp.config.trainer.get("check_val_every_n_epoch") is None
    return "global step" if steps else "epoch"
