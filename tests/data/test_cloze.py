"""Cloze examples (BERT4Rec's masked windows): the masking rule, its rates, frozen draws per (seed + epoch, example)."""

from __future__ import annotations

import numpy as np
import pytest

from seqrec.data.cloze import ClozeExamples, cloze_mask, fixed_mask_count, mask_last

N = 40
MASK = N + 1


def _examples(mask_prob: float = 0.4, replacement: str = "bert", mask_last_prob: float = 0.0,
              mask_count: str = "bernoulli") -> ClozeExamples:
    items = np.arange(1, N + 1)  # two spans: 20 events (the newest 10 kept) and 6 events (left-padded)
    return ClozeExamples(items, np.array([0, 20]), np.array([20, 26]), max_len=10, num_items=N, mask_prob=mask_prob,
                         replacement=replacement, mask_last_prob=mask_last_prob, mask_count=mask_count)


def test_frozen_draws_per_epoch_seed_and_example():
    """The same key draws the same masks in any process; the values are frozen (a change of rule must show)."""
    examples = _examples()
    first = examples[(42, 0)]
    assert first["items"].tolist() == [11, 12, 13, 14, MASK, 16, 17, 18, MASK, 20]
    assert first["labels"].tolist() == [0, 0, 0, 0, 15, 0, 0, 0, 19, 0]
    assert examples[(43, 0)]["items"].tolist() == [11, MASK, MASK, 14, 15, MASK, 17, MASK, 19, 20]  # next epoch
    assert examples[(42, 1)]["items"].tolist() == [0, 0, 0, 0, 21, 22, 23, 24, 25, 26]  # nothing masked this time
    again = _examples()[(42, 0)]
    assert all((again[k] == first[k]).all() for k in first)
    assert examples[0]["items"].tolist() == examples[(0, 0)]["items"].tolist()  # a plain index draws with seed 0


def test_labels_sit_exactly_at_masked_positions_and_padding_is_never_masked():
    examples = _examples(mask_prob=0.9)
    for seed in range(50):
        example = examples[(seed, 1)]
        items, labels = example["items"].numpy(), example["labels"].numpy()
        assert (items[:4] == 0).all() and (labels[:4] == 0).all()  # padding
        original = np.arange(21, 27)
        masked = labels[4:] > 0
        assert (labels[4:][masked] == original[masked]).all()
        assert (items[4:][~masked] == original[~masked]).all()  # unmasked inputs are the events


def test_bert_replacement_rates_are_80_10_10_and_mask_prob_holds():
    rng = np.random.default_rng(0)
    tokens = np.tile(np.arange(1, 201), 500)  # 100,000 real positions, each item 500 times
    inputs, labels = cloze_mask(tokens, rng, 0.2, 1001, 1000, "bert")
    masked = labels > 0
    assert masked.mean() == pytest.approx(0.2, abs=0.005)
    as_mask = (inputs == 1001) & masked
    kept = (inputs == tokens) & masked
    random = masked & ~as_mask & ~kept
    share = masked.sum()
    assert as_mask.sum() / share == pytest.approx(0.8, abs=0.01)
    assert kept.sum() / share == pytest.approx(0.1, abs=0.01)  # a random draw may equal the event: 1/1000 of 10 %
    assert random.sum() / share == pytest.approx(0.1, abs=0.01)
    assert inputs[random].min() >= 1 and inputs[random].max() <= 1000  # random items are real items, never [mask]
    assert (inputs[~masked] == tokens[~masked]).all()


def test_mask_only_replacement():
    inputs, labels = cloze_mask(np.array([0, 0, 5, 6, 7, 8, 9, 10]), np.random.default_rng(7), 0.5, MASK, N, "mask")
    assert inputs.tolist() == [0, 0, 5, MASK, MASK, 8, MASK, 10] and labels.tolist() == [0, 0, 0, 6, 7, 0, 9, 0]
    inputs, labels = cloze_mask(np.arange(1, 1001), np.random.default_rng(1), 0.3, 2001, 2000, "mask")
    assert set(inputs[labels > 0].tolist()) == {2001}


def test_a_last_item_example_masks_the_newest_event_alone_and_no_padding():
    inputs, labels = mask_last(np.array([0, 0, 0, 4, 9, 2]), MASK)
    assert inputs.tolist() == [0, 0, 0, 4, 9, MASK] and labels.tolist() == [0, 0, 0, 0, 0, 2]
    always = _examples(mask_last_prob=1.0)
    for seed in range(5):
        assert always[(seed, 0)]["items"].tolist() == [11, 12, 13, 14, 15, 16, 17, 18, 19, MASK]
        assert always[(seed, 1)]["labels"].tolist() == [0] * 9 + [26]


