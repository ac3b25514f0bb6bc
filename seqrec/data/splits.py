"""Train / validation / test splits over ``Sequences`` (views by offsets; nothing is copied per user)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqrec.data.sequences import Sequences


@dataclass
class EvalExamples:
    """Evaluation queries: the input of query j is ``items[start[j]:stop[j]]`` and its answer ``target[j]``.

    ``user[j]`` is the user row; offsets index ``Sequences.items``; the target is never inside its input
    (``stop[j]`` is the target's own offset for leave-last-out).
    """

    user: np.ndarray  # (Q,) int64
    start: np.ndarray  # (Q,) int64
    stop: np.ndarray  # (Q,) int64
    target: np.ndarray  # (Q,) int64

    def __len__(self) -> int:
        return len(self.user)


@dataclass
class Split:
    """Training spans per user (``[train_start[u], train_stop[u])``) plus validation and test queries."""

    sequences: Sequences
    train_start: np.ndarray  # (U,) int64
    train_stop: np.ndarray  # (U,) int64
    valid: EvalExamples
    test: EvalExamples

    def train_mask(self) -> np.ndarray:
        """(nnz,) True at the offsets that belong to some user's training span ``[train_start, train_stop)``."""
        lengths = self.sequences.lengths()
        offsets = np.arange(len(self.sequences.items))
        return (offsets >= np.repeat(self.train_start, lengths)) & (offsets < np.repeat(self.train_stop, lengths))


def leave_last_out(sequences: Sequences, min_length: int = 3) -> Split:
    """LRURec / SASRec leave-last-out split.

    For a user with ``n >= min_length`` events ``s_1..s_n``: train = ``s_1..s_{n-2}``, validation
    predicts ``s_{n-1}`` from train, test predicts ``s_n`` from train + validation. Users with fewer
    events contribute their whole sequence to training only.
    """
    start = sequences.indptr[:-1].astype(np.int64)
    end = sequences.indptr[1:].astype(np.int64)
    evaluated = (end - start) >= min_length
    train_stop = np.where(evaluated, end - 2, end)
    users = np.flatnonzero(evaluated).astype(np.int64)
    if len(users) == 0:
        raise ValueError(
            f"leave_last_out: no user has >= {min_length} events, so validation and test would be empty"
        )
    valid = EvalExamples(user=users, start=start[users], stop=end[users] - 2, target=sequences.items[end[users] - 2])
    test = EvalExamples(user=users, start=start[users], stop=end[users] - 1, target=sequences.items[end[users] - 1])
    return Split(sequences=sequences, train_start=start, train_stop=train_stop, valid=valid, test=test)
