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
import sys
from pathlib import Path

import lightning as L
import torch
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningCLI

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


class SeqRecCLI(LightningCLI):
    """LightningCLI with the data's catalogue size and length linked into the model."""

    def add_arguments_to_parser(self, parser) -> None:  # noqa: ANN001 (jsonargparse parser)
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume fit from this checkpoint ('last' for the run's last one)")
        parser.add_argument("--threads", type=int | None, default=None, help="torch intra-op threads (default: the cores available)")
        parser.add_argument("--test", type=bool, default=True, help="test the best checkpoint after fitting")
        parser.link_arguments("data.num_items", "model.init_args.model.init_args.num_items", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        """Set threads; copy ``data.max_len`` into models whose signature has ``max_len``."""
        config = self.config
        torch.set_num_threads(config.threads or default_threads())
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
    )
    trainer, task, data = cli.trainer, cli.model, cli.datamodule
    ckpt_path = cli.config.ckpt_path
    trainer.fit(task, datamodule=data, ckpt_path=ckpt_path)
    results: dict[str, float] = {}
    if cli.config.test:
        has_best = trainer.checkpoint_callback is not None and trainer.checkpoint_callback.best_model_path
        [results] = trainer.test(task, datamodule=data, ckpt_path="best" if has_best else None)
        out_dir = Path(trainer.log_dir or trainer.default_root_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "test_metrics.json").write_text(json.dumps(results, indent=1, sort_keys=True))
        log.info("test metrics written to %s", out_dir / "test_metrics.json")
    return results


if __name__ == "__main__":
    main()
