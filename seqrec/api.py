"""The Python API: load a trained run and recommend in the data's own ids.

    import seqrec

    run = seqrec.load_run("runs/sasrec_interactions/version_0")      # a run directory or a checkpoint
    run.recommend({"alice": ["m1", "m7", "m3"]}, k=10)               # {"alice": [(item, score), ...]}
    run.recommend_users(["alice", "bob"], k=10)                      # from the users' histories in the data

    state = run.init_state()                                         # recurrent models (LRURec): O(1) per event
    state = run.update(state, "m1")
    run.topk(state, k=10)                                            # [[(item, score), ...]]

The ranking is the evaluation's (``NextItemTask.ranks``): the model's hidden state at the newest of the last
``max_len`` events, scores against the whole catalogue in item chunks (``catalogue_topk``: a running top-k,
never a users x items matrix), items in the history masked when asked, item 0 (padding) never. Ties: an
item's ``rank`` is 1 + the number of items scored strictly higher (how the metrics count a target's rank), and
``ties="all"`` keeps every item whose rank is <= k, so a list can exceed k only where items tie with the k-th.
``python -m seqrec predict`` (``seqrec/predict.py``) writes the same lists for many users to a file.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import yaml
from torch import Tensor

from seqrec.callbacks.checkpoint_io import CheckpointError
from seqrec.data.sequences import RawIdIndex, Sequences
from seqrec.datamodules.base import RecommendationData
from seqrec.models.base import RecurrentRecommender, RecurrentState, SequenceRecommender
from seqrec.runs import check_run_checkpoint, checkpoint_fix, data_overrides, find_run_dir, resolve_checkpoint
from seqrec.tasks.base import RanksTargets

log = logging.getLogger("seqrec.api")

Ties = Literal["all", "cut"]
Exclude = Literal["window", "all", "none"]
ITEM_CHUNK_ELEMENTS = 1 << 24  # scores held at once: users x item chunk <= 16M (64 MB in float32)


def _precision_of(config_path: Path) -> str:
    """The trainer precision a run was evaluated under ("32-true" when unset)."""
    document = yaml.safe_load(config_path.read_text()) or {}
    return str((document.get("trainer") or {}).get("precision") or "32-true")


# --- the exact ranking, in chunks ---------------------------------------------------------------------
@dataclass
class TopK:
    """Per query, the best items in order (score desc, then item id asc); padded with ``valid`` False.

    ``ranks`` = 1 + the number of allowed items scored strictly higher (a tie shares the rank, as the
    metrics count a target's rank).
    """

    items: Tensor  # (B, M) long, 0 where not valid
    scores: Tensor  # (B, M) the model's score dtype (float32 for half precision)
    ranks: Tensor  # (B, M) long
    valid: Tensor  # (B, M) bool


def _order(scores: Tensor, items: Tensor) -> tuple[Tensor, Tensor]:
    """Rows sorted by (score desc, item asc): a stable sort by item, then a stable sort by score."""
    by_item = torch.sort(items, dim=1, stable=True).indices
    scores, items = scores.gather(1, by_item), items.gather(1, by_item)
    by_score = torch.sort(scores, dim=1, descending=True, stable=True).indices
    return scores.gather(1, by_score), items.gather(1, by_score)


def _rows_of(spans: tuple[Tensor, Tensor] | None, start: int, stop: int) -> tuple[Tensor, Tensor] | None:
    """The (row, column - start) pairs of a COO list ``spans = (rows, items)`` that fall in ``[start, stop)``."""
    if spans is None:
        return None
    rows, items = spans
    inside = (items >= start) & (items < stop)
    return rows[inside], items[inside] - start


def masked_chunk(
    model: SequenceRecommender,
    hidden: Tensor,
    start: int,
    stop: int,
    exclude: tuple[Tensor, Tensor] | None,
    allowed: Tensor | None,
    allowed_pairs: tuple[Tensor, Tensor] | None,
) -> Tensor:
    """Scores of items ``start..stop-1`` (B, C), -inf at padding, excluded and not-allowed items."""
    scores = model.score_chunk(hidden, start, stop)  # (B, C), a fresh tensor (the contract): masked in place
    if start == 0:
        scores[:, 0] = -math.inf
    hit = _rows_of(exclude, start, stop)
    if hit is not None:
        scores[hit[0], hit[1]] = -math.inf
    if allowed is not None:
        scores[:, ~allowed[start:stop]] = -math.inf
    pairs = _rows_of(allowed_pairs, start, stop)
    if pairs is not None:
        keep = torch.zeros_like(scores, dtype=torch.bool)
        keep[pairs[0], pairs[1]] = True
        scores = scores.masked_fill(~keep, -math.inf)
    return scores


def _comparable(scores: Tensor) -> Tensor:
    """Scores in a dtype that sorts exactly: half precision widened to float32 (order kept), float32/64 as they are
    (the evaluation compares float64 scores, e.g. the popularity model's tie-break, without rounding them)."""
    return scores.float() if scores.dtype in (torch.float16, torch.bfloat16) else scores


def catalogue_topk(
    model: SequenceRecommender,
    hidden: Tensor,
    k: int,
    exclude: tuple[Tensor, Tensor] | None = None,
    allowed: Tensor | None = None,
    allowed_pairs: tuple[Tensor, Tensor] | None = None,
    chunk_size: int = 65536,
    ties: Ties = "all",
) -> TopK:
    """The best ``k`` items for each hidden state (B, d) in one chunked pass over the catalogue.

    exclude: ``(rows, items)`` pairs never recommended (the history); allowed: an (N + 1,) bool mask of the
    items that may be; allowed_pairs: ``(rows, items)`` per-row candidates (everything else is excluded).
    Scores are ``model.score_chunk`` as in the evaluation's ``catalogue_scan``; memory is O(B · chunk_size).
    A running top-(k+1) per row, merged chunk by chunk in the order (score desc, item asc); a chunk whose
    k-th score ties with an item left out is re-sorted stably, so ties go to the lower item id exactly.
    ``ties="all"`` then adds every item tying with the k-th score (a second pass, only for such rows).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    batch, num_rows = hidden.shape[0], model.num_items + 1
    keep = k + 1 if ties == "all" else k
    chunk = max(1, min(chunk_size, ITEM_CHUNK_ELEMENTS // max(batch, 1)))
    best_s: Tensor | None = None
    best_i = torch.zeros((batch, 0), dtype=torch.long, device=hidden.device)
    for start in range(0, num_rows, chunk):
        stop = min(start + chunk, num_rows)
        scores = _comparable(masked_chunk(model, hidden, start, stop, exclude, allowed, allowed_pairs))  # (B, C)
        if best_s is None:
            best_s = torch.full((batch, 0), -math.inf, dtype=scores.dtype, device=hidden.device)
        m = min(keep, stop - start)
        values, index = scores.topk(min(m + 1, stop - start), dim=1)  # (B, m + 1), sorted: one more to see ties
        overflow = torch.zeros(len(values), dtype=torch.bool, device=values.device)
        if values.shape[1] > m:  # the (m+1)-th equal to the m-th: topk may have left out a lower id of that score
            overflow = (values[:, m] == values[:, m - 1]) & torch.isfinite(values[:, m - 1])
        values, index = values[:, :m], index[:, :m]
        if bool(overflow.any()):  # take the lowest ids of the tied score exactly: a stable sort of those rows
            rows = overflow.nonzero().squeeze(1)
            sorted_values, sorted_index = torch.sort(scores[rows], dim=1, descending=True, stable=True)
            values[rows], index[rows] = sorted_values[:, :m], sorted_index[:, :m]
        best_s, best_i = _order(torch.cat([best_s, values], 1), torch.cat([best_i, index + start], 1))
        best_s, best_i = best_s[:, :keep], best_i[:, :keep]
    if ties == "cut" or best_s.shape[1] <= k:
        return _finish(best_s[:, :k], best_i[:, :k])
    threshold = best_s[:, k - 1]  # (B,)
    tied = (best_s[:, k] == threshold) & torch.isfinite(threshold)
    best_s, best_i = best_s[:, :k], best_i[:, :k]
    if not bool(tied.any()):
        return _finish(best_s, best_i)
    return _finish(*_with_all_ties(model, hidden, best_s, best_i, tied, threshold, exclude, allowed, allowed_pairs, chunk))


def _with_all_ties(
    model: SequenceRecommender, hidden: Tensor, best_s: Tensor, best_i: Tensor, tied: Tensor, threshold: Tensor,
    exclude: tuple[Tensor, Tensor] | None, allowed: Tensor | None, allowed_pairs: tuple[Tensor, Tensor] | None,
    chunk: int,
) -> tuple[Tensor, Tensor]:
    """Rows in ``tied``: the items scored above the k-th score plus every item equal to it (a second pass)."""
    rows = tied.nonzero().squeeze(1)  # (R,)
    remap = torch.full((hidden.shape[0],), -1, dtype=torch.long, device=hidden.device)
    remap[rows] = torch.arange(len(rows), device=hidden.device)

    def restrict(pairs: tuple[Tensor, Tensor] | None) -> tuple[Tensor, Tensor] | None:
        if pairs is None:
            return None
        new_rows = remap[pairs[0]]
        return new_rows[new_rows >= 0], pairs[1][new_rows >= 0]

    sub_hidden, sub_exclude, sub_pairs, sub_threshold = hidden[rows], restrict(exclude), restrict(allowed_pairs), threshold[rows]
    found_r, found_c = [], []
    for start in range(0, model.num_items + 1, chunk):
        stop = min(start + chunk, model.num_items + 1)
        scores = _comparable(masked_chunk(model, sub_hidden, start, stop, sub_exclude, allowed, sub_pairs))
        r, c = (scores == sub_threshold.unsqueeze(1)).nonzero(as_tuple=True)
        found_r.append(r)
        found_c.append(c + start)
    r, c = torch.cat(found_r), torch.cat(found_c)
    order = torch.argsort(r * (model.num_items + 1) + c)
    r, c = r[order], c[order]
    position = torch.arange(len(r), device=r.device) - torch.searchsorted(r, r)  # index within its row
    most = int(position.max()) + 1
    tied_s = torch.full((len(rows), most), -math.inf, dtype=best_s.dtype, device=hidden.device)
    tied_i = torch.zeros((len(rows), most), dtype=torch.long, device=hidden.device)
    tied_s[r, position], tied_i[r, position] = sub_threshold[r], c
    k = best_s.shape[1]
    above = best_s[rows] > sub_threshold.unsqueeze(1)  # (R, k): the items strictly above are already exact
    merged_s = torch.cat([best_s[rows].masked_fill(~above, -math.inf), tied_s], 1)
    merged_i = torch.cat([best_i[rows].masked_fill(~above, 0), tied_i], 1)
    merged_s, merged_i = _order(merged_s, merged_i)
    width = max(k, int(torch.isfinite(merged_s).sum(dim=1).max()))
    out_s = torch.full((hidden.shape[0], width), -math.inf, dtype=best_s.dtype, device=hidden.device)
    out_i = torch.zeros((hidden.shape[0], width), dtype=torch.long, device=hidden.device)
    out_s[:, :k], out_i[:, :k] = best_s, best_i
    out_s[rows], out_i[rows] = merged_s[:, :width], merged_i[:, :width]
    return out_s, out_i


def _finish(scores: Tensor, items: Tensor) -> TopK:
    """Validity (finite scores) and competition ranks of rows already in (score desc, item asc) order."""
    valid = torch.isfinite(scores)
    positions = torch.arange(1, scores.shape[1] + 1, device=scores.device).expand_as(scores)
    new = torch.ones_like(valid)
    new[:, 1:] = scores[:, 1:] != scores[:, :-1]
    ranks = torch.where(new, positions, torch.zeros_like(positions)).cummax(dim=1).values
    return TopK(items=torch.where(valid, items, torch.zeros_like(items)), scores=scores, ranks=ranks, valid=valid)


# --- histories as flat arrays -------------------------------------------------------------------------
def flat_spans(starts: np.ndarray, stops: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, offset) of every position of spans ``[starts[r], stops[r])``, row-major, without a Python loop."""
    lengths = np.maximum(stops - starts, 0)
    rows = np.repeat(np.arange(len(starts)), lengths)
    offsets = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(starts, lengths)
    return rows, offsets


def left_padded_windows(items: np.ndarray, starts: np.ndarray, stops: np.ndarray, max_len: int) -> np.ndarray:
    """(B, max_len) the newest ``max_len`` items of each span, left-padded with 0 (as ``EvalQueries`` builds them)."""
    window_starts = np.maximum(starts, stops - max_len)
    rows, offsets = flat_spans(window_starts, stops)
    lengths = stops - window_starts
    columns = offsets - np.repeat(window_starts, lengths) + np.repeat(max_len - lengths, lengths)
    out = np.zeros((len(starts), max_len), dtype=np.int64)
    out[rows, columns] = items[offsets]
    return out


# --- a loaded run ---------------------------------------------------------------------------------------
@dataclass
class SessionState:
    """The state of a recurrent model for a batch of users, fed event by event (``TrainedRun.update``)."""

    state: RecurrentState
    hidden: Tensor | None  # (B, d) after the last event, None before any
    seen: list[list[int]]  # item ids fed per row (for exclude_seen)


class TrainedRun:
    """A trained run, ready to recommend: its model (weights from a checkpoint), data (ids, histories) and config.

    Build it with ``load_run``. Raw ids are the data's own (int or str as the source had them); an item the
    data does not know has no embedding and is skipped in a history (logged).
    """

    def __init__(self, run: Any, run_dir: Path, checkpoint: Path, device: torch.device, precision: str) -> None:
        self.run, self.run_dir, self.checkpoint, self.device = run, run_dir, checkpoint, device
        self.config = run.config
        self.task = run.task
        self.datamodule = run.datamodule
        self.model: SequenceRecommender = self.task.model
        self.precision = precision
        if not isinstance(self.datamodule, RecommendationData):
            raise TypeError(f"{type(self.datamodule).__name__} is not a seqrec.datamodules.base.RecommendationData")
        # the events a query reads, as the evaluation's windows (max_len - 1 for a cloze model, which appends [mask])
        self.max_len: int = self.datamodule.history_len
        ranker = self.task if isinstance(self.task, RanksTargets) else None  # a CTR task: the defaults
        self.mask_history: bool = ranker.mask_history if ranker is not None else True
        self.chunk_size: int = ranker.score_chunk_size if ranker is not None else 65536
        self.eval_batch_size: int = self.datamodule.eval_batch_size
        self._item_index: RawIdIndex | None = None
        self._user_index: RawIdIndex | None = None

    # --- ids ----------------------------------------------------------------------------------------
    @property
    def sequences(self) -> Sequences:
        """The preprocessed sequences of the run's data (user histories, raw ids)."""
        return self.datamodule.sequences

    @property
    def item_ids(self) -> np.ndarray:
        """(N,) raw ids of the catalogue, in item-id order 1..N."""
        return self.sequences.raw_item_ids()

    @property
    def user_ids(self) -> np.ndarray:
        """(U,) raw ids of the users in the data."""
        return self.sequences.raw_user_ids()

    def item_rows(self, raw: Sequence | np.ndarray) -> np.ndarray:
        """Item ids (1..N) of raw item ids; 0 where the catalogue does not have one."""
        if self._item_index is None:
            self._item_index = RawIdIndex(self.sequences.item_ids)
        return np.maximum(self._item_index.lookup(raw if isinstance(raw, np.ndarray) else np.array(list(raw), dtype=object)), 0)

    def user_rows(self, raw: Sequence | np.ndarray) -> np.ndarray:
        """User rows of raw user ids; -1 where the data does not have one."""
        if self._user_index is None:
            self._user_index = RawIdIndex(self.sequences.user_ids)
        return self._user_index.lookup(raw if isinstance(raw, np.ndarray) else np.array(list(raw), dtype=object))

    # --- the model -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def inference(self) -> Iterator[None]:
        """Eval mode, no autograd, and the autocast the run was evaluated under (``trainer.precision``)."""
        autocast: contextlib.AbstractContextManager = contextlib.nullcontext()
        if self.precision in ("bf16-mixed", "bf16"):
            autocast = torch.autocast(self.device.type, dtype=torch.bfloat16)
        elif self.precision in ("16-mixed", "16"):
            autocast = torch.autocast(self.device.type, dtype=torch.float16)
        self.task.eval()
        with torch.inference_mode(), autocast:
            yield

    def hidden(self, windows: np.ndarray) -> Tensor:
        """(B, d) the model's state at the newest position of left-padded windows (B, max_len), as ``NextItemTask.ranks``
        computes it (``SequenceRecommender.query_hidden``)."""
        return self.model.query_hidden(torch.from_numpy(windows).to(self.device))

    def rank_spans(
        self,
        starts: np.ndarray,
        stops: np.ndarray,
        k: int,
        exclude_seen: Exclude = "window",
        allowed: Tensor | None = None,
        allowed_pairs: tuple[np.ndarray, np.ndarray] | None = None,
        ties: Ties = "all",
        items: np.ndarray | None = None,
    ) -> TopK:
        """Top-k for queries whose histories are ``items[starts[q]:stops[q]]`` (default: the data's sequences)."""
        items = self.sequences.items if items is None else items
        windows = left_padded_windows(items, starts, stops, self.max_len)
        exclude = None
        if exclude_seen != "none":
            span_starts = np.maximum(starts, stops - self.max_len) if exclude_seen == "window" else starts
            rows, offsets = flat_spans(span_starts, stops)
            exclude = (torch.from_numpy(rows).to(self.device), torch.from_numpy(items[offsets]).to(self.device))
        pairs = None
        if allowed_pairs is not None:
            pairs = (torch.from_numpy(allowed_pairs[0]).to(self.device), torch.from_numpy(allowed_pairs[1]).to(self.device))
        with self.inference():
            hidden = self.hidden(windows)
            return catalogue_topk(self.model, hidden, k, exclude, allowed, pairs, self.chunk_size, ties)

    def _decode(self, top: TopK) -> list[list[tuple[Any, float]]]:
        """Per row, [(raw item, score), ...] in rank order."""
        raw = self.sequences.raw_item_ids(top.items.cpu().numpy())
        scores, valid = top.scores.double().cpu().numpy(), top.valid.cpu().numpy()
        return [[(raw[r, j].item(), float(scores[r, j])) for j in np.flatnonzero(valid[r])] for r in range(len(valid))]

    # --- recommending ----------------------------------------------------------------------------------
    def recommend(
        self,
        histories: Mapping[Any, Sequence] | Sequence[Sequence],
        k: int = 10,
        exclude_seen: bool | Exclude = True,
        candidates: Sequence | None = None,
        ties: Ties = "all",
        batch_size: int | None = None,
    ) -> dict[Any, list[tuple[Any, float]]] | list[list[tuple[Any, float]]]:
        """Top-k (raw item, score) for each history of raw item ids, oldest first.

        histories: ``{user: [items]}`` (returns a dict) or ``[[items], ...]`` (returns a list). The model reads
        the newest ``max_len`` known items, as in the evaluation. exclude_seen: True (or "all") never returns
        an item of the history; "window" only the last ``max_len`` (what the evaluation masks); False keeps
        them. candidates: raw item ids to choose from (default: the whole catalogue). Scores may differ in the
        last float bits with the batch a history is scored in (batched matrix products); the lists practically never.
        """
        keys = list(histories.keys()) if isinstance(histories, Mapping) else None
        lists = [list(h) for h in (histories.values() if isinstance(histories, Mapping) else histories)]
        encoded = [self.item_rows(h) if h else np.zeros(0, dtype=np.int64) for h in lists]
        unknown = sum(int((e == 0).sum()) for e in encoded)
        if unknown:
            log.warning("recommend: %d history items are not in the catalogue and were skipped", unknown)
        encoded = [e[e > 0] for e in encoded]
        if any(len(e) == 0 for e in encoded):
            empty = next(i for i, e in enumerate(encoded) if len(e) == 0)
            raise ValueError(f"history {keys[empty] if keys else empty!r} has no item the catalogue knows; "
                             "a sequence model needs at least one")
        mode: Exclude = "all" if exclude_seen is True else "none" if exclude_seen is False else exclude_seen
        allowed = self._allowed(candidates)
        flat = np.concatenate(encoded) if encoded else np.zeros(0, dtype=np.int64)
        lengths = np.array([len(e) for e in encoded], dtype=np.int64)
        stops = np.cumsum(lengths)
        starts = stops - lengths
        out: list[list[tuple[Any, float]]] = []
        batch_size = batch_size or self.eval_batch_size
        for first in range(0, len(encoded), batch_size):
            part = slice(first, first + batch_size)
            out += self._decode(self.rank_spans(starts[part], stops[part], k, mode, allowed, ties=ties, items=flat))
        return dict(zip(keys, out)) if keys is not None else out

    def recommend_users(
        self, users: Sequence, k: int = 10, exclude_seen: bool | Exclude = True, ties: Ties = "all"
    ) -> dict[Any, list[tuple[Any, float]]]:
        """Top-k for users of the data (raw ids), from their whole histories; KeyError for an unknown user."""
        rows = self.user_rows(users)
        if (rows < 0).any():
            raise KeyError(f"unknown user {list(users)[int(np.flatnonzero(rows < 0)[0])]!r}: not in the run's data")
        sequences = self.sequences
        mode: Exclude = "all" if exclude_seen is True else "none" if exclude_seen is False else exclude_seen
        top = self.rank_spans(sequences.indptr[rows], sequences.indptr[rows + 1], k, mode, ties=ties)
        return dict(zip(list(users), self._decode(top)))

    def _allowed(self, candidates: Sequence | None) -> Tensor | None:
        """An (N + 1,) bool mask of raw candidate items (None: every item)."""
        if candidates is None:
            return None
        ids = self.item_rows(candidates)
        if (ids == 0).any():
            log.warning("%d candidate items are not in the catalogue and were skipped", int((ids == 0).sum()))
        mask = torch.zeros(self.model.num_items + 1, dtype=torch.bool, device=self.device)
        mask[torch.from_numpy(ids[ids > 0]).to(self.device)] = True
        return mask

    # --- recurrent models: O(1) state per user ------------------------------------------------------
    def _recurrent(self) -> RecurrentRecommender:
        if not isinstance(self.model, RecurrentRecommender):
            raise TypeError(f"{type(self.model).__name__} is not a recurrent model (init_state/step); use recommend()")
        return self.model

    def init_state(self, batch_size: int = 1) -> SessionState:
        """The empty state of ``batch_size`` users (recurrent models only, e.g. LRURec)."""
        model = self._recurrent()
        with self.inference():
            return SessionState(model.init_state(batch_size), None, [[] for _ in range(batch_size)])

    def update(self, state: SessionState, item: Any | Sequence) -> SessionState:
        """Feed one event per user (a raw item id, or one per row of the batch) -> the new state; O(1) per event.

        An item the catalogue does not know leaves that row's state unchanged (it has no embedding).
        """
        model = self._recurrent()
        raw = list(item) if isinstance(item, (list, tuple, np.ndarray)) else [item]
        if len(raw) != len(state.seen):
            raise ValueError(f"update: {len(raw)} items for a state of {len(state.seen)} users")
        ids = self.item_rows(raw)
        with self.inference():
            new_state, hidden = model.step(state.state, torch.from_numpy(ids).to(self.device))
            if state.hidden is not None:  # rows fed an unknown item keep their previous output
                hidden = torch.where(torch.from_numpy(ids > 0).to(self.device).unsqueeze(1), hidden, state.hidden)
        seen = [s + ([int(i)] if i > 0 else []) for s, i in zip(state.seen, ids)]
        return SessionState(new_state, hidden, seen)

    def topk(self, state: SessionState, k: int = 10, exclude_seen: bool = True, ties: Ties = "all") -> list[list[tuple[Any, float]]]:
        """Top-k (raw item, score) per row of a recurrent state."""
        if state.hidden is None:
            raise ValueError("topk: feed at least one event with update() first")
        exclude = None
        if exclude_seen:
            rows = np.repeat(np.arange(len(state.seen)), [len(s) for s in state.seen])
            items = np.array([i for s in state.seen for i in s], dtype=np.int64)
            exclude = (torch.from_numpy(rows).to(self.device), torch.from_numpy(items).to(self.device))
        with self.inference():
            top = catalogue_topk(self.model, state.hidden, k, exclude, None, None, self.chunk_size, ties)
        return self._decode(top)


def load_run(
    path: str | Path,
    checkpoint: str | Path = "best",
    device: str = "cpu",
    overrides: Sequence[str] = (),
    threads: int | None = None,
) -> TrainedRun:
    """A trained run from its directory (``runs/<experiment>/version_N``), its experiment folder, or a checkpoint.

    checkpoint: "best" (the best validation checkpoint), "last", or a path; a run's checkpoints are found inside
    its directory, so a copied or moved run loads its own (``seqrec.runs``), and a file that is not a whole checkpoint
    of this run's model is a one-line ``CheckpointError`` naming it and the checkpoint to use instead. device: "cpu",
    "cuda", "auto". overrides: extra dotted flags for the run's config (e.g. ``["--data.source.path",
    "moved/events.csv"]`` when the data is neither where it was nor at the same place relative to the run; the data
    must be the same). Builds the run through ``seqrec.build`` from its ``config.yaml`` without a logger (nothing
    is written to the run directory).
    """
    from seqrec.build import bind, build, default_threads

    given = Path(path).expanduser()
    run_dir = find_run_dir(given)
    ckpt = given if given.is_file() and str(checkpoint) == "best" else resolve_checkpoint(run_dir, checkpoint)
    check_run_checkpoint(ckpt, run_dir)
    config_path = run_dir / "config.yaml"
    precision = _precision_of(config_path)
    args = [
        "--config", str(config_path),
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto",
        "--trainer.precision", "32-true", "--threads", str(threads or default_threads()),
        *data_overrides(run_dir, overrides), *overrides,
    ]
    run = build(args)
    bind(run.task, run.datamodule)
    load_weights(run.task, ckpt, run_dir)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    target = torch.device(device)
    run.task.to(target)
    if precision in ("bf16-true", "16-true", "64-true", "64"):
        run.task.to({"bf16-true": torch.bfloat16, "16-true": torch.float16}.get(precision, torch.float64))
    log.info("loaded %s (%s, %s)", ckpt, type(run.task.model).__name__, run.datamodule.sequences.summary())
    return TrainedRun(run, run_dir, ckpt, target, precision)


def load_weights(task: torch.nn.Module, checkpoint: Path, run_dir: Path) -> None:
    """The checkpoint's ``state_dict`` into ``task``; CheckpointError naming the file and the fix when it is not a
    checkpoint of this run's model (another run's, another config's, or no Lightning checkpoint at all)."""
    state = _load_state(checkpoint)
    if not isinstance(state, dict) or not isinstance(state.get("state_dict"), dict):
        raise CheckpointError(f"checkpoint {checkpoint} is not a Lightning checkpoint (no state_dict); "
                              f"{checkpoint_fix(run_dir, checkpoint)}")
    try:
        task.load_state_dict(state["state_dict"])
    except RuntimeError as error:
        problems = [line.strip() for line in str(error).splitlines()[1:] if line.strip()] or [str(error)]
        raise CheckpointError(
            f"checkpoint {checkpoint} does not fit this run's model ({problems[0][:300]}"
            f"{f'; {len(problems) - 1} more' if len(problems) > 1 else ''}): it is another run's or another config's; "
            f"{checkpoint_fix(run_dir, checkpoint)}"
        ) from None


def _load_state(path: Path) -> dict:
    """A checkpoint's contents: tensors only where possible, else a full unpickle (a run's own checkpoint)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 (pickle.UnpicklingError and friends)
        log.info("checkpoint %s needs a full unpickle (%s)", path, type(error).__name__)
        return torch.load(path, map_location="cpu", weights_only=False)
