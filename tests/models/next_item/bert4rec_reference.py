"""The PyTorch BERT4Rec reference beside ours: import it from a checkout, copy its weights into ours, compare.

The reference is ``model/bert.py`` (with ``model/attention.py``) of LRURec's first author's PyTorch code, github
``Yueeeeeeee/RecSys-Extraction-Attack`` (the checkout NARM's parity test reads too; ``RecSys-Substitution-Defense``
has the same model for item-id inputs); LRURec's own repository ships no BERT4Rec (PROTOCOLS.md §1.12). It is
imported at run time from the checkout named by ``$SEQREC_RECSYS_EXTRACTION_ATTACK_REPO`` (never copied into this
project) as a package of its ``model/`` folder, loading only those two files. ``parity_figures`` is what the parity
test asserts and what the closing notes quote:

    SEQREC_RECSYS_EXTRACTION_ATTACK_REPO=RecSys-Extraction-Attack SEQREC_SHARED_DATA=DIR \\
        python -m pytest tests/models/next_item/test_bert4rec.py -k parity -s
"""

from __future__ import annotations

import importlib
import re
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from seqrec.data.examples import left_pad
from seqrec.data.preprocess import Preprocessing
from seqrec.data.sources.sasrec_text import SASRecText
from seqrec.datamodules.next_item import NextItemDataModule
from seqrec.models.next_item.bert4rec import BERT4Rec
from seqrec.tasks.next_item import NextItemTask
from tests.models.next_item.reference import checkout

ENV = "SEQREC_RECSYS_EXTRACTION_ATTACK_REPO"
PACKAGE = "seqrec_reference_bert4rec"
MAX_LEN, D, HEADS, BLOCKS = 200, 64, 2, 2  # LRURec's baseline settings on ML-1M (config.py)

# reference parameter names -> ours (regex, replacement), applied in order
RENAMES = [
    (r"^embedding\.token\.weight$", "item_embedding.weight"),
    (r"^embedding\.position\.pe\.weight$", "position_embedding.weight"),
    (r"^embedding\.layer_norm\.", "embedding_layer_norm."),
    (r"^model\.transformer_blocks\.", "blocks."),
    (r"\.attention\.linear_layers\.0\.", ".attention.q_proj."),
    (r"\.attention\.linear_layers\.1\.", ".attention.k_proj."),
    (r"\.attention\.linear_layers\.2\.", ".attention.v_proj."),
    (r"\.attention\.output_linear\.", ".attention.out_proj."),
    (r"\.feed_forward\.", ".ffn."),
    (r"\.input_sublayer\.layer_norm\.", ".attention_layer_norm."),
    (r"\.output_sublayer\.layer_norm\.", ".ffn_layer_norm."),
    (r"^model\.linear\.", "head."),
    (r"^model\.bias$", "output_bias"),
]


def reference_dir() -> Path:
    """The reference checkout named by ``$SEQREC_RECSYS_EXTRACTION_ATTACK_REPO``; the calling test is skipped without it."""
    root = checkout(ENV, "Yueeeeeeee/RecSys-Extraction-Attack")
    if not (root / "model" / "bert.py").is_file():
        raise FileNotFoundError(f"{root / 'model' / 'bert.py'} not found: is {root} a checkout of the reference repository?")
    return root


def reference_module(directory: Path, module: str = "bert") -> Any:
    """The checkout's ``model/<module>.py`` as ``seqrec_reference_bert4rec.<module>`` (its ``model/__init__.py`` is
    not run; ``model/attention.py`` is imported by it as a sibling)."""
    name = f"{PACKAGE}.{module}"
    if name not in sys.modules:
        package = types.ModuleType(PACKAGE)
        package.__path__ = [str(directory / "model")]
        sys.modules[PACKAGE] = package
    return importlib.import_module(name)


def reference_model(directory: Path, num_items: int, seed: int = 0) -> torch.nn.Module:
    """The reference BERT at LRURec's settings, its LayerNorms perturbed (so a mis-mapped norm cannot pass)."""
    args = SimpleNamespace(num_items=num_items, bert_hidden_units=D, bert_max_len=MAX_LEN, bert_dropout=0.2,
                           bert_attn_dropout=0.2, bert_num_heads=HEADS, bert_head_size=None, bert_num_blocks=BLOCKS)
    torch.manual_seed(seed)
    model = reference_module(directory).BERT(args)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name:
                param.add_(0.1 * torch.randn_like(param))
    return model.eval()


def our_name(name: str) -> str:
    """The name of a reference parameter in our model."""
    for pattern, replacement in RENAMES:
        name = re.sub(pattern, replacement, name)
    return name


def ours_from(reference: torch.nn.Module, num_items: int) -> BERT4Rec:
    """A BERT4Rec holding the reference's weights (every parameter mapped, none left over)."""
    model = BERT4Rec(num_items=num_items, max_len=MAX_LEN, d_model=D, num_blocks=BLOCKS, num_heads=HEADS)
    model.load_state_dict({our_name(k): v for k, v in reference.state_dict().items()}, strict=True)
    return model.eval()


def copy_back(ours: BERT4Rec, reference: torch.nn.Module) -> None:
    """Our (trained) weights into the reference, parameter by parameter (strict)."""
    state = ours.state_dict()
    reference.load_state_dict({k: state[our_name(k)] for k in reference.state_dict()}, strict=True)


