"""The language-model task: exact chunked statistics, metrics by hand, end to end on the real LM1B held-out shard."""

import math

import pytest
import torch
import torch.nn.functional as F

from seqrec.fit import main
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.tasks.lm import LanguageModelMetrics, LanguageModelTask, vocabulary_statistics


def test_chunked_statistics_equal_the_full_softmax():
    torch.manual_seed(0)
    model = EvoRNN(num_items=37, max_len=8, d_model=6, dropout=0.0)
    hidden = torch.randn(10, 6)
    target = torch.randint(1, 38, (10,))
    nll, ranks = vocabulary_statistics(model, hidden, target, chunk_size=5)
    logits = model.score(hidden)
    logits[:, 0] = -math.inf
    torch.testing.assert_close(nll, F.cross_entropy(logits, target, reduction="none"))
    target_scores = logits.gather(1, target[:, None])
    assert ranks.tolist() == (1 + (logits > target_scores).sum(1)).tolist()


def test_metrics_by_hand():
    metric = LanguageModelMetrics(num_targets=2)
    metric.update(torch.tensor([[1.0, 2.0], [3.0, 0.5]]), torch.tensor([[1, 4], [1, 1]]))
    metric.update(torch.tensor([[0.0, 1.0]]), torch.tensor([[2, 1]]))
    out = metric.compute()
    assert out["accuracy"].item() == pytest.approx(4 / 6)
    assert out["perplexity"].item() == pytest.approx(math.exp(7.5 / 6))
    assert out["accuracy_h1"].item() == pytest.approx(2 / 3) and out["accuracy_h2"].item() == pytest.approx(2 / 3)
    assert out["perplexity_h1"].item() == pytest.approx(math.exp(4 / 3))


def test_evaluation_windows_must_label_their_last_positions():
    task = LanguageModelTask(EvoRNN(num_items=9, max_len=6, d_model=4), num_targets=2)
    batch = {"items": torch.tensor([[4, 5, 6, 7, 3, 3]]), "labels": torch.tensor([[0, 0, 0, 8, 9, 5]])}
    with pytest.raises(ValueError, match="last 2 positions"):
        task.target_statistics(batch)


def test_end_to_end_on_the_real_heldout_shard(shared_data, tmp_path):
    shard = shared_data / "lm1b" / "news.en.heldout-00000-of-00050.gz"
    results = main([
        "--config", "evornn_lm1b.yaml",
        "--data.init_args.source.init_args.path", str(shard),
        "--data.init_args.batch_size", "16",
        "--data.init_args.max_vocab", "2000",  # keeps full-softmax CE over 16 × 127 positions quick on a CPU
        "--trainer.max_epochs", "1",
        "--trainer.limit_train_batches", "30",
        "--trainer.limit_val_batches", "2",
        "--trainer.val_check_interval", "null",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path),
        "--trainer.default_root_dir", str(tmp_path),
        "--model.init_args.lr", "0.01",
        "--model.init_args.model.init_args.d_model", "16",
        "--model.init_args.model.init_args.hidden_sizes", "[32]",
        "--model.init_args.model.init_args.min_hidden", "8",
        "--model.init_args.model.init_args.size_multiple", "8",
        "--macs.backend", "flop_counter",  # tracing a 127-step unrolled loop with fvcore takes seconds
        "--threads", "1",
    ])
    expected = {"test/accuracy", "test/perplexity", "test/map@20", "test/accuracy_h1", "test/perplexity_h4"}
    assert expected <= set(results)
    vocabulary = 2004  # the 2,000 most frequent training words (of 5,022 seen >= 3 times) and 4 special tokens
    # a few batches learn at least the word frequencies: far below a uniform guess over the vocabulary
    assert results["test/perplexity"] < vocabulary / 5
    assert results["test/map@20"] > 0.01 and results["test/accuracy"] > 0.01
