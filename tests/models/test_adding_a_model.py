"""Adding a next-item model is one file's worth of code: subclass ``SequenceRecommender``, set ``num_items``,
write ``forward`` and ``item_embeddings``. The model below is complete; the tests check that it fulfils the
contract the task relies on (shapes, scoring, causality, padding) and that a task trains and ranks with it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from seqrec.fit import main
from seqrec.models import base
from seqrec.models.base import SequenceRecommender


class MeanOfEmbeddings(SequenceRecommender):
    """h_t = W · (Σ_{j≤t} E[i_j]) / #{real j ≤ t}: the running mean of the item embeddings seen so far.

    Causal by construction (a cumulative sum reads positions ≤ t only); padding (id 0) adds nothing and
    does not count; tied scores s_i = h · E_i.
    """

    def __init__(self, num_items: int, d_model: int = 16) -> None:
        super().__init__()
        self.num_items = num_items
        self.item_embedding = nn.Embedding(num_items + 1, d_model, padding_idx=0)
        self.output = nn.Linear(d_model, d_model)

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded -> hidden (B, L, d); zero at padding."""
        real = (items > 0).unsqueeze(-1).to(self.item_embedding.weight.dtype)  # (B, L, 1)
        total = torch.cumsum(self.item_embedding(items) * real, dim=1)  # (B, L, d)
        count = torch.cumsum(real, dim=1).clamp_min(1.0)  # (B, L, 1)
        return self.output(total / count) * real  # (B, L, d)

    def item_embeddings(self) -> Tensor:
        """(N + 1, d) tied item table."""
        return self.item_embedding.weight


N, L, D = 30, 6, 16


def model() -> MeanOfEmbeddings:
    torch.manual_seed(0)
    return MeanOfEmbeddings(N, D).eval()


def test_forward_and_score_shapes():
    m = model()
    items = torch.tensor([[0, 0, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]])
    hidden = m(items)
    assert hidden.shape == (2, L, D)
    scores = m.score(hidden[:, -1])
    assert scores.shape == (2, N + 1)
    candidates = torch.tensor([[7, 3], [9, 1]])
    torch.testing.assert_close(m.score(hidden[:, -1], candidates), scores.gather(1, candidates))
    torch.testing.assert_close(m.score_chunk(hidden[:, -1], 5, 12), scores[:, 5:12])


def test_causal_a_later_item_never_changes_an_earlier_hidden_state():
    m = model()
    assert m.causal  # the default of SequenceRecommender; a model that reads ahead sets causal = False
    a = torch.tensor([[0, 1, 2, 3, 4, 5]])
    for t in range(1, L):
        b = a.clone()
        b[0, t] = 20
        ha, hb = m(a), m(b)
        assert torch.equal(ha[0, :t], hb[0, :t])
        assert not torch.allclose(ha[0, t], hb[0, t])


def test_padding_never_matters():
    m = model()
    short = torch.tensor([[4, 5, 6]])
    padded = torch.tensor([[0, 0, 0, 4, 5, 6]])
    torch.testing.assert_close(m(padded)[:, -3:], m(short))
    assert torch.equal(m(padded)[:, :3], torch.zeros(1, 3, D))


def test_it_declares_no_optional_capability():
    m = model()
    optional = (base.ItemFeatureConsumer, base.CountingRecommender, base.RecurrentRecommender, base.DeclaresMACs,
                base.DeclaresStateBytes, base.DeclaresKeptLengths)
    assert isinstance(m, SequenceRecommender) and not any(isinstance(m, p) for p in optional)


def test_the_task_trains_and_ranks_with_it():
    from seqrec.tasks.next_item import NextItemTask

    task = NextItemTask(model().train(), loss="ce", lr=0.05)
    items = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 7, 8, 9, 10]])
    labels = torch.tensor([[0, 2, 3, 4, 5, 6], [0, 0, 8, 9, 10, 11]])
    optimizer = task.configure_optimizers()
    losses = []
    for _ in range(20):
        loss = task.training_step({"items": items, "labels": labels}, 0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]
    task.eval()
    with torch.no_grad():
        ranks = task.ranks({"items": items, "target": torch.tensor([6, 11])})
    assert ranks.shape == (2,) and bool((ranks >= 1).all())


def test_the_new_model_trains_and_tests_through_the_cli_with_one_config(ml100k_root, tmp_path):
    """One config composes a shipped protocol with the new model's class path; nothing else is edited."""
    experiment = tmp_path / "mean_ml100k.yaml"
    experiment.write_text(
        "compose: [protocol/ml100k_full_ranking.yaml]\n"
        "model:\n  init_args:\n    model:\n"
        "      class_path: tests.models.test_adding_a_model.MeanOfEmbeddings\n"
        "      init_args:\n        d_model: 16\n"
    )
    results = main([
        "--config", str(experiment), "--data.init_args.source.init_args.root", str(ml100k_root),
        "--data.max_len", "10", "--trainer.max_epochs", "2", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--threads", "1",
    ])
    assert 0 < results["test/hr@10"] <= 1 and "cost/macs_per_sequence" in results
    assert (tmp_path / "runs" / "mean_ml100k" / "version_0" / "test_metrics.json").is_file()
