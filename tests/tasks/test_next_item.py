"""End-to-end: the real CLI and the shipped default config, shrunk onto a MovieLens-format fixture."""

import functools
import json
from collections.abc import Callable

import pytest
import torch

from seqrec.fit import main
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.next_item import NextItemTask


@pytest.fixture
def fit_args(tiny_fit) -> Callable[..., list[str]]:
    """``tiny_fit`` (tests/conftest.py) long enough for SASRec to learn the fixture's next-id walk."""
    return functools.partial(tiny_fit, max_len=20, batch_size=32, d_model=32, max_epochs=30, val_every=5)


@pytest.mark.slow  # a long fit: 30 epochs
def test_end_to_end_fit_beats_popularity(fit_args, tmp_path):
    sasrec = main(fit_args(tmp_path / "sasrec"))
    popularity = main(
        fit_args(tmp_path / "pop", "--model.net", "seqrec.models.next_item.popularity.Popularity",
                 "--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1")
    )
    assert set(sasrec) >= {"test/hr@10", "test/ndcg@10", "test/mrr@10", "test/hr@20", "test/ndcg@20", "test/map@20"}
    # the fixture's users mostly step to the next item id: a sequence model must learn that
    assert sasrec["test/ndcg@10"] > 2 * popularity["test/ndcg@10"]
    written = json.loads(next((tmp_path / "sasrec").rglob("test_metrics.json")).read_text())
    assert written == pytest.approx(sasrec)


def test_unknown_config_key_names_the_key(fit_args, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(fit_args(tmp_path, "--data.init_args.max_lenn", "5"))
    err = capsys.readouterr().err
    assert "unknown key 'max_lenn'" in err and "valid keys:" in err and "max_len," in err


def test_abbreviated_keys_are_rejected(fit_args, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(fit_args(tmp_path, "--trainer.max_epoch", "5"))  # a prefix of max_epochs
    assert "unrecognized arguments: --trainer.max_epoch" in capsys.readouterr().err


def test_vocabulary_mismatch_is_a_clear_error():
    task = NextItemTask(SASRec(num_items=5, max_len=4, d_model=8))
    batch = {"items": torch.tensor([[0, 1, 2, 9]]), "labels": torch.tensor([[1, 2, 9, 3]])}
    with pytest.raises(ValueError, match="item id out of range.*0..5"):
        task.training_step(batch, 0)


def test_nan_loss_stops_with_a_clear_error():
    model = SASRec(num_items=5, max_len=4, d_model=8)
    with torch.no_grad():
        model.item_embedding.weight.fill_(float("nan"))
    task = NextItemTask(model)
    batch = {"items": torch.tensor([[0, 1, 2, 3]]), "labels": torch.tensor([[1, 2, 3, 4]])}
    with pytest.raises(FloatingPointError, match="lower the learning rate"):
        task.training_step(batch, 0)


def test_prefix_batches_compute_only_the_newest_position():
    """One label per row at the newest position: the loss reads ``query_hidden`` (for NARM O(L·H) instead of the
    O(L²·H) attention at every position) and equals the loss over ``forward``'s last column."""
    from seqrec.models.next_item.narm import NARM

    torch.manual_seed(0)
    model = NARM(20, d_model=8, embedding_dropout=0.0, output_dropout=0.0)
    task = NextItemTask(model, ce_chunk_rows=None)
    items = torch.randint(1, 21, (4, 9))
    items[1, :5] = 0
    labels = torch.zeros_like(items)
    labels[:, -1] = torch.tensor([3, 0, 7, 9])  # a row without a label is left out
    calls = []
    model.register_forward_hook(lambda *args: calls.append("forward"))
    loss, count = task.loss({"items": items, "labels": labels})
    assert calls == [] and count == 3
    with torch.no_grad():
        logits = model.score(model(items)[[0, 2, 3], -1])
    logits[:, 0] = float("-inf")
    expected = torch.nn.functional.cross_entropy(logits, torch.tensor([3, 7, 9]))
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-5, atol=1e-6)


# --- the cloze objective (BERT4Rec) ---


def _cloze_batch() -> tuple[torch.Tensor, torch.Tensor]:
    mask = 31  # num_items + 1
    items = torch.tensor([[0, 0, 3, mask, 5, mask], [1, mask, 3, 4, 7, 6]])
    labels = torch.tensor([[0, 0, 0, 4, 0, 6], [0, 2, 0, 0, 5, 0]])  # position 4 of row 1: a replaced item
    return items, labels


@pytest.mark.parametrize("chunk", [None, 2])
def test_cloze_loss_is_the_item_softmax_at_the_masked_positions_only(chunk):
    from seqrec.models.next_item.bert4rec import BERT4Rec

    torch.manual_seed(0)
    model = BERT4Rec(num_items=30, max_len=6, d_model=8, num_heads=2).eval()
    task = NextItemTask(model, ce_chunk_rows=chunk)
    items, labels = _cloze_batch()
    loss, count = task.loss({"items": items, "labels": labels})
    logits = model.score(model(items))  # (B, L, N + 1): no [mask] column
    logits[..., 0] = -float("inf")
    expected = torch.nn.functional.cross_entropy(logits[labels > 0], labels[labels > 0])
    assert count == 4 and torch.allclose(loss, expected, atol=1e-6)
    last = torch.zeros_like(labels)
    last[:, -1] = torch.tensor([6, 6])  # masked at the newest position only: still read from forward, not the query
    only_last, _ = task.loss({"items": items, "labels": last})
    assert torch.allclose(only_last, torch.nn.functional.cross_entropy(logits[:, -1], last[:, -1]), atol=1e-6)
    nothing, none = task.loss({"items": items, "labels": torch.zeros_like(labels)})  # a batch that masked nothing
    assert none == 0 and float(nothing) == 0.0
    nothing.backward()  # a step without a labelled position is a no-op, not a NaN


def test_a_mask_id_is_a_model_input_never_a_label():
    from seqrec.models.next_item.bert4rec import BERT4Rec

    bert = NextItemTask(BERT4Rec(num_items=30, max_len=6, d_model=8))
    items, labels = _cloze_batch()
    with pytest.raises(ValueError, match="out of range"):  # a [mask] id is an input only, never a label
        bert.loss({"items": items, "labels": items})


@pytest.mark.slow  # a long fit: 100 epochs
def test_bert4rec_trained_by_the_cloze_task_beats_popularity(fit_args, tmp_path):
    # the cloze task labels a fifth of the positions: BERT4Rec needs many more steps than SASRec (batch 8, not 32;
    # lr 3e-3: at 1e-3 it needs 200 epochs for NDCG@10 .42 on this fixture, at 3e-3 100 epochs give .61)
    bert = main(fit_args(tmp_path / "bert", "--model.net",
                         "seqrec.models.next_item.bert4rec.BERT4Rec", "--data.init_args.train_mode", "cloze",
                         "--model.net.num_heads", "2", "--model.net.dropout",
                         "0.1", "--model.net.attention_dropout", "0.1",
                         "--data.init_args.batch_size", "8", "--trainer.max_epochs", "100", "--model.init_args.lr", "3e-3",
                         "--trainer.check_val_every_n_epoch", "20"))
    popularity = main(
        fit_args(tmp_path / "pop", "--model.net", "seqrec.models.next_item.popularity.Popularity",
                 "--trainer.max_epochs", "1", "--trainer.check_val_every_n_epoch", "1")
    )
    assert bert["test/ndcg@10"] > 2 * popularity["test/ndcg@10"], (bert, popularity)
