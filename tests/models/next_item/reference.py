"""Parity with published reference code: import it from a checkout named by an environment variable (never
vendored), read LRURec's ML-1M test queries, and compare logits and target ranks with ours."""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import Tensor

from seqrec.models.base import SequenceRecommender
from seqrec.tasks.next_item import NextItemTask


def checkout(variable: str, repository: str) -> Path:
    """The folder named by ``variable`` (a checkout of ``repository``); the test is skipped without it."""
    value = os.environ.get(variable)
    if not value or not Path(value).is_dir():
        pytest.skip(f"set {variable} to a checkout of github.com/{repository} to run this parity test")
    return Path(value)


def import_module(root: Path, relative: str, siblings: tuple[str, ...] = ()) -> ModuleType:
    """Import ``root/relative`` under a private name; ``siblings`` are top-level modules of ``root`` it imports by
    bare name (``from modules import ...``): importable while it loads, then removed from ``sys.modules``."""
    path = root / relative
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: is {root} a checkout of the reference repository?")
    saved = {name: sys.modules.pop(name) for name in siblings if name in sys.modules}
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.spec_from_file_location(f"_reference_{path.stem}_{abs(hash(path))}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(root))
        for name in siblings:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@dataclass
class Queries:
    """LRURec's ML-1M test queries: items (Q, 200) left-padded, target (Q,)."""

    items: Tensor
    target: Tensor
    num_items: int


def ml1m_test_queries(shared_data: Path, max_len: int = 200) -> Queries:
    """Every test query of LRURec's ML-1M file (6,040 users), as the evaluation feeds them."""
    from seqrec.data.preprocess import Preprocessing
    from seqrec.data.sources.sasrec_text import SASRecText
    from seqrec.datamodules.next_item import NextItemDataModule

    source = SASRecText(name="ml-1m", path=str(shared_data / "lrurec" / "ml-1m.txt.gz"))
    data = NextItemDataModule(source, Preprocessing(sort_by="time"), max_len=max_len)
    data.setup("test")
    test = data.datasets["test"]
    rows = [test[i] for i in range(len(test))]
    return Queries(torch.stack([r["items"] for r in rows]), torch.stack([r["target"] for r in rows]), data.num_items)


def masked_ranks(logits: Tensor, items: Tensor, target: Tensor) -> Tensor:
    """1 + #{j ∉ {0, target} ∪ history : logit_j > logit_target} from full logits (B, N+1), as our evaluation ranks."""
    scores = logits.clone()
    target_scores = scores.gather(1, target.unsqueeze(1)).squeeze(1)  # (B,)
    scores.scatter_(1, items, -math.inf)  # the history (and column 0, the padding) can never outrank the target
    scores[:, 0] = -math.inf
    return 1 + (scores > target_scores.unsqueeze(1)).sum(dim=1)


@dataclass
class Parity:
    """Logit and rank agreement of ours against the reference over a set of queries."""

    max_abs_logit_diff: float
    logit_scale: float
    equal_ranks: int
    queries: int

    def line(self) -> str:
        """One printable line of the figures."""
        return (f"max |Δlogit| {self.max_abs_logit_diff:.3g} (logits up to {self.logit_scale:.3g}); equal ranks "
                f"{self.equal_ranks}/{self.queries}")


def compare(model: SequenceRecommender, reference_logits: Tensor, queries: Queries, batch: int = 512) -> Parity:
    """Our logits (``query_hidden`` scored against the item table) and ranks (``NextItemTask.ranks``) against
    the reference's full logits (Q, N+1), query by query."""
    task = NextItemTask(model).eval()
    worst, scale, equal = 0.0, 0.0, 0
    with torch.no_grad():
        for start in range(0, len(queries.target), batch):
            items = queries.items[start:start + batch]
            target = queries.target[start:start + batch]
            ours = model.score(model.query_hidden(items))  # (b, N+1)
            theirs = reference_logits[start:start + batch]
            worst = max(worst, float((ours[:, 1:] - theirs[:, 1:]).abs().max()))
            scale = max(scale, float(theirs[:, 1:].abs().max()))
            ranks = task.ranks({"items": items, "target": target})
            equal += int((ranks == masked_ranks(theirs, items, target)).sum())
    return Parity(worst, scale, equal, len(queries.target))
