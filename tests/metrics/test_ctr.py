"""CTR metrics: GAUC by hand (one-class users skipped), AUC with ties and large logits, Logloss, DDP merge."""

from __future__ import annotations

import math

import pytest
import torch

from seqrec.metrics.ctr import AUC, GAUC, CTRMetrics, Logloss, grouped_auc

# user 0: AUC 1 (3 impressions, 1 positive); user 1: AUC 1/4 (4 impressions, 2 positives);
# user 2: positives only and user 3: negatives only (skipped); user 4: a tie, AUC 1/2 (2 impressions)
SCORES = [0.9, 0.1, 0.5, 0.2, 0.6, 0.4, 0.3, 0.7, 0.8, 0.05, 0.5, 0.5]
LABELS = [1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 1, 0]
USERS = [0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 4, 4]


def tensors():
    return torch.tensor(SCORES), torch.tensor(LABELS), torch.tensor(USERS)


def test_gauc_by_hand_impressions_and_positives():
    preds, target, users = tensors()
    metric = GAUC()
    metric.update(preds, target, users)
    assert metric.compute().item() == pytest.approx((3 * 1.0 + 4 * 0.25 + 2 * 0.5) / 9, abs=1e-12)
    by_pos = GAUC(weighting="positives")
    by_pos.update(preds, target, users)
    assert by_pos.compute().item() == pytest.approx((1 * 1.0 + 2 * 0.25 + 1 * 0.5) / 4, abs=1e-12)


def test_gauc_batches_order_and_scale_invariant():
    preds, target, users = tensors()
    perm = torch.randperm(len(preds), generator=torch.Generator().manual_seed(0))
    metric = GAUC()
    metric.update(torch.logit(preds[perm[:5]]), target[perm[:5]], users[perm[:5]])
    metric.update(torch.logit(preds[perm[5:]]), target[perm[5:]], users[perm[5:]])
    assert metric.compute().item() == pytest.approx(5 / 9, abs=1e-12)


def test_gauc_nan_when_no_user_has_both_labels():
    metric = GAUC()
    metric.update(torch.tensor([0.3, 0.4]), torch.tensor([1, 0]), torch.tensor([0, 1]))
    assert math.isnan(metric.compute().item())


def test_grouped_auc_matches_pair_counting():
    g = torch.Generator().manual_seed(1)
    preds = torch.randint(0, 5, (300,), generator=g).double()  # many ties
    target = torch.randint(0, 2, (300,), generator=g)
    users = torch.randint(0, 7, (300,), generator=g)
    ids, auc, _ = grouped_auc(preds, target, users)
    for u, value in zip(ids.tolist(), auc.tolist()):
        s, y = preds[users == u], target[users == u]
        pos, neg = s[y == 1], s[y == 0]
        pairs = (pos[:, None] > neg[None, :]).double() + 0.5 * (pos[:, None] == neg[None, :]).double()
        assert value == pytest.approx(pairs.mean().item(), abs=1e-12)


def test_auc_ties_and_unsaturated_logits():
    metric = AUC()
    # logits 40 and 50 would both become 1.0 after a float64 sigmoid; their order must survive
    metric.update(torch.tensor([50.0, 40.0, 40.0, -3.0]), torch.tensor([1, 0, 1, 0]))
    # pairs (pos, neg): (50,40)=1, (50,-3)=1, (40,40)=1/2, (40,-3)=1 -> 3.5 / 4
    assert metric.compute().item() == pytest.approx(3.5 / 4, abs=1e-12)


def test_logloss_by_hand():
    logits = torch.tensor([2.0, -1.0, 0.5])
    labels = torch.tensor([1, 0, 0])
    metric = Logloss()
    metric.update(logits, labels)
    p = torch.sigmoid(logits.double())
    expected = -(torch.log(p[0]) + torch.log(1 - p[1]) + torch.log(1 - p[2])) / 3
    assert metric.compute().item() == pytest.approx(expected.item(), abs=1e-12)


def test_distributed_merge_with_padded_duplicates_equals_single_process():
    preds, target, users = tensors()
    index = torch.arange(len(preds))
    single = CTRMetrics()
    single.update(preds, target, users, index)
    # two "ranks"; the second repeats sample 0 as a distributed sampler's padding
    rank0, rank1 = CTRMetrics(), CTRMetrics()
    rank0.update(preds[:6], target[:6], users[:6], index[:6])
    rank1.update(torch.cat([preds[6:], preds[:1]]), torch.cat([target[6:], target[:1]]),
                 torch.cat([users[6:], users[:1]]), torch.cat([index[6:], index[:1]]))
    for name in ("auc", "gauc"):
        getattr(rank0, name).merge_state(getattr(rank1, name))
    assert rank0.gauc.compute().item() == single.gauc.compute().item()
    assert rank0.auc.compute().item() == single.auc.compute().item()