def test_last_item_examples_take_their_share_and_the_rest_mask_as_before():
    """q = 1/11 (the original's one mask-last instance per ten random copies); the other windows draw cloze masks."""
    share = _examples(mask_last_prob=1 / 11)
    plain = _examples()
    last_only, cloze = 0, 0
    for seed in range(2200):
        example = share[(seed, 0)]
        labels = example["labels"].tolist()
        if labels == [0] * 9 + [20] and example["items"].tolist()[-1] == MASK:
            last_only += 1  # a random draw can give this too (0.4 * 0.6^9 * 0.8 ≈ 0.3 %): counted, within the bound
        elif any(labels):
            cloze += 1
            u = np.random.default_rng([seed, 0]).random()  # the share's draw comes first, then the cloze draws
            assert u >= 1 / 11
    assert last_only / 2200 == pytest.approx(1 / 11, abs=0.02)
    assert cloze > 0.85 * 2200
    # q = 0 draws nothing extra: the frozen masks of the default are those of the first test
    assert plain[(42, 0)]["labels"].tolist() == [0, 0, 0, 0, 15, 0, 0, 0, 19, 0]


@pytest.mark.parametrize(("n", "p", "k"), [(1, 0.2, 1), (2, 0.2, 1), (4, 0.2, 1), (8, 0.2, 2), (12, 0.2, 2),
                                          (13, 0.2, 3), (50, 0.2, 10), (5, 0.5, 3), (7, 0.5, 4), (3, 0.6, 2),
                                          (50, 0.6, 30), (50, 0.4, 20), (6, 1.0, 6)])
def test_fixed_count_is_round_half_up_of_n_p_and_at_least_one(n, p, k):
    """The original's max(1, round(n · p)) with Python 2's round (2.5 -> 3, 3.5 -> 4); 50 · p gives its scripts'
    caps."""
    assert fixed_mask_count(n, p) == k


def test_fixed_count_masks_exactly_k_events_of_every_window():
    """Every window gets labels (Bernoulli leaves 0.6^6 ≈ 5 % of the short span with none at p = 0.4), never
    padding."""
    examples, bernoulli = _examples(mask_count="fixed"), _examples()
    bernoulli_empty = 0
    for seed in range(300):
        long, short = examples[(seed, 0)], examples[(seed, 1)]
        assert int((long["labels"] > 0).sum()) == 4  # round(10 · 0.4)
        assert int((short["labels"] > 0).sum()) == 2  # round(6 · 0.4) = round(2.4)
        assert (short["items"][:4] == 0).all() and (short["labels"][:4] == 0).all()
        masked = long["labels"].numpy() > 0
        assert (long["labels"].numpy()[masked] == np.arange(11, 21)[masked]).all()
        assert (long["items"].numpy()[~masked] == np.arange(11, 21)[~masked]).all()
        bernoulli_empty += not bernoulli[(seed, 1)]["labels"].any()
    assert bernoulli_empty > 0  # the difference the option exists for
    # frozen values (a change of rule must show): the subset is the k smallest of the same uniforms as bernoulli's
    first = examples[(42, 0)]
    assert first["labels"].tolist() == [0, 12, 0, 0, 15, 0, 0, 0, 19, 20]
    assert first["items"].tolist() == [11, 12, 13, 14, MASK, 16, 17, 18, 28, MASK]
    assert bernoulli[(42, 0)]["labels"].tolist() == [0, 0, 0, 0, 15, 0, 0, 0, 19, 0]  # bernoulli's two are among them


def test_fixed_count_picks_a_uniform_subset_and_keeps_the_bert_rates():
    rng = np.random.default_rng(3)
    tokens = np.arange(1, 11)
    hits = np.zeros(10)
    as_mask = kept = total = 0
    for _ in range(5000):
        inputs, labels = cloze_mask(tokens, rng, 0.2, 1001, 1000, "bert", "fixed")
        masked = labels > 0
        assert masked.sum() == 2
        hits += masked
        as_mask += int(((inputs == 1001) & masked).sum())
        kept += int(((inputs == tokens) & masked).sum())
        total += int(masked.sum())
    assert hits / 5000 == pytest.approx(np.full(10, 0.2), abs=0.025)  # each event 2 / 10 of the time
    assert as_mask / total == pytest.approx(0.8, abs=0.015)
    assert kept / total == pytest.approx(0.1, abs=0.015)
    assert cloze_mask(np.zeros(5, dtype=np.int64), rng, 0.2, 1001, 1000, "bert", "fixed")[1].tolist() == [0] * 5


@pytest.mark.parametrize(("kwargs", "message"), [({"mask_prob": 0.0}, "mask_prob"), ({"mask_prob": 1.5}, "mask_prob"),
                                                 ({"replacement": "half"}, "replacement"),
                                                 ({"mask_count": "poisson"}, "mask_count"),
                                                 ({"mask_last_prob": -0.1}, "mask_last_prob"),
                                                 ({"mask_last_prob": 1.1}, "mask_last_prob")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        _examples(**kwargs)
