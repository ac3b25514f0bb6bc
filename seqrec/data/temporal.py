"""Global temporal split: one time cut for every user, train before it, evaluate on the final days.

The protocol of EvoRNN (Belletti, Chen & Chi, KDD 2019; PROTOCOLS.md §3): the log is split by wall-clock
time, not per user, so the model never trains on anything that happened after the moment it is tested::

    T_test  = max(time) − test_days · seconds_per_day
    T_valid = T_test    − valid_days · seconds_per_day
    T_train = T_valid   − train_days · seconds_per_day        (train_days=None: −∞, all of the past)

    training events      t ∈ [T_train, T_valid)    (inputs and labels alike)
    validation queries   t ∈ [T_valid, T_test)
    test queries         t ≥ T_test

Choices where the paper is silent (each an option):
- **History of a query** (``history``): "before_time" (default) gives the model every event of the same
  user with a timestamp strictly earlier than the query's, including earlier events of the validation
  and test windows: all of them are known at serving time, and the model's weights saw none of them.
  Events sharing the query's timestamp are excluded (MovieLens stores many ratings per second and their
  order within a second is arbitrary). "before_event" uses every event before the query in sequence
  order (ties broken by item id, as preprocessing sorts them).
- **Which events become queries**: every event of a window (``max_queries_per_user=None``, the default),
  or the first k of each user in each window, in time order (k closest to the cut).
- **Minimum history** (``min_history``, default 1): a query needs that many earlier events.
- **Unseen targets**: a query whose target item never occurs in the training events is kept (the
  catalogue is the full one and such an item simply ranks low); ``drop_unseen_targets=True`` removes them.
- **Catalogue and preprocessing**: the item vocabulary is built from the whole log, so rows exist for
  items first seen after the cut (untrained embeddings, nothing about their interactions). A k-core
  filter computed on the whole log would let future counts decide which past events survive; the
  temporal configs therefore use no k-core filter (MovieLens users all have >= 20 ratings anyway).
- Units: MovieLens timestamps are Unix seconds (``seconds_per_day=86400``); any other unit works by
  setting ``seconds_per_day`` to its number of units per day.
The model is not re-trained on the validation window before testing (its weights stop at ``T_valid``);
state this when comparing with protocols that do.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from seqrec.data.sequences import Sequences, user_of_offsets
from seqrec.data.splits import EvalExamples, Split

log = logging.getLogger(__name__)

History = Literal["before_time", "before_event"]


@dataclass
class TimeCutSplit(Split):
    """A ``Split`` made by global time cuts; the cut times are kept for checks and logs."""

    train_from: float = -np.inf  # T_train
    valid_cut: float = np.inf  # T_valid
    test_cut: float = np.inf  # T_test


def _check_time_order(sequences: Sequences) -> np.ndarray:
    """(nnz,) user row of every event; ValueError when some user's times decrease."""
    users = user_of_offsets(sequences)
    times = sequences.times
    same_user = users[1:] == users[:-1]
    if np.any(same_user & (times[1:] < times[:-1])):
        bad = int(users[1:][same_user & (times[1:] < times[:-1])][0])
        raise ValueError(
            f"temporal split: user row {bad} has events out of time order; sequences must be sorted by time "
            "within each user (the preprocessing's sort_by does this)"
        )
    return users


def _time_group_start(users: np.ndarray, times: np.ndarray) -> np.ndarray:
    """(nnz,) offset of the first event of the same user with the same timestamp as each event."""
    offsets = np.arange(len(times))
    new_group = np.ones(len(times), dtype=bool)
    new_group[1:] = (users[1:] != users[:-1]) | (times[1:] != times[:-1])
    return np.maximum.accumulate(np.where(new_group, offsets, 0))


def _queries(
    sequences: Sequences,
    users: np.ndarray,
    in_window: np.ndarray,
    history_stop: np.ndarray,
    max_queries_per_user: int | None,
    min_history: int,
    keep_target: np.ndarray,
) -> EvalExamples:
    """Evaluation queries for the events selected by ``in_window`` (offsets in time order per user)."""
    user_start = sequences.indptr[:-1].astype(np.int64)
    offsets = np.flatnonzero(in_window & keep_target)
    offsets = offsets[history_stop[offsets] - user_start[users[offsets]] >= min_history]
    if max_queries_per_user is not None and len(offsets):
        query_users = users[offsets]
        first = np.ones(len(offsets), dtype=bool)
        first[1:] = query_users[1:] != query_users[:-1]
        run_start = np.maximum.accumulate(np.where(first, np.arange(len(offsets)), 0))
        offsets = offsets[np.arange(len(offsets)) - run_start < max_queries_per_user]
    query_users = users[offsets].astype(np.int64)
    return EvalExamples(
        user=query_users,
        start=user_start[query_users],
        stop=history_stop[offsets].astype(np.int64),
        target=sequences.items[offsets].astype(np.int64),
    )


