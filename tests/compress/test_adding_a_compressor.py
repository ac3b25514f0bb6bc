"""Adding a compression method is one ``CompressedCTR`` subclass: say which cache entries survive each layer.

The method below keeps the *oldest* k entries of every layer (a deliberately naive baseline). It is complete:
the tests check that at a 100% budget it equals the backbone exactly, that at a smaller budget it stores k
entries per layer (so the cost callbacks count less state), and that a config trains and tests it through
the CLI with nothing else edited.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqrec.compress.base import CompressedCTR, select_per_head
from seqrec.fit import main
from seqrec.models.base import LayerCache, LayerTrace, TokenState
from seqrec.models.ctr.transformer import CTRTransformer


class OldestFirst(CompressedCTR):
    """Keep the oldest k real entries of each layer's KV cache, the same slots in every head."""

    method = "oldest"

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache,
                       k: Tensor) -> tuple[TokenState, LayerCache]:
        """k (B,) entries per row: the first k real slots of each left-padded row."""
        real = tokens.real  # (B, n)
        n = real.shape[1]
        from_start = torch.arange(n, device=real.device)[None, :] - (n - real.sum(dim=1))[:, None]  # 0 = oldest
        keep = real & (from_start < k[:, None])  # (B, n)
        return tokens, select_per_head(cache, keep[:, None, :].expand(-1, cache.keys.shape[1], -1))


def backbone() -> CTRTransformer:
    torch.manual_seed(0)
    return CTRTransformer(num_items=40, max_len=12, d_model=16, num_layers=2, num_heads=2).eval()


def test_full_budget_equals_the_backbone_and_a_smaller_one_stores_less():
    model = backbone()
    history = torch.tensor([[0, 0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])
    targets = torch.tensor([[13, 20], [14, 21]])
    with torch.no_grad():
        torch.testing.assert_close(OldestFirst(model, ratio=1.0)(history, targets), model(history, targets))
        quarter = OldestFirst(model, ratio=0.25)
        quarter(history, targets)
    assert quarter.kept_lengths(12) == [3, 3]
    assert quarter.state_bytes_per_user(12) < OldestFirst(model, ratio=1.0).state_bytes_per_user(12)


def test_the_new_method_trains_and_tests_through_the_cli_with_one_config(ml100k_root, tmp_path):
    experiment = tmp_path / "oldest_ctr.yaml"
    experiment.write_text(
        "compose: [protocol/ctr_din_ml1m.yaml]\n"
        "model:\n  init_args:\n    model:\n"
        "      class_path: tests.compress.test_adding_a_compressor.OldestFirst\n"
        "      init_args:\n        ratio: 0.5\n        backbone:\n"
        "          class_path: seqrec.models.ctr.transformer.CTRTransformer\n"
        "          init_args: {d_model: 16, num_layers: 1, num_heads: 2}\n"
    )
    results = main([
        "--config", str(experiment),
        "--data.init_args.source", '{"class_path": "seqrec.data.sources.movielens.MovieLens100K", '
        f'"init_args": {{"root": "{ml100k_root}"}}}}',
        "--data.max_len", "12", "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--threads", "1",
    ])
    assert 0 <= results["test/auc"] <= 1 and results["cost/state_bytes_per_user"] > 0
