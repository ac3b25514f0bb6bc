"""Model-free estimate of long-range dependence (LRD) in symbol sequences, and the EvoRNN schedule it implies.

``seqrec lrd --config evornn_ml100k.yaml``  (any fit config: its data section is built and
only its **training** part is measured, so a temporal split's future never informs the schedule)
``seqrec lrd --text news.en.heldout-00000-of-00050.gz``  (tokenised text)

Following Belletti, Chen & Chi (KDD 2019), a sequence of symbols x_t from a large vocabulary is seen as the
series of one-hot vectors e_{x_t}; its autocovariance is the trace of the lag-τ covariance matrix::

    γ(τ) = tr Cov(e_{x_t}, e_{x_{t+τ}}) = P(x_t = x_{t+τ}) − Σ_s p_s²

estimated exactly by counting equal symbols τ apart inside each sequence (no random projection is needed:
the count is what a random projection of the one-hot vectors estimates). Long-range dependence means
γ(τ) ∝ τ^{2d−1} with 0 < d < 1/2 (Hurst exponent H = d + 1/2); short memory decays exponentially.
d is the slope of an ordinary least-squares fit of log γ(τ) on log τ over log-spaced lags where γ > 0:
d = (slope + 1) / 2. Its uncertainty comes from a bootstrap over whole sequences (users or text blocks).

Choices (the paper's exact estimator is not public; each is an option):
- symbols: "item" (the item id itself, as for text) or "popularity" (the item's popularity bucket: B
  buckets of equal training-event mass). MovieLens users never rate an item twice, so item ids never
  repeat within a sequence and γ(τ) = −Σp² < 0 at every lag: nothing to measure; the popularity bucket
  is a coarse, model-free symbol that does repeat. Words are their own symbols.
- centering: "global" (Σ_s p_s² from the pooled marginal: dependence includes persistent differences
  between users, which an RNN state does exploit) or "sequence" (each sequence's own marginal; this
  removes user-level persistence and is biased down by O(1/length)).
- a cap on the events read (``--max_events``, default 5M, whole sequences in order) keeps LM1B-scale input fast.
The resulting d feeds ``seqrec.models.next_item.evornn.power_law_schedule``; the tool prints the schedule and the
config flags that select it.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from seqrec.cli import main as cli_main

log = logging.getLogger("seqrec.tools.lrd")

Centering = Literal["global", "sequence"]


@dataclass
class LagStatistics:
    """Per-sequence counts at each lag: ``matches[u, i]`` = #{t : x_t = x_{t+τ_i}}, ``pairs[u, i]`` = n_u − τ_i."""

    lags: np.ndarray  # (T,) int64
    matches: np.ndarray  # (S, T) float64
    pairs: np.ndarray  # (S, T) float64
    lengths: np.ndarray  # (S,) int64
    symbols: np.ndarray  # (nnz,) int64 symbol ids, sequences concatenated
    sequence_of: np.ndarray  # (nnz,) int64 sequence row of every position
    self_overlap: np.ndarray  # (S,) Σ_s c_{us}² (symbol counts within the sequence, squared, summed)


