"""The typed contracts of every model, in one place (models import torch only).

- ``SequenceRecommender``: the base of next-item models (item ids in, hidden states out, scores against the
  item table) and its ``causal`` flag;
- optional capabilities a task asks for with ``isinstance`` (``typing.Protocol``, runtime-checkable):
  ``ItemFeatureConsumer`` (item-feature tables), ``CountingRecommender`` (fitted by counting, no gradient),
  ``RecurrentRecommender`` (O(1)-state inference event by event), ``ClozeRecommender`` (trained on masked items,
  queried with a ``[mask]`` token appended: BERT4Rec);
- cost hooks the MACs and memory callbacks read: ``DeclaresMACs``, ``DeclaresStateBytes``,
  ``DeclaresKeptLengths``, ``DeclaresRequestMACs`` (conventions: ``seqrec.cost.flops``, ``seqrec.cost.state``);
- ``CTRBackbone``: the abstract base of CTR models (history and targets in, click logits out, a stored state);
- the compressor contract of attention CTR backbones (``TokenState``, ``LayerCache``, ``KVState``,
  ``LayerTrace``, ``Compressor``), defined in ``seqrec.models.ctr.state`` and re-exported here.

A runtime-checkable Protocol checks that the methods exist, not their signatures: the signatures below are
the contract, and ``tests/models/test_contracts.py`` checks the shipped models against them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from seqrec.models.ctr.state import Compressor, KVState, LayerCache, LayerTrace, TokenState

__all__ = [
    "CTRBackbone",
    "ClozeRecommender",
    "Compressor",
    "CountingRecommender",
    "DeclaresKeptLengths",
    "DeclaresMACs",
    "DeclaresRequestMACs",
    "DeclaresStateBytes",
    "ItemFeatureConsumer",
    "KVState",
    "LayerCache",
    "LayerTrace",
    "RecurrentRecommender",
    "RecurrentState",
    "SequenceRecommender",
    "TokenState",
    "check_embedding_init",
    "positions_from_oldest",
    "require_positive",
    "truncated_normal_",
    "truncated_normal_tables_",
]

QUERY_CHUNK_TOKENS = 16_384
"""Most rows × positions ``SequenceRecommender.query_hidden`` runs at once out of training. glibc serves a request
of 32 MiB or more (its largest mmap threshold, ``seqrec.allocator``) with fresh pages that fault in on first touch,
every time; a model keeps about 1 KiB per token in its widest intermediates (LRURec's (B, L, 2H) complex states
and (B, L, 4d) FFN activations at d = 64; SASRec's (B, heads, L, L) attention at L = 200), so a 256 × 200
evaluation batch (LRURec's protocol) allocated ~50 MB per intermediate. ML-1M validation passes, 1 thread, slice
sizes alternating in one process (scratch script, load 1.3-1.6 with the measuring process itself): SASRec 1.59 s
unsliced, 1.24-1.27 s at 12,800-32,768 tokens; BERT4Rec 2.58 vs 2.33 s at 16,384; LRURec (whose drive is masked in
place, so its widest intermediate is one) 1.43 s unsliced vs 1.51-1.74 s sliced, within this machine's noise."""

RecurrentState = tuple[Tensor, ...]
"""Per-user recurrent state of a ``RecurrentRecommender``: one tensor (B, ...) per layer."""


# --- next-item models ---------------------------------------------------------------------------------


class SequenceRecommender(nn.Module):
    """Base for next-item models: item ids in, hidden states out, scores against the item table.

    Conventions, shared by every model and the task that wraps it:
    - item ids are ``1..num_items``; ``0`` is padding; sequences are **left**-padded, so the
      newest event of every row sits at position ``L-1``;
    - ``forward(items)`` maps ``items (B, L)`` to hidden states ``(B, L, d)``; the padding mask is
      ``items == 0`` and padding must never influence a real position;
    - ``item_embeddings()`` is the ``(num_items + 1, d)`` table used for scoring and
      ``item_bias()`` an optional ``(num_items + 1,)`` bias, so
      ``scores = hidden @ item_embeddings().T + item_bias()``;
    - ``causal``: True when hidden state t depends on items ≤ t only. False means a position may see
      later items (e.g. MLP4Rec with ``causal=False``, whose sequence mixer reads the whole window); the
      task then refuses training batches with labels before the last position, since a later input
      would reveal them;
    - ``left_padding_invariant``: True when dropping leading padding columns changes no real position's
      hidden state (positions are counted from the newest event and padding carries no state); evaluation
      then trims the columns that are padding in every row of a batch.
    Sub-classes set ``num_items`` and implement ``forward`` and ``item_embeddings``; ``last_hidden`` may be
    overridden to compute only what the newest position needs (evaluation and serving use it).
    """

    num_items: int
    causal: bool = True
    left_padding_invariant: bool = False

    def forward(self, items: Tensor) -> Tensor:
        """items (B, L) left-padded ids -> hidden states (B, L, d)."""
        raise NotImplementedError(f"{type(self).__name__} must implement forward(items) -> (B, L, d)")

    def last_hidden(self, items: Tensor) -> Tensor:
        """Hidden state at the newest position: items (B, L) -> (B, d); by default ``forward(items)[:, -1]``."""
        return self(items)[:, -1]

    def query_hidden(self, items: Tensor) -> Tensor:
        """The state a query is scored from: ``last_hidden`` of items (B, L) -> (B, d), with the columns that are
        padding in every row dropped first when the model is ``left_padding_invariant`` (exact).

        Out of training (evaluation, serving, predict) the rows go through in slices of at most
        ``QUERY_CHUNK_TOKENS`` rows × positions, each slice trimmed of its own leading padding: rows are
        independent there, so the result is the same, and the slices' intermediates stay small enough to be
        reused from the heap (``QUERY_CHUNK_TOKENS``). In training the batch stays whole, so dropout draws its
        masks as before.
        """
        items = self._trimmed(items)
        rows = max(1, QUERY_CHUNK_TOKENS // items.shape[1])
        if self.training or items.shape[0] <= rows:
            return self.last_hidden(items)
        return torch.cat([self.last_hidden(self._trimmed(part)) for part in items.split(rows)])  # (B, d)

    def _trimmed(self, items: Tensor) -> Tensor:
        """items (B, L) without the columns that are padding in every row, when ``left_padding_invariant``
        (one column kept when all are padding); else items itself."""
        if self.left_padding_invariant:
            items = items[:, min(leading_padding(items), items.shape[1] - 1):]
        return items

    def item_embeddings(self) -> Tensor:
        """(num_items + 1, d) item table used for scoring (row 0 = padding)."""
        raise NotImplementedError(f"{type(self).__name__} must implement item_embeddings() -> (N + 1, d)")

    def item_bias(self) -> Tensor | None:
        """(num_items + 1,) additive score bias, or None."""
        return None

    def score(self, hidden: Tensor, items: Tensor | None = None) -> Tensor:
        """Scores ``s = h·e_i (+ b_i)``.

        hidden: (..., d). items=None scores the whole catalogue -> (..., num_items + 1);
        items (..., C) scores those candidates only -> (..., C).
        """
        table = self.item_embeddings()
        bias = self.item_bias()
        if items is None:
            out = hidden @ table.T  # (..., N+1)
            return out if bias is None else out + bias
        cand = table[items]  # (..., C, d)
        out = (cand @ hidden.unsqueeze(-1)).squeeze(-1)  # (..., C)
        return out if bias is None else out + bias[items]

    def score_chunk(self, hidden: Tensor, start: int, stop: int) -> Tensor:
        """Scores of items ``start..stop-1`` for hidden (B, d) -> (B, stop - start), always a new tensor."""
        table = self.item_embeddings()[start:stop]  # (C, d)
        bias = self.item_bias()
        if bias is None:
            return hidden @ table.T
        return torch.addmm(bias[start:stop], hidden, table.T)  # bias added inside the product


# --- optional capabilities (ask with isinstance) --------------------------------------------------------


@runtime_checkable
class ItemFeatureConsumer(Protocol):
    """A model that reads item-feature tables (MLP4Rec): the task copies the data's tables in once."""

    def set_item_features(self, tables: dict[str, Tensor]) -> None:
        """Copy the (N + 1, ...) feature tables (row 0 = padding), keyed by feature name, into the model."""
        ...


@runtime_checkable
class CountingRecommender(Protocol):
    """A parameter-free model fitted by counting (Popularity): the task calls ``observe`` instead of a gradient step."""

    def observe(self, labels: Tensor) -> None:
        """Add the non-zero ids in ``labels`` (any shape) to the model's statistics."""
        ...


@runtime_checkable
class RecurrentRecommender(Protocol):
    """A next-item model that serves event by event with O(1) state per user (LRURec).

    Feeding a left-padded history one event at a time from ``init_state`` gives, in eval mode, the
    hidden state ``forward(items)[:, -1]``; item 0 (padding) leaves the state unchanged.
    """

    def init_state(self, batch_size: int) -> RecurrentState:
        """The empty state of ``batch_size`` users."""
        ...

    def step(self, state: RecurrentState, item: Tensor) -> tuple[RecurrentState, Tensor]:
        """Feed one event per user, item (B,) -> (new state, hidden (B, d))."""
        ...

    def prefill(self, items: Tensor) -> tuple[RecurrentState, Tensor]:
        """A left-padded history (B, L) at once -> (state after position L-1, hidden (B, L, d))."""
        ...


@runtime_checkable
class ClozeRecommender(Protocol):
    """A next-item model trained by the cloze objective (BERT4Rec): some input positions hold the ``[mask]`` token
    (id ``mask_token`` = num_items + 1, never a label or a candidate) and the loss is taken at those positions only.

    Its inputs may contain ``mask_token``; the task refuses training windows that are not masked (``data.train_mode:
    cloze``), and a query reads ``max_len - 1`` history events because ``last_hidden`` appends the ``[mask]`` itself.
    """

    mask_token: int


# --- cost hooks (seqrec.cost, the MACs and memory callbacks) -----------------------------------------------


@runtime_checkable
class DeclaresMACs(Protocol):
    """A model with a hand formula for its forward cost (1 MAC = one multiply-add; ``seqrec.cost.flops``)."""

    def macs_per_sequence(self, seq_len: int) -> int:
        """MACs of ``forward`` on ONE sequence of ``seq_len`` items (all positions, no scoring)."""
        ...


@runtime_checkable
class DeclaresStateBytes(Protocol):
    """A model that states the bytes of per-user state it keeps between requests (``seqrec.cost.state``)."""

    def state_bytes(self, batch_size: int = 1, seq_len: int | None = None) -> int:
        """Bytes of stored state for ``batch_size`` users with histories of ``seq_len`` events (None: the model's default)."""
        ...


@runtime_checkable
class DeclaresKeptLengths(Protocol):
    """An attention model (or compression wrapper) that reports the tokens each attention layer keeps.

    Implementations may take an optional history length (``kept_lengths(L=None)``); callers call it bare.
    """

    def kept_lengths(self) -> list[int]:
        """Tokens kept per attention layer, in forward order."""
        ...


@runtime_checkable
class DeclaresRequestMACs(Protocol):
    """A CTR model that states what scoring one target from a user's stored state costs."""

    def macs_per_request(self, L: int | None = None) -> float:
        """MACs to score one target from the stored state of a user with L history items (None: max_len)."""
        ...


# --- CTR models ---------------------------------------------------------------------------------------------


class CTRBackbone(nn.Module, ABC):
    """Base for CTR models: a history and target items in, click logits out, through a stored user state.

    ``prefill(history)`` encodes a user's history once into a state (a KV cache, a recurrent state);
    ``score_state(state, targets)`` scores any targets from it; ``forward`` is the two in a row;
    ``forward_windows`` trains on every position of a window in one pass. Ids as for next-item models:
    ``1..num_items``, 0 = padding, histories left-padded. ``max_len``: the longest history the model
    accepts (None: any length, a recurrent model). A CTR backbone states its cost per request, its stored
    bytes and the entries it keeps per layer (it satisfies ``DeclaresRequestMACs``, ``DeclaresStateBytes``
    and ``DeclaresKeptLengths``).
    """

    num_items: int
    max_len: int | None

    @abstractmethod
    def prefill(self, history: Tensor) -> Any:
        """Encode a history (B, L), left-padded, once -> the stored per-user state."""

    @abstractmethod
    def score_state(self, state: Any, targets: Tensor) -> Tensor:
        """Logits of targets (B, C) or (B,) from a stored state -> the shape of targets."""

    @abstractmethod
    def forward_windows(self, items: Tensor, targets: Tensor) -> Tensor:
        """items (B, L) left-padded window, targets (B, L, C) -> logits (B, L, C); position t sees items[:, :t+1]."""

    def forward(self, history: Tensor, targets: Tensor) -> Tensor:
        """history (B, L) left-padded, targets (B, C) or (B,) -> click logits shaped like targets."""
        return self.score_state(self.prefill(history), targets)

    @abstractmethod
    def macs_per_request(self, L: int | None = None) -> float:
        """MACs to score one target from the stored state of a user with L history items (None: max_len)."""

    @abstractmethod
    def state_bytes_per_user(self, L: int | None = None) -> float:
        """Bytes of the stored state of one user with L history items (None: max_len)."""

    @abstractmethod
    def kept_lengths(self, L: int | None = None) -> list[int]:
        """Entries stored per layer for L history items (None: max_len)."""

    def state_bytes(self, batch_size: int = 1, seq_len: int | None = None) -> int:
        """Bytes of stored state for ``batch_size`` users of seq_len items: batch_size · state_bytes_per_user(seq_len)."""
        return int(batch_size * self.state_bytes_per_user(seq_len))


def require_positive(**sizes: int) -> None:
    """Raise a ValueError naming the first of ``sizes`` (num_items=..., max_len=...) that is below 1."""
    for name, value in sizes.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def truncated_normal_(tensor: Tensor, std: float = 0.02, bound: float = 0.04) -> Tensor:
    """In-place N(0, std²) truncated to [-bound, bound] (LRURec's and BERT's init)."""
    with torch.no_grad():
        return nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-bound, b=bound)


def check_embedding_init(embedding_init: str) -> None:
    """ValueError unless ``embedding_init`` is "normal" (``nn.Embedding``'s N(0, 1) tables, as the PyTorch code of
    LRURec's first author keeps them) or "truncated_normal" (``truncated_normal_tables_``)."""
    if embedding_init not in ("normal", "truncated_normal"):
        raise ValueError(f"embedding_init must be 'normal' or 'truncated_normal', got {embedding_init!r}")


def truncated_normal_tables_(item_embedding: nn.Embedding, position_embedding: nn.Embedding) -> None:
    """Draw the item and position tables N(0, 0.02²) truncated at ±0.04 (LRURec's own init of every parameter), the
    item table's padding row 0 (BERT4Rec's and LRURecSASRec's ``embedding_init="truncated_normal"``)."""
    truncated_normal_(item_embedding.weight)
    truncated_normal_(position_embedding.weight)
    with torch.no_grad():
        item_embedding.weight[0].zero_()


def positions_from_oldest(items: Tensor) -> Tensor:
    """Position ids (B, L) of left-padded items (B, L): the k-th real item of a row (oldest first) gets k, padding 0.

    The formula of LRURec's first author's BERT4Rec and SASRec code, p_j = (n + j − (L − 1))·[x_j ≠ 0] with n the
    row's real items, which for a left-padded row numbers its items 1..n (so leading padding changes no id).
    """
    real = items != 0  # (B, L)
    offsets = torch.arange(-(items.shape[1] - 1), 1, device=items.device)  # (L,): -(L-1) .. 0
    return (real.sum(dim=1, keepdim=True) + offsets) * real


def leading_padding(items: Tensor) -> int:
    """Number of leading columns of items (B, L) that are padding (0) in every row (L when all are)."""
    real = (items > 0).any(dim=0)  # (L,)
    if not bool(real.any()):
        return items.shape[1]
    return int(real.to(torch.int8).argmax())
