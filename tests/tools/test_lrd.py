"""The long-range-dependence estimator: γ(τ) by hand, recovery of a known exponent, the CLI on real formats."""

import json
import math

import numpy as np
import pytest

from seqrec.tools.lrd import (
    autocovariance,
    estimate_lrd,
    lag_statistics,
    main,
    popularity_buckets,
)
from tests.conftest import write_ml100k


def test_autocovariance_by_hand():
    # one sequence 1 2 1 2: lag 1 never repeats, lag 2 always does; p = (1/2, 1/2), Σp² = 1/2
    stats = lag_statistics(np.array([1, 2, 1, 2]), np.array([0, 4]), np.array([1, 2, 3]))
    np.testing.assert_allclose(autocovariance(stats), [0 - 0.5, 1 - 0.5, 0 - 0.5])
    # two sequences: [1 1 1] and [2 3]; lag 1 pairs: 2 + 1, matches 2 + 0; p = (3/5, 1/5, 1/5), Σp² = 11/25
    stats = lag_statistics(np.array([1, 1, 1, 2, 3]), np.array([0, 3, 5]), np.array([1]))
    np.testing.assert_allclose(autocovariance(stats), [2 / 3 - 11 / 25])
    # per-sequence centering: (2 − 2·1) + (0 − 1·(1+1)/4) over 3 pairs
    np.testing.assert_allclose(autocovariance(stats, center="sequence"), [(0 - 0.5) / 3])
    # a bootstrap weight of 2 is the same as the sequence appearing twice
    doubled = lag_statistics(np.array([1, 1, 1, 1, 1, 1, 2, 3]), np.array([0, 3, 6, 8]), np.array([1]))
    np.testing.assert_allclose(autocovariance(stats, np.array([2.0, 1.0])), autocovariance(doubled))


def fractional_sign_sequences(d: float, sequences: int, length: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Symbols 0/1 = sign of an ARFIMA(0, d, 0) Gaussian series (MA(∞) weights ψ_k = Γ(k+d)/(Γ(k+1)Γ(d))).

    The sign has Hermite rank 1, so its autocovariance decays like the Gaussian one: ∝ τ^{2d−1}.
    """
    rng = np.random.default_rng(seed)
    burn = 4 * length
    k = np.arange(1, burn + length)
    psi = np.concatenate([[1.0], np.exp(np.cumsum(np.log((k - 1 + d) / k)))])  # ψ_k recursively
    noise = rng.standard_normal((sequences, burn + 2 * length))
    size = 1 << int(np.ceil(np.log2(noise.shape[1] + len(psi))))
    series = np.fft.irfft(np.fft.rfft(noise, size) * np.fft.rfft(psi, size), size)[:, burn : burn + length]
    symbols = (series > 0).astype(np.int64).reshape(-1)
    return symbols, np.arange(0, sequences * length + 1, length)


@pytest.mark.parametrize("d, max_lag, tolerance, max_std", [(0.3, 60, 0.06, 0.03), (0.1, 30, 0.06, 0.1)])
def test_recovers_a_known_exponent(d, max_lag, tolerance, max_std):
    symbols, indptr = fractional_sign_sequences(d, sequences=150, length=600, seed=1)
    estimate = estimate_lrd(symbols, indptr, max_lag=max_lag, min_lag=2, bootstrap=30)
    assert abs(estimate.d - d) < tolerance, estimate
    assert estimate.d_low <= d <= estimate.d_high and estimate.d_std < max_std  # weak dependence is harder to pin


def test_short_memory_is_not_mistaken_for_long_memory():
    rng = np.random.default_rng(0)
    x = np.zeros((150, 600))
    for t in range(1, 600):  # AR(1), φ = 0.6: exponential decay, γ(τ) ≈ 0 beyond ~10 lags
        x[:, t] = 0.6 * x[:, t - 1] + rng.standard_normal(150)
    symbols = (x > 0).astype(np.int64).reshape(-1)
    estimate = estimate_lrd(symbols, np.arange(0, 150 * 600 + 1, 600), max_lag=60, min_lag=2, bootstrap=0)
    lrd = estimate_lrd(*fractional_sign_sequences(0.3, 150, 600, seed=2), max_lag=60, min_lag=2, bootstrap=0)
    assert (math.isnan(estimate.d) or estimate.d < 0.05) and lrd.d > 0.2
    # the autocovariance at lag 60 is indistinguishable from 0 for AR(1) but not for the LRD series
    assert abs(estimate.gamma[-1]) < 0.003 < lrd.gamma[-1]


def test_popularity_buckets_have_equal_event_mass():
    counts = np.array([0, 50, 10, 25, 5, 10])  # item 0 is padding
    buckets = popularity_buckets(counts, 2)
    assert buckets.tolist() == [0, 0, 1, 1, 1, 1]  # item 1 holds half the mass alone
    assert popularity_buckets(counts, 4).tolist() == [0, 0, 3, 2, 3, 3]


def test_cli_measures_only_the_training_part_and_prints_the_schedule(tmp_path, capsys):
    root = write_ml100k(tmp_path / "ml", num_users=60, num_items=40, length=30)
    out = tmp_path / "lrd.json"
    estimate = main([
        "--config", "evornn_ml100k.yaml", "--data.init_args.source.init_args.root", str(root),
        "--data.init_args.temporal.test_days", "2", "--data.init_args.temporal.valid_days", "1",
        "--max_lag", "12", "--bootstrap", "20", "--json", str(out),
    ])
    printed = capsys.readouterr().out
    assert "d = " in printed and "lrd_d" in printed and "power-law schedule" in printed
    from seqrec.data.sources.movielens import MovieLens100K
    from seqrec.data.temporal import TemporalSplit
    from seqrec.datamodules.next_item import NextItemDataModule

    data = NextItemDataModule(MovieLens100K(root=str(root)), split="temporal",
                              temporal=TemporalSplit(test_days=2, valid_days=1))
    assert estimate.events == int(data.split.train_mask().sum()) < data.sequences.num_interactions
    written = json.loads(out.read_text())
    assert written["estimate"]["d"] == pytest.approx(estimate.d)
    assert written["schedule"]["hidden_sizes"][-1] == 64  # the config's newest hidden size


def test_cli_on_text(tmp_path, capsys):
    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(30)]
    lines = [" ".join(rng.choice(words[: 5 + (n % 20)], size=20)) for n in range(200)]
    path = tmp_path / "text.txt"
    path.write_text("\n".join(lines) + "\n")
    estimate = main(["--text", str(path), "--unit", "line", "--max_lag", "10", "--bootstrap", "0"])
    assert estimate.sequences == 200 and estimate.events == 4000
    assert "γ(τ)" in capsys.readouterr().out
