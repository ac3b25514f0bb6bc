"""Values checked when a config is parsed, before any data is loaded or any run directory exists.

``check_values``: sizes, learning rates and fractions by key name wherever the key sits, ``@k`` against the
candidate set of sampled evaluation, the monitored metric among the logged ones; ``check_strategy``: a
strategy this machine cannot run (DeepSpeed without CUDA). Each failure is a ValueError naming the flag and
the accepted values. ``check_catalogue``: ``@k`` against the catalogue in full ranking, the one check that needs
the data (its item count), run by ``fit`` and ``test`` as soon as the data is loaded, before any run directory.
"""

from __future__ import annotations

import re
from typing import Any

import torch
from jsonargparse import Namespace


def check_strategy(trainer_cfg: Namespace) -> None:
    """Fail at start, with what to use instead, when the strategy cannot run on this machine."""
    strategy = trainer_cfg.get("strategy")
    text = str(strategy.get("class_path", "") if isinstance(strategy, Namespace) else strategy or "")
    if "deepspeed" not in text.lower():
        return
    if not torch.cuda.is_available() or str(trainer_cfg.get("accelerator", "auto")).lower() == "cpu":
        raise ValueError(
            f"DeepSpeed (trainer.strategy={text!r}) needs CUDA GPUs, and this run has none: on CPU use several "
            "processes with --config configs/trainer/ddp.yaml --trainer.accelerator cpu --trainer.devices N"
        )
    try:
        import deepspeed  # noqa: F401
    except ImportError:
        raise ValueError(f"trainer.strategy={text!r} needs the deepspeed package: pip install 'seqrec[deepspeed]'") from None


# value rules by key name, wherever the key sits (data.init_args.batch_size, model.init_args.net.init_args.d_model)
POSITIVE_INTS = ("max_len", "batch_size", "eval_batch_size", "d_model", "num_blocks", "num_heads", "num_layers",
                 "eval_negatives", "train_negatives", "accumulate_grad_batches")
POSITIVE = ("lr",)
NON_NEGATIVE = ("weight_decay", "num_workers", "gradient_clip_val", "patience")
FRACTIONS = ("dropout", "attention_dropout")  # in [0, 1)
_RANKING = re.compile(r"^(?P<kind>[a-z]+)@(?P<k>\d+)$")


def config_leaves(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) of every leaf of a config (Namespace, dict, list)."""
    if isinstance(value, Namespace):
        value = value.as_dict()
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            out += config_leaves(item, f"{prefix}{key}.")
        return out
    if isinstance(value, list):
        out = []
        for i, item in enumerate(value):
            out += config_leaves(item, f"{prefix}{i}.")
        return out
    return [(prefix.rstrip("."), value)]


def flag_name(key: str) -> str:
    """The short dotted flag of a config key (``data.init_args.batch_size`` -> ``data.batch_size``)."""
    return key.replace(".init_args.", ".")


def check_values(config: Namespace) -> None:
    """ValueError naming the flag, the value and what is accepted, for values no run could use.

    Checked by key name anywhere in the config: ``POSITIVE_INTS`` >= 1, ``POSITIVE`` > 0, ``NON_NEGATIVE``
    >= 0, ``FRACTIONS`` in [0, 1); plus the metrics (``check_metrics``). The data's keys first: a value linked from
    the data into the model (``max_len``) is named by the flag that set it.
    """
    for key, value in sorted(config_leaves(config), key=lambda leaf: not leaf[0].startswith("data.")):
        name = key.rsplit(".", 1)[-1]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if name in POSITIVE_INTS and (value < 1 or value != int(value)):
            problem = "a positive integer"
        elif name in POSITIVE and not value > 0:
            problem = "a positive number"
        elif name in NON_NEGATIVE and value < 0:
            problem = "a number >= 0"
        elif name in FRACTIONS and not 0 <= value < 1:
            problem = "a fraction in [0, 1)"
        else:
            continue
        raise ValueError(f"--{flag_name(key)} {value}: must be {problem}")
    check_metrics(config)


def ranking_metrics(config: Namespace) -> list[str] | None:
    """The task's ``model.metrics`` (None when the config has none)."""
    model = config.get("model")
    metrics = model.init_args.get("metrics") if isinstance(model, Namespace) and "init_args" in model else None
    return metrics if isinstance(metrics, list) and all(isinstance(m, str) for m in metrics) else None


def eval_negatives(config: Namespace) -> int | None:
    """``data.eval_negatives`` (None: full ranking, or a datamodule without it)."""
    data = config.get("data")
    negatives = data.init_args.get("eval_negatives") if isinstance(data, Namespace) and "init_args" in data else None
    return negatives if isinstance(negatives, int) and not isinstance(negatives, bool) else None


def above(metrics: list[str], limit: int) -> list[str]:
    """The ranking metrics ``name@k`` of ``metrics`` with k > limit."""
    return [m for m in metrics if (match := _RANKING.match(m)) and int(match["k"]) > limit]


def check_catalogue(config: Namespace, num_items: int | None) -> None:
    """Full ranking: ``@k`` at most the catalogue's ``num_items`` (a larger k puts every item in the top k)."""
    metrics = ranking_metrics(config)
    if metrics is None or num_items is None or eval_negatives(config) is not None:
        return
    too_big = above(metrics, num_items)
    if too_big:
        raise ValueError(
            f"--model.metrics {too_big}: k larger than the catalogue of {num_items:,} items (full ranking) makes every "
            f"query a hit; use k <= {num_items:,}"
        )


def check_metrics(config: Namespace) -> None:
    """Ranking metrics: ``@k`` at most the candidates of sampled evaluation; monitored metrics among those logged."""
    metrics = ranking_metrics(config)
    if metrics is None:
        return
    negatives = eval_negatives(config)
    if negatives is not None:
        candidates = negatives + 1
        too_big = above(metrics, candidates)
        if too_big:
            raise ValueError(
                f"--model.metrics {too_big}: k larger than the {candidates} candidates of sampled evaluation "
                f"(the target + data.eval_negatives {negatives}) makes every query a hit; use k <= {candidates}"
            )
    logged = {f"{split}/{m}" for m in metrics for split in ("val", "test")}
    for i, callback in enumerate(config.trainer.get("callbacks") or []):
        if not isinstance(callback, Namespace) or "init_args" not in callback:
            continue
        monitor = callback.init_args.get("monitor")
        if isinstance(monitor, str) and _RANKING.match(monitor.partition("/")[2]) and monitor not in logged:
            kind = str(callback.get("class_path", "")).rsplit(".", 1)[-1]
            raise ValueError(
                f"{kind} (trainer.callbacks[{i}]) monitors {monitor!r}, which --model.metrics {metrics} does not "
                f"log: add {monitor.partition('/')[2]!r} to the metrics or set its monitor to one of "
                f"{sorted(m for m in logged if m.startswith('val/'))}"
            )