def train_ours(task: NextItemTask, data: NextItemDataModule, steps: int) -> None:
    """``steps`` cloze steps of our task (AdamW lr 1e-3, dropout on), so that the compared weights are trained ones."""
    train = data.datasets["train"]
    optimizer = torch.optim.AdamW(task.net.parameters(), lr=1e-3)
    task.train()
    with torch.enable_grad():
        for step in range(steps):
            keys = [(7, (step * 128 + i) % len(train)) for i in range(128)]
            loss = task.loss(torch.utils.data.default_collate([train[k] for k in keys]))[0]
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    task.eval()


def ml1m(shared_data: Path, cache: Path) -> NextItemDataModule:
    """LRURec's ML-1M file, in cloze mode at max_len 200 (queries of 199 events + [mask])."""
    path = shared_data / "lrurec" / "ml-1m.txt.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present under SEQREC_SHARED_DATA")
    data = NextItemDataModule(SASRecText("ml-1m", path=str(path), cache_dir=str(cache)), Preprocessing(sort_by="time"),
                              max_len=MAX_LEN, train_mode="cloze", eval_batch_size=64, cache_dir=str(cache))
    data.setup()
    return data


def reference_queries(data: NextItemDataModule) -> tuple[torch.Tensor, torch.Tensor]:
    """Test inputs as the reference's ``BERTTestDataset`` builds them, from the sequences alone: the newest
    ``max_len`` tokens of train + validation events + [mask], left-padded; and the targets. (Q, 200), (Q,)"""
    test, items, mask = data.split.test, data.sequences.items, data.num_items + 1
    rows = [left_pad(np.append(items[s:e], mask), MAX_LEN) for s, e in zip(test.start, test.stop)]
    return torch.from_numpy(np.stack(rows)), torch.from_numpy(test.target.astype(np.int64))


def reference_ranks(reference: torch.nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """LRURec's trainer's full ranking on the reference's scores: every input id (the padding and [mask] columns
    too) at -1e9, rank = 1 + items scored strictly higher than the target. (B,)"""
    scores = reference(inputs)[:, -1, :]  # (B, N + 2)
    rows = torch.arange(len(inputs))
    for column in range(inputs.shape[1]):
        scores[rows, inputs[:, column]] = -1e9
    scores[:, 0] = -1e9
    return 1 + (scores > scores[rows, targets].unsqueeze(1)).sum(dim=1)


@torch.no_grad()
def parity_figures(directory: Path, shared_data: Path, cache: Path, users: int = 6040,
                   train_steps: int = 30) -> dict[str, float]:
    """Max |logit| difference at real positions, loss differences on one masked batch, rank agreement (first
    ``users`` test queries); the weights: the reference's init, ``train_steps`` steps of ours, copied back."""
    torch.set_num_threads(1)
    data = ml1m(shared_data, cache)
    n = data.num_items
    reference = reference_model(directory, n)
    ours = ours_from(reference, n)
    task = NextItemTask(ours, metrics=["recall@10"], mask_history=True)
    train_ours(task, data, train_steps)
    copy_back(ours, reference)
    inputs, targets = reference_queries(data)
    inputs, targets = inputs[:users], targets[:users]
    # our evaluation path (the datamodule's queries, NextItemTask.ranks), keyed back to the query index
    ours_rank = torch.zeros(len(targets), dtype=torch.long)
    for batch in DataLoader(data.datasets["test"], batch_size=64):
        keep = batch["index"] < users
        if keep.any():
            chosen = {k: v[keep] for k, v in batch.items()}
            assert torch.equal(ours.with_mask(chosen["items"]), inputs[chosen["index"]])  # the same query tokens
            ours_rank[chosen["index"]] = task.ranks(chosen)
    max_diff, ref_rank = 0.0, torch.zeros_like(ours_rank)
    for first in range(0, len(targets), 64):
        x = inputs[first : first + 64]
        theirs = reference(x)  # (B, L, N + 2)
        mine = ours.score(ours(x))  # (B, L, N + 1)
        real = x > 0
        max_diff = max(max_diff, float((theirs[..., 1 : n + 1] - mine[..., 1:])[real].abs().max()))
        ref_rank[first : first + 64] = reference_ranks(reference, x.clone(), targets[first : first + 64])
    # one masked training batch (the cloze examples of epoch 0, seed 42): the same loss, dropout off on both sides
    train = data.datasets["train"]
    batch = torch.utils.data.default_collate([train[(42, i)] for i in range(128)])
    loss_ours = float(task.loss(batch)[0])
    logits = reference(batch["items"]).reshape(-1, n + 2)  # (B·L, N + 2)
    labels = batch["labels"].reshape(-1)
    loss_reference = float(F.cross_entropy(logits, labels, ignore_index=0))  # its trainer's CrossEntropyLoss
    logits[:, [0, n + 1]] = -float("inf")  # the softmax over items 1..N, as ours
    loss_same = float(F.cross_entropy(logits, labels, ignore_index=0))
    return {
        "users": float(len(targets)),
        "train_steps": float(train_steps),
        "max_abs_logit_diff": max_diff,
        "loss_ours": loss_ours,
        "loss_reference_same_softmax": loss_same,
        "loss_reference_own_softmax": loss_reference,
        "loss_diff_same_softmax": abs(loss_ours - loss_same),
        "loss_diff_reference_softmax": abs(loss_ours - loss_reference),
        "masked_positions": float((labels > 0).sum()),
        "rank_agreement": float((ours_rank == ref_rank).float().mean()),
        "max_rank_diff": float((ours_rank - ref_rank).abs().max()),
        "recall@10_ours": float((ours_rank <= 10).float().mean()),
        "recall@10_reference": float((ref_rank <= 10).float().mean()),
    }
