"""Tiny trained runs for the serving tests (fixtures in the real input formats, one short fit each).

- ``lru`` / ``sasrec``: ``lru_interactions.yaml`` / ``sasrec_interactions.yaml`` on a CSV of text ids (``alice``,
  ``m7``), max_len 50 (every history fits the window: served equals offline exactly);
- ``bert4rec``: the SASRec config with BERT4Rec and cloze training (queries of 49 events + [mask]);
- ``ctr``: ``ctr_transformer_ml1m.yaml`` on a SASRec-format ``user item`` text file (integer ids), max_len 8, so
  histories (20 events) slide past the window.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from seqrec.__main__ import main
from tests.data.sources.test_interactions_file import write_events

SMALL = ["--trainer.max_epochs", "1", "--threads", "1", "--trainer.enable_progress_bar", "false",
         "--trainer.logger.init_args.loggers", "[csv]", "--model.net.d_model", "16"]
CONFIGS = {
    "lru": ("lru_interactions.yaml", "events.csv", ["--data.init_args.max_len", "50"]),
    "sasrec": ("sasrec_interactions.yaml", "events.csv", ["--data.init_args.max_len", "50"]),
    "bert4rec": ("sasrec_interactions.yaml", "events.csv", [
        "--data.init_args.max_len", "50", "--model.net", "seqrec.models.next_item.bert4rec.BERT4Rec",
        "--data.init_args.train_mode", "cloze", "--trainer.logger.init_args.name", "bert4rec_interactions"]),
    "ctr": ("ctr_transformer_ml1m.yaml", "pairs.txt", ["--data.init_args.max_len", "8", "--data.init_args.batch_size", "16",
                                                       "--model.net.num_layers", "2"]),
}


def write_pairs(path: Path, num_users: int = 30, num_items: int = 40, length: int = 20, seed: int = 1) -> None:
    """SASRec's ``user item`` lines (ids from 1, grouped by user in time order): a ring walk without repeats."""
    rng = np.random.default_rng(seed)
    lines = []
    for user in range(1, num_users + 1):
        item, seen = int(rng.integers(num_items)), set()
        for _ in range(length):
            while item in seen:
                item = (item + 1) % num_items
            seen.add(item)
            lines.append(f"{user} {item + 1}")
            item = (item + 1) % num_items if rng.random() < 0.85 else int(rng.integers(num_items))
    path.write_text("\n".join(lines) + "\n")


def train(root: Path, name: str) -> Path:
    """Fit the named tiny run under ``root`` (data written there); returns its run directory."""
    config, data, extra = CONFIGS[name]
    root.mkdir(parents=True, exist_ok=True)
    if not (root / "events.csv").exists():
        write_events(root / "events.csv", columns=("user", "item", "timestamp"))
        write_pairs(root / "pairs.txt")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        main(["fit", "--config", config, "--data.init_args.source.init_args.path", str(root / data), *SMALL, *extra])
    finally:
        os.chdir(cwd)
    named = "--trainer.logger.init_args.name"
    experiment = extra[extra.index(named) + 1] if named in extra else config.removesuffix(".yaml")
    return max((root / "runs" / experiment).glob("version_*"))
