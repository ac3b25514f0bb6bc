"""Language-model metrics by hand."""

import math

import pytest
import torch

from seqrec.metrics.lm import LanguageModelMetrics


def test_metrics_by_hand():
    metric = LanguageModelMetrics(num_targets=2)
    metric.update(torch.tensor([[1.0, 2.0], [3.0, 0.5]]), torch.tensor([[1, 4], [1, 1]]))
    metric.update(torch.tensor([[0.0, 1.0]]), torch.tensor([[2, 1]]))
    out = metric.compute()
    assert out["accuracy"].item() == pytest.approx(4 / 6)
    assert out["perplexity"].item() == pytest.approx(math.exp(7.5 / 6))
    assert out["accuracy_h1"].item() == pytest.approx(2 / 3) and out["accuracy_h2"].item() == pytest.approx(2 / 3)
    assert out["perplexity_h1"].item() == pytest.approx(math.exp(4 / 3))
