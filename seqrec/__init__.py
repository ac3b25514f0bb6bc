"""seqrec: train and evaluate sequential recommenders on PyTorch Lightning; ``seqrec.load_run`` recommends from a run.

``import seqrec`` stays light: ``load_run`` (``seqrec.api``) imports torch and Lightning on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_run"]


def __getattr__(name: str) -> Any:  # noqa: ANN401 (lazy attribute)
    """``seqrec.load_run`` and ``seqrec.TrainedRun``, imported on first access."""
    if name in ("load_run", "TrainedRun"):
        from seqrec import api

        return getattr(api, name)
    raise AttributeError(f"module 'seqrec' has no attribute {name!r}")