def temporal_split(
    sequences: Sequences,
    test_days: float = 2.0,
    valid_days: float = 2.0,
    train_days: float | None = None,
    seconds_per_day: float = 86400.0,
    max_queries_per_user: int | None = None,
    min_history: int = 1,
    history: History = "before_time",
    drop_unseen_targets: bool = False,
) -> TimeCutSplit:
    """Split ``sequences`` at global time cuts (module docstring): train < T_valid ≤ valid < T_test ≤ test.

    Training spans are ``[first event ≥ T_train, first event ≥ T_valid)`` per user, so no training
    input or label is at or after ``T_valid``. Query j predicts the event at offset o from
    ``items[user_start : stop_j]`` where ``stop_j`` is the first event of the user with time ≥ time[o]
    ("before_time") or o itself ("before_event").
    """
    if test_days <= 0 or valid_days < 0 or (train_days is not None and train_days <= 0):
        raise ValueError(
            f"temporal split needs test_days > 0, valid_days >= 0 and train_days None or > 0; got "
            f"test_days={test_days}, valid_days={valid_days}, train_days={train_days}"
        )
    if max_queries_per_user is not None and max_queries_per_user < 1:
        raise ValueError(f"max_queries_per_user must be None (every event) or >= 1, got {max_queries_per_user}")
    if min_history < 1:
        raise ValueError(f"min_history must be >= 1 (a query needs some history), got {min_history}")
    if history not in ("before_time", "before_event"):
        raise ValueError(f"history must be 'before_time' or 'before_event', got {history!r}")
    if sequences.num_interactions == 0:
        raise ValueError("temporal split of an empty log")
    users = _check_time_order(sequences)
    times = sequences.times
    test_cut = float(times.max()) - test_days * seconds_per_day
    valid_cut = test_cut - valid_days * seconds_per_day
    train_from = -np.inf if train_days is None else valid_cut - train_days * seconds_per_day

    user_start = sequences.indptr[:-1].astype(np.int64)
    user_end = sequences.indptr[1:].astype(np.int64)
    # within a user times are sorted, so "time < cut" is a prefix: count it per user
    before_valid = np.bincount(users[times < valid_cut], minlength=sequences.num_users)
    before_train = np.bincount(users[times < train_from], minlength=sequences.num_users)
    train_start, train_stop = user_start + before_train, user_start + before_valid
    if int((train_stop - train_start).max(initial=0)) < 2:
        raise ValueError(
            f"temporal split: no user has 2 events before the validation cut ({valid_cut:.0f}); "
            f"shrink test_days={test_days} / valid_days={valid_days} or widen train_days={train_days}"
        )

    offsets = np.arange(len(times))
    history_stop = _time_group_start(users, times) if history == "before_time" else offsets
    train_mask = (offsets >= np.repeat(train_start, user_end - user_start)) & (
        offsets < np.repeat(train_stop, user_end - user_start)
    )
    if drop_unseen_targets:
        seen = np.zeros(sequences.num_items + 1, dtype=bool)
        seen[sequences.items[train_mask]] = True
        keep_target = seen[sequences.items]
    else:
        keep_target = np.ones(len(times), dtype=bool)
    valid = _queries(
        sequences, users, (times >= valid_cut) & (times < test_cut), history_stop, max_queries_per_user,
        min_history, keep_target,
    )
    test = _queries(sequences, users, times >= test_cut, history_stop, max_queries_per_user, min_history, keep_target)
    if len(test) == 0:
        raise ValueError(
            f"temporal split: no test query in the final {test_days} days (after {test_cut:.0f}) with at least "
            f"{min_history} earlier events; widen test_days"
        )
    if len(valid) == 0 and valid_days > 0:
        log.warning("temporal split: the validation window of %s days holds no query; widen valid_days", valid_days)
    return TimeCutSplit(
        sequences=sequences,
        train_start=train_start,
        train_stop=train_stop,
        valid=valid,
        test=test,
        train_from=float(train_from),
        valid_cut=float(valid_cut),
        test_cut=float(test_cut),
    )


@dataclass(frozen=True)
class TemporalSplit:
    """Options of ``temporal_split`` as one config block (``data.init_args.temporal`` in YAML).

    test_days / valid_days: lengths of the final test window and the validation window before it.
    train_days: how far before the validation cut training events reach (None: the whole past).
    seconds_per_day: timestamp units per day (86400 for Unix seconds).
    max_queries_per_user: None evaluates every event of a window; k keeps each user's first k.
    min_history: earlier events a query needs. history: "before_time" or "before_event" (module docstring).
    drop_unseen_targets: drop queries whose target never occurs in training.
    """

    test_days: float = 2.0
    valid_days: float = 2.0
    train_days: float | None = None
    seconds_per_day: float = 86400.0
    max_queries_per_user: int | None = None
    min_history: int = 1
    history: History = "before_time"
    drop_unseen_targets: bool = False

    def apply(self, sequences: Sequences) -> TimeCutSplit:
        """``temporal_split(sequences, **options)``."""
        return temporal_split(sequences, **asdict(self))

    def key(self) -> str:
        """Stable hash of the options."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def describe_split(split: TimeCutSplit) -> str:
    """One log line: cut dates (UTC, when timestamps look like Unix seconds) and sizes."""
    import datetime

    def when(t: float) -> str:
        if not np.isfinite(t):
            return "-inf"
        if 1e8 < t < 4e9:
            return datetime.datetime.fromtimestamp(t, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M")
        return f"{t:g}"

    train_events = int((split.train_stop - split.train_start).sum())
    return (
        f"temporal split: train [{when(split.train_from)}, {when(split.valid_cut)}) {train_events:,} events; "
        f"valid [{when(split.valid_cut)}, {when(split.test_cut)}) {len(split.valid):,} queries from "
        f"{len(np.unique(split.valid.user)):,} users; test [{when(split.test_cut)}, end] {len(split.test):,} queries "
        f"from {len(np.unique(split.test.user)):,} users"
    )
