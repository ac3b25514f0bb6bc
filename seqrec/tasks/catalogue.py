"""One chunked scan over the whole catalogue: each target's rank and, optionally, its softmax NLL.

Memory is O(B · chunk_size) whatever the catalogue size, so a 2M-item catalogue fits. With one target per
query the rank is all a ranking metric needs, so a running count of higher-scored items replaces a running
top-k. Written here rather than with ``torch.topk`` because a count needs no sort and no (B, k) state.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from seqrec.models.base import SequenceRecommender


def catalogue_scan(
    model: SequenceRecommender,
    hidden: Tensor,
    target: Tensor,
    exclude: Tensor | None = None,
    chunk_size: int = 65536,
    with_nll: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """(rank (B,), NLL (B,) or None) of each target among the items 1..N.

    hidden (B, d), target (B,) in 1..N, exclude (B, L) ids never counted above the target (a history to
    mask; 0 entries are padding and ignored). rank = 1 + #{j ∉ {0, target} ∪ exclude : s_j > s_target}
    (ties count for the target). With ``with_nll``: NLL = logsumexp_{j ≥ 1} s_j − s_target over the whole
    catalogue (padding excluded, ``exclude`` not applied: a softmax is over every item), by a running
    log-sum-exp in float32.
    """
    target_scores = model.score(hidden, target.unsqueeze(-1)).squeeze(-1)  # (B,)
    if with_nll:
        target_scores = target_scores.float()
        running_max = torch.full_like(target_scores, -math.inf)
        running_sum = torch.zeros_like(target_scores)
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    above = torch.zeros_like(target)
    num_rows = model.num_items + 1
    for start in range(0, num_rows, chunk_size):
        stop = min(start + chunk_size, num_rows)
        scores = model.score_chunk(hidden, start, stop)  # (B, C), a fresh tensor: masked in place below
        scores = scores.float() if with_nll else scores
        if start == 0:
            scores[:, 0] = -math.inf
        if with_nll:
            new_max = torch.maximum(running_max, scores.max(dim=-1).values)
            running_sum = running_sum * torch.exp(running_max - new_max) + torch.exp(scores - new_max.unsqueeze(-1)).sum(-1)
            running_max = new_max
        if exclude is not None:
            inside = (exclude >= start) & (exclude < stop)  # (B, L)
            r, c = inside.nonzero(as_tuple=True)
            scores[r, exclude[r, c] - start] = -math.inf
        own = (target >= start) & (target < stop)
        scores[rows[own], target[own] - start] = -math.inf
        above += torch.count_nonzero(scores > target_scores.unsqueeze(-1), dim=-1)
    nll = running_max + torch.log(running_sum) - target_scores if with_nll else None
    return above + 1, nll
