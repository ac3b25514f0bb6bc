"""The exact top-k over the whole catalogue, in item chunks: a running top-k, never a queries x items matrix.

``catalogue_scan`` (``seqrec.tasks.catalogue``) counts one target's rank; this scan keeps the best ``k`` items of
each query instead (what the Python API, ``predict`` and serving return). Same chunks, same masks (padding,
history, candidates), same scores (``SequenceRecommender.score_chunk``), so an item's rank here equals the rank
the metrics count: 1 + the number of allowed items scored strictly higher. Order: score descending, then item id
ascending. Memory O(B · chunk) whatever the catalogue size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Protocol

import torch
from torch import Tensor

Ties = Literal["all", "cut"]
ITEM_CHUNK_ELEMENTS = 1 << 24  # scores held at once: users x item chunk <= 16M (64 MB in float32)


class ChunkScorer(Protocol):
    """What the scan needs of a model: the catalogue size and the scores of an item chunk (``SequenceRecommender``
    is one; serving's CTR scorer is another)."""

    num_items: int

    def score_chunk(self, hidden: Tensor, start: int, stop: int) -> Tensor:
        """(B, stop - start) scores of items start..stop-1, a fresh tensor (it is masked in place)."""
        ...


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
    model: ChunkScorer,
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
    model: ChunkScorer,
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
    model: ChunkScorer, hidden: Tensor, best_s: Tensor, best_i: Tensor, tied: Tensor, threshold: Tensor,
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
