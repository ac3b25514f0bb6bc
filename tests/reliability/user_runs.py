"""Tiny runs trained the way a user trains them: from a project folder, with a relative ``--data.source.path`` and
the default ``runs/`` folder (``python -m seqrec fit --config lru_interactions.yaml --data.source.path events.csv``)."""

from __future__ import annotations

import os
from pathlib import Path

from seqrec.__main__ import main
from tests.data.sources.test_interactions_file import write_events
from tests.serve.runs import SMALL


def fit_from(project: Path, seed: int = 42, config: str = "lru_interactions.yaml") -> Path:
    """Fit a tiny run from ``project`` (events.csv written there first); returns its newest run directory."""
    project.mkdir(parents=True, exist_ok=True)
    if not (project / "events.csv").exists():
        write_events(project / "events.csv", columns=("user", "item", "timestamp"))
    cwd = os.getcwd()
    os.chdir(project)
    try:
        main(["fit", "--config", config, "--data.source.path", "events.csv", "--seed_everything", str(seed),
              "--data.init_args.max_len", "50", *SMALL])
    finally:
        os.chdir(cwd)
    experiment = config.removesuffix(".yaml")
    return max((project / "runs" / experiment).glob("version_*"), key=lambda p: int(p.name.split("_")[-1]))


def weights(run_dir_or_checkpoint: Path):  # noqa: ANN201 (a state dict)
    """The model weights of a checkpoint file."""
    import torch

    return torch.load(run_dir_or_checkpoint, map_location="cpu", weights_only=False)["state_dict"]
