"""The language-model task: exact chunked statistics, metrics by hand, end to end on the real LM1B held-out shard."""


import pytest
import torch

from seqrec.fit import main
from seqrec.models.next_item.evornn import EvoRNN
from seqrec.tasks.lm import LanguageModelTask


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
        "--model.net.d_model", "16",
        "--model.net.hidden_sizes", "[32]",
        "--model.net.min_hidden", "8",
        "--model.net.size_multiple", "8",
        "--macs.backend", "flop_counter",  # tracing a 127-step unrolled loop with fvcore takes seconds
        "--threads", "1",
    ])
    expected = {"test/accuracy", "test/perplexity", "test/map@20", "test/accuracy_h1", "test/perplexity_h4"}
    assert expected <= set(results)
    vocabulary = 2004  # the 2,000 most frequent training words (of 5,022 seen >= 3 times) and 4 special tokens
    # a few batches learn at least the word frequencies: far below a uniform guess over the vocabulary
    assert results["test/perplexity"] < vocabulary / 5
    assert results["test/map@20"] > 0.01 and results["test/accuracy"] > 0.01