def lag_statistics(symbols: np.ndarray, indptr: np.ndarray, lags: np.ndarray) -> LagStatistics:
    """Count equal symbols τ apart inside every sequence (``symbols[indptr[u]:indptr[u+1]]``), O(nnz) per lag."""
    symbols = np.asarray(symbols, dtype=np.int64)
    indptr = np.asarray(indptr, dtype=np.int64)
    lags = np.asarray(lags, dtype=np.int64)
    if len(symbols) != indptr[-1] or np.any(np.diff(indptr) < 0):
        raise ValueError(f"indptr must be non-decreasing and end at len(symbols)={len(symbols)}, got {indptr[-1]}")
    if np.any(lags < 1):
        raise ValueError(f"lags must be >= 1, got {lags}")
    lengths = np.diff(indptr)
    num_sequences = len(lengths)
    sequence_of = np.repeat(np.arange(num_sequences), lengths)
    end = np.repeat(indptr[1:], lengths)
    offsets = np.arange(len(symbols))
    matches = np.zeros((num_sequences, len(lags)))
    pairs = np.maximum(lengths[:, None] - lags[None, :], 0).astype(np.float64)
    for i, lag in enumerate(lags):
        left = offsets[offsets + lag < end]
        equal = symbols[left] == symbols[left + lag]
        matches[:, i] = np.bincount(sequence_of[left[equal]], minlength=num_sequences)
    vocabulary = int(symbols.max()) + 1 if len(symbols) else 1
    keys, counts = np.unique(sequence_of * vocabulary + symbols, return_counts=True)
    self_overlap = np.bincount(keys // vocabulary, weights=counts.astype(np.float64) ** 2, minlength=num_sequences)
    return LagStatistics(lags, matches, pairs, lengths, symbols, sequence_of, self_overlap)


def autocovariance(stats: LagStatistics, weights: np.ndarray | None = None, center: Centering = "global") -> np.ndarray:
    """γ(τ) for every lag, each sequence counted ``weights[u]`` times (a bootstrap draw; None: once).

    global:   Σ_u w_u matches_u / Σ_u w_u pairs_u − Σ_s p_s²,  p_s = Σ_u w_u c_us / Σ_u w_u n_u
    sequence: Σ_u w_u (matches_u − pairs_u · Σ_s c_us² / n_u²) / Σ_u w_u pairs_u
    """
    w = np.ones(len(stats.lengths)) if weights is None else np.asarray(weights, dtype=np.float64)
    pairs = w @ stats.pairs  # (T,)
    if np.any(pairs == 0):
        raise ValueError(f"no pair of events is {int(stats.lags[pairs == 0][0])} apart: lower the maximum lag")
    if center == "global":
        mass = np.bincount(stats.symbols, weights=w[stats.sequence_of])
        p = mass / mass.sum()
        return (w @ stats.matches) / pairs - float(p @ p)
    if center == "sequence":
        lengths = np.maximum(stats.lengths, 1).astype(np.float64)
        baseline = stats.self_overlap / lengths**2  # (S,)
        return (w @ (stats.matches - stats.pairs * baseline[:, None])) / pairs
    raise ValueError(f"center must be 'global' or 'sequence', got {center!r}")


def fit_exponent(lags: np.ndarray, gamma: np.ndarray) -> tuple[float, float, float, int]:
    """(d, slope, R², points) of the OLS fit log γ = a + slope·log τ over lags with γ > 0; d = (slope + 1)/2."""
    positive = gamma > 0
    if positive.sum() < 3:
        return math.nan, math.nan, math.nan, int(positive.sum())
    x, y = np.log(lags[positive].astype(np.float64)), np.log(gamma[positive])
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (intercept + slope * x)
    r2 = 1.0 - float(residual @ residual) / max(float(((y - y.mean()) ** 2).sum()), 1e-300)
    return (float(slope) + 1.0) / 2.0, float(slope), r2, int(positive.sum())


def log_spaced_lags(min_lag: int, max_lag: int, num_lags: int) -> np.ndarray:
    """Distinct integer lags spaced evenly in log τ from min_lag to max_lag."""
    if not 1 <= min_lag <= max_lag:
        raise ValueError(f"need 1 <= min_lag <= max_lag, got {min_lag}, {max_lag}")
    return np.unique(np.round(np.geomspace(min_lag, max_lag, num_lags)).astype(np.int64))


@dataclass
class LRDEstimate:
    """The estimate with its bootstrap spread, and the autocovariance it was fitted on."""

    d: float
    d_std: float
    d_low: float  # 5th percentile of the bootstrap
    d_high: float  # 95th percentile
    r2: float
    slope: float
    center: str
    lags: list[int] = field(default_factory=list)
    gamma: list[float] = field(default_factory=list)
    correlation: list[float] = field(default_factory=list)  # γ(τ) / γ(0)
    sequences: int = 0
    events: int = 0
    bootstrap: int = 0


def estimate_lrd(
    symbols: np.ndarray,
    indptr: np.ndarray,
    max_lag: int = 50,
    min_lag: int = 1,
    num_lags: int = 24,
    center: Centering = "global",
    bootstrap: int = 200,
    seed: int = 0,
) -> LRDEstimate:
    """Estimate d from γ(τ) ∝ τ^{2d−1} on sequences in CSR form, with a bootstrap over sequences."""
    lags = log_spaced_lags(min_lag, max_lag, num_lags)
    stats = lag_statistics(symbols, indptr, lags)
    gamma = autocovariance(stats, center=center)
    d, slope, r2, points = fit_exponent(lags, gamma)
    if points < 3:
        log.warning("only %d lags have a positive autocovariance: d cannot be fitted (no measurable dependence)", points)
    rng = np.random.default_rng(seed)
    draws = []
    num_sequences = len(stats.lengths)
    for _ in range(bootstrap):
        weights = np.bincount(rng.integers(num_sequences, size=num_sequences), minlength=num_sequences)
        draws.append(fit_exponent(lags, autocovariance(stats, weights.astype(np.float64), center))[0])
    draws_array = np.array([x for x in draws if np.isfinite(x)])
    p = np.bincount(stats.symbols) / max(len(stats.symbols), 1)
    gamma0 = 1.0 - float(p @ p)
    return LRDEstimate(
        d=d,
        d_std=float(draws_array.std()) if len(draws_array) else math.nan,
        d_low=float(np.percentile(draws_array, 5)) if len(draws_array) else math.nan,
        d_high=float(np.percentile(draws_array, 95)) if len(draws_array) else math.nan,
        r2=r2,
        slope=slope,
        center=center,
        lags=lags.tolist(),
        gamma=gamma.tolist(),
        correlation=(gamma / gamma0).tolist() if gamma0 > 0 else [],
        sequences=num_sequences,
        events=int(len(stats.symbols)),
        bootstrap=bootstrap,
    )


# ---------------------------------------------------------------------------------------------------
# Symbols from datasets
# ---------------------------------------------------------------------------------------------------


def popularity_buckets(counts: np.ndarray, buckets: int) -> np.ndarray:
    """(N+1,) bucket of every item id: items by decreasing count cut into ``buckets`` groups of equal event mass."""
    if buckets < 1:
        raise ValueError(f"buckets must be >= 1, got {buckets}")
    counts = np.asarray(counts, dtype=np.float64)
    order = np.argsort(-counts[1:], kind="stable") + 1
    mass_before = np.cumsum(counts[order]) - counts[order]
    total = max(counts[1:].sum(), 1.0)
    out = np.zeros(len(counts), dtype=np.int64)
    out[order] = np.minimum((mass_before / total * buckets).astype(np.int64), buckets - 1)
    return out


def cap_sequences(indptr: np.ndarray, max_events: int | None) -> int:
    """How many leading sequences fit in ``max_events`` events (at least one)."""
    if max_events is None or indptr[-1] <= max_events:
        return len(indptr) - 1
    return max(1, int(np.searchsorted(indptr, max_events, side="right")) - 1)


def next_item_training_sequences(datamodule) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # noqa: ANN001
    """(items, indptr, item counts) of every user's training span of a NextItemDataModule's split."""
    split = datamodule.split
    items_all = split.sequences.items
    lengths = (split.train_stop - split.train_start).astype(np.int64)
    keep = split.train_mask()
    items = items_all[keep]
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    counts = np.bincount(items, minlength=split.sequences.num_items + 1)
    return items, indptr, counts


def text_sequences(path: Path, unit: Literal["line", "block"], block: int) -> tuple[np.ndarray, np.ndarray]:
    """Word ids of a tokenised text (one sentence per line): each line a sequence, or blocks of the stream."""
    from seqrec.data.text import read_sentences

    index: dict[str, int] = {}
    ids: list[int] = []
    lengths: list[int] = []
    for sentence in read_sentences(path):
        words = sentence.split()
        ids.extend(index.setdefault(w, len(index)) for w in words)
        lengths.append(len(words))
    symbols = np.asarray(ids, dtype=np.int64)
    if unit == "line":
        indptr = np.concatenate([[0], np.cumsum(lengths)])
    else:
        indptr = np.arange(0, len(symbols) + 1, block)
        symbols = symbols[: indptr[-1]]
    return symbols, indptr


def load_datamodule(config: str, overrides: list[str]):  # noqa: ANN201 (a RecommendationData)
    """The datamodule of a fit config (with ``--data.…`` overrides), built by ``seqrec.build``; also the network's
    init_args."""
    from seqrec.build import build_datamodule, resolved_dict
    from seqrec.datamodules.base import RecommendationData

    args = ["--config", config, *overrides]
    net = resolved_dict(args)["model"]["init_args"].get("net") or {}
    datamodule = build_datamodule(args)
    if not isinstance(datamodule, RecommendationData):
        raise TypeError(f"--config {config}: {type(datamodule).__name__} is not a seqrec datamodule "
                        "(seqrec.datamodules.base.RecommendationData)")
    return datamodule, net.get("init_args") or {}


def config_sequences(datamodule, symbols: str, buckets: int) -> tuple[np.ndarray, np.ndarray, str]:  # noqa: ANN001
    """Symbols and CSR offsets of a data module's training part; a description."""
    from seqrec.datamodules.lm import LMDataModule

    if isinstance(datamodule, LMDataModule):
        tokens = datamodule.tokens("train").astype(np.int64)
        window = datamodule.max_len + 1
        indptr = np.arange(0, len(tokens) + 1, window)
        return tokens[: indptr[-1]], indptr, f"training token stream in windows of {window}"
    items, indptr, counts = next_item_training_sequences(datamodule)
    if symbols == "item":
        return items, indptr, "training spans, item ids"
    return popularity_buckets(counts, buckets)[items], indptr, f"training spans, {buckets} popularity buckets"


def format_report(estimate: LRDEstimate, description: str) -> str:
    """Markdown: the autocovariance table and the estimate."""
    lines = [
        f"data: {description}; {estimate.sequences:,} sequences, {estimate.events:,} events; centering {estimate.center}",
        "",
        "| lag τ | γ(τ) | γ(τ)/γ(0) |",
        "|---:|---:|---:|",
    ]
    for i, lag in enumerate(estimate.lags):
        corr = f"{estimate.correlation[i]:.5f}" if estimate.correlation else "-"
        lines.append(f"| {lag} | {estimate.gamma[i]:.6f} | {corr} |")
    lines += [
        "",
        f"d = {estimate.d:.3f} (bootstrap std {estimate.d_std:.3f}, 90% interval [{estimate.d_low:.3f}, {estimate.d_high:.3f}], "
        f"{estimate.bootstrap} draws over sequences); slope of log γ on log τ = {estimate.slope:.3f}, R² = {estimate.r2:.3f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> LRDEstimate:
    """``seqrec lrd`` (``seqrec.cli``): measure, print the report and the schedule; return the estimate."""
    return cli_main(["lrd", *(sys.argv[1:] if argv is None else argv)])


def command(
    config: str | None = None,
    text: Path | None = None,
    symbols: Literal["popularity", "item"] = "popularity",
    buckets: int = 10,
    unit: Literal["line", "block"] = "block",
    block: int = 128,
    min_lag: int = 1,
    max_lag: int | None = None,
    num_lags: int = 24,
    center: Literal["global", "sequence"] = "global",
    bootstrap: int = 200,
    max_events: int = 5_000_000,
    seed: int = 0,
    max_len: int | None = None,
    d_model: int | None = None,
    max_hidden: int | None = None,
    min_hidden: int | None = None,
    cost_ratio: float | None = None,
    size_multiple: int | None = None,
    scale: float | None = None,
    json: Path | None = None,
    overrides: list[str] | None = None,
) -> LRDEstimate:
    """Long-range dependence of a dataset (or of text): the exponent d of γ(τ) ∝ τ^(2d−1), and EvoRNN's schedule.

    γ(τ) = P(x_t = x_{t+τ}) − Σ_s p_s² over lags τ; d = (slope of log γ on log τ + 1) / 2, its uncertainty from a
    bootstrap over sequences. With --config only the training part of the data is measured; other --data.… flags
    override the config.

    Args:
        config: a fit config (path or shipped name); its data section is measured (give this or --text)
        text: tokenised text, one sentence per line (.gz allowed)
        symbols: item-data symbols: popularity (the item's popularity bucket) or item (the id itself)
        buckets: popularity buckets (equal event mass)
        unit: --text: sequences are lines or blocks
        block: --text: block length in words
        min_lag: smallest lag
        max_lag: largest lag (default: the model's max_len, or 100)
        num_lags: log-spaced lags between min and max
        center: global (the pooled marginal) or sequence (each sequence's own marginal)
        bootstrap: bootstrap draws over sequences (0: none)
        max_events: read whole sequences up to this many events
        seed: seed of the bootstrap
        max_len: schedule: window length (default: the config's)
        d_model: schedule: input width d (default: config or 64)
        max_hidden: schedule: newest hidden size (config or 64)
        min_hidden: schedule: smallest hidden size (config or 8)
        cost_ratio: schedule: cost ratio between segments (config or 2.0)
        size_multiple: schedule: hidden sizes are multiples of this (config or 8)
        scale: schedule: τ_0 where the decay starts (config or 1.0)
        json: also write the estimate and schedule here
        overrides: the config's flags (--data.… value), with --config only
    """
    if (config is None) == (text is None):
        raise ValueError("give one of --config (a fit config) or --text (a text file)")
    overrides = list(overrides or [])
    if overrides and config is None:
        raise ValueError(f"unrecognised arguments {overrides} (--data.… overrides need --config)")
    args = argparse.Namespace(config=config, text=text, symbols=symbols, buckets=buckets, unit=unit, block=block,
                              min_lag=min_lag, max_lag=max_lag, num_lags=num_lags, center=center, bootstrap=bootstrap,
                              max_events=max_events, seed=seed, max_len=max_len, d_model=d_model,
                              max_hidden=max_hidden, min_hidden=min_hidden, cost_ratio=cost_ratio,
                              size_multiple=size_multiple, scale=scale, json=json)
    return measure(args, overrides)


def measure(args: argparse.Namespace, overrides: list[str]) -> LRDEstimate:
    """Estimate d on the chosen sequences, print the report and the schedule it implies (``command``'s options)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    model: dict = {}
    data_max_len = None
    if args.config is not None:
        datamodule, model = load_datamodule(args.config, overrides)
        symbols, indptr, description = config_sequences(datamodule, args.symbols, args.buckets)
        data_max_len = datamodule.max_len
    else:
        symbols, indptr = text_sequences(args.text, args.unit, args.block)
        description = f"{args.text}, {'lines' if args.unit == 'line' else f'blocks of {args.block} words'}"
    keep = cap_sequences(indptr, args.max_events)
    if keep < len(indptr) - 1:
        description += f", first {keep:,} sequences (--max_events {args.max_events:,})"
        indptr = indptr[: keep + 1]
        symbols = symbols[: indptr[-1]]
    max_len = args.max_len or data_max_len or 100
    max_lag = args.max_lag or max_len
    estimate = estimate_lrd(symbols, indptr, max_lag, args.min_lag, args.num_lags, args.center, args.bootstrap, args.seed)
    report = format_report(estimate, description)

    from seqrec.models.next_item.evornn import gru_step_macs, power_law_schedule

    d_model = args.d_model or model.get("d_model", 64)
    max_hidden = args.max_hidden or (model.get("hidden_sizes") or [d_model])[-1]
    options = {
        "min_hidden": args.min_hidden or model.get("min_hidden", 8),
        "cost_ratio": args.cost_ratio or model.get("cost_ratio", 2.0),
        "size_multiple": args.size_multiple or model.get("size_multiple", 8),
        "scale": args.scale or model.get("power_law_scale", 1.0),
    }
    schedule = None
    if math.isfinite(estimate.d):
        d_for_schedule = min(max(estimate.d, -0.49), 0.99)
        sizes, lengths = power_law_schedule(max_len, max_hidden, d_for_schedule, d_model, **options)
        spans, tau = [], 1
        for size, length in zip(sizes[::-1], [*lengths[::-1], None]):
            far = max_len if length is None else tau + length - 1
            spans.append(f"h={size} for τ {tau}..{far}")
            tau = far + 1
        fixed = gru_step_macs(d_model, max_hidden) * max_len
        evo = sum(gru_step_macs(d_model, h) * n for h, n in zip(sizes, [max_len - sum(lengths), *lengths]))
        schedule = {"hidden_sizes": sizes, "segment_lengths": lengths, "lrd_d": round(estimate.d, 4)}
        report += (
            f"\n\npower-law schedule (max_len {max_len}, d_model {d_model}, newest hidden {max_hidden}, {options}):\n  "
            + "; ".join(spans)
            + f"\n  recurrent MACs per sequence {evo:,} vs {fixed:,} for a fixed GRU of {max_hidden} ({evo / fixed:.2f}×)"
            + "\n  flags: --model.net.schedule power_law "
            + f"--model.net.lrd_d {round(estimate.d, 4)}"
        )
    print(report)
    if args.json is not None:
        args.json.write_text(json.dumps({"estimate": asdict(estimate), "schedule": schedule}, indent=1))
    return estimate


if __name__ == "__main__":
    main(sys.argv[1:])
