"""What every compression wrapper shares: the budget, the ``prefill`` hook, kept-length and cost accounting.

A wrapper is a ``CTRBackbone`` (``seqrec.models.base``) around a ``CTRTransformer``, with the backbone's
model API (``forward``, ``prefill``, ``score_state``, ``forward_windows``), so it drops into ``CTRTask`` and
YAML configs. It implements the ``Compressor`` hook the backbone's ``prefill`` calls after every layer
(the contract and its state classes are in ``seqrec.models.base``)::

    model:
      class_path: seqrec.compress.kv_cache.SnapKV
      init_args:
        backbone: {class_path: seqrec.models.ctr.transformer.CTRTransformer, init_args: {...}}
        ratio: 0.25

In a fit config the backbone may be given as a class without ``num_items``/``max_len``: the CLI links
them from the data into the wrapper, which builds the backbone with them.

Budget: ``ratio`` r keeps k_u = ⌈r · n_u⌉ entries per layer (and head) for a user with n_u history
items (at least 1), or ``tokens`` T keeps k_u = min(T, n_u). Compression is applied at inference
(``prefill``): ``forward_windows`` trains the backbone uncompressed, so a trained backbone is compressed
without retraining.

Accounting: every ``prefill`` records, per user, the tokens entering each layer (n_l) and the entries
stored per layer (K_l, ``kept_lengths``); ``costs()`` turns the running sums into mean MACs per request
(scoring one target from the stored state), MACs per user to build the state, and stored bytes per user,
with the backbone's hand formulas (one fused multiply-add = 1 MAC).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from seqrec.models.base import CTRBackbone, KVState, LayerCache, LayerTrace, TokenState
from seqrec.models.ctr.transformer import CTRTransformer


def kept_budget(n: Tensor, ratio: float | None, tokens: int | None) -> Tensor:
    """(B,) entries to keep for users with n (B,) history items: ⌈ratio·n⌉ in [1, n], or min(tokens, n)."""
    if tokens is not None:
        return torch.minimum(n, torch.full_like(n, tokens))
    k = torch.ceil(n.double() * ratio - 1e-9).long()  # the epsilon absorbs float error: ⌈0.1 · 30⌉ = 3
    return torch.minimum(torch.clamp(k, min=1), n) if n.numel() else k


def compact_order(keep: Tensor) -> tuple[Tensor, Tensor]:
    """Slots to gather so that the kept slots of every row sit at the right end, in their order.

    keep (B, n) bool -> (order (B, W) slot indices, real (B, W) bool) with W the most kept in a row;
    the slots left of a row's kept ones are padding (real False).
    """
    count = keep.sum(dim=1)
    width = int(count.max()) if keep.numel() else 0
    order = torch.argsort(keep.to(torch.int8), dim=1, stable=True)[:, keep.shape[1] - width :]  # (B, W)
    real = torch.arange(width, device=keep.device)[None, :] >= (width - count)[:, None]
    return order, real


def gather_slots(t: Tensor, order: Tensor, dim: int = 1) -> Tensor:
    """t[b, order[b]] along ``dim`` (1 for (B, n, ...), 2 for (B, h, n, ...))."""
    index = order if dim == 1 else order[:, None, :].expand(t.shape[0], t.shape[1], order.shape[1])
    index = index.reshape(*index.shape, *([1] * (t.dim() - index.dim())))
    return torch.gather(t, dim, index.expand(*index.shape[: dim + 1], *t.shape[dim + 1 :]))


def keep_tokens(tokens: TokenState, cache: LayerCache, keep: Tensor) -> tuple[TokenState, LayerCache]:
    """Tokens and the layer's cache restricted to the slots where keep (B, n) is True, compacted."""
    order, real = compact_order(keep)
    x = gather_slots(tokens.x, order) * real.unsqueeze(-1)
    pos = gather_slots(tokens.pos, order).masked_fill(~real, -1)
    log_size = None if tokens.log_size is None else gather_slots(tokens.log_size, order).masked_fill(~real, 0.0)
    new_tokens = TokenState(x=x, real=real, pos=pos, log_size=log_size)
    cache_log = None if log_size is None else log_size[:, None, :]
    new_cache = LayerCache(keys=gather_slots(cache.keys, order, 2), values=gather_slots(cache.values, order, 2),
                           mask=real[:, None, :], pos=pos[:, None, :], log_size=cache_log)
    return new_tokens, new_cache


def select_per_head(cache: LayerCache, keep: Tensor) -> LayerCache:
    """The cache entries where keep (B, h, n) is True, per head, compacted to width max kept (mask marks them)."""
    B, h, n = keep.shape
    count = keep.sum(-1)  # (B, h)
    width = int(count.max()) if keep.numel() else 0
    order = torch.argsort(keep.to(torch.int8), dim=-1, stable=True)[..., n - width :]  # (B, h, W), kept last
    index = order.unsqueeze(-1).expand(B, h, width, cache.keys.shape[-1])
    keys = torch.gather(cache.keys, 2, index)
    values = torch.gather(cache.values, 2, index)
    mask = torch.arange(width, device=keep.device)[None, None, :] >= (width - count)[..., None]  # (B, h, W)
    log_size = None if cache.log_size is None else torch.gather(cache.log_size.expand(B, h, n), 2, order)
    pos = None if cache.pos is None else torch.gather(cache.pos.expand(B, h, n), 2, order)
    return LayerCache(keys=keys, values=values, mask=mask, pos=pos, log_size=log_size)


def newest_slots(real: Tensor, count: Tensor) -> Tensor:
    """(B, n) True at the newest ``count`` (B,) real slots of left-padded rows (``count`` may be (B, h) -> (B, h, n))."""
    n = real.shape[-1]
    from_end = torch.arange(n - 1, -1, -1, device=real.device)  # slot n-1 -> 0
    if count.dim() == 2:
        return real[:, None, :] & (from_end[None, None, :] < count[..., None])
    return real & (from_end[None, :] < count[:, None])


def top_slots(scores: Tensor, allowed: Tensor, count: Tensor) -> Tensor:
    """True at the ``count`` (...,) highest-scoring allowed slots of every row of scores (..., n)."""
    scores = scores.masked_fill(~allowed, float("-inf"))
    rank = torch.argsort(torch.argsort(scores, dim=-1, descending=True, stable=True), dim=-1)
    return allowed & (rank < count[..., None])


class CompressedCTR(CTRBackbone):
    """Base wrapper: runs the backbone's ``prefill`` with ``self`` as the per-layer compressor.

    A ``CTRBackbone`` itself (``forward`` = ``score_state(prefill(history))`` and ``state_bytes`` come from
    there) and a ``seqrec.models.base.Compressor`` (its ``compress`` hook). Sub-classes implement ``compress_layer(layer, trace, tokens, cache, k)`` with k (B,) the entries to
    keep; ``cacheable`` is False where the state depends on the target (then no state can be stored).
    """

    method = "base"
    cacheable = True

    def __init__(
        self,
        backbone: nn.Module | Callable[[int, int], nn.Module],
        ratio: float | None = 1.0,
        tokens: int | None = None,
        num_items: int | None = None,
        max_len: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(backbone, nn.Module):  # a YAML backbone without num_items: built from the data's
            if num_items is None or max_len is None:
                raise ValueError("a backbone given as a class needs num_items and max_len (the CLI links them from the data)")
            backbone = backbone(num_items, max_len)
        if num_items is not None and num_items != backbone.num_items:
            raise ValueError(f"num_items={num_items} but the backbone was built for {backbone.num_items}")
        if not isinstance(backbone, CTRTransformer):
            raise TypeError(f"compression wrappers need a CTRTransformer backbone (attention with a KV state), got {type(backbone).__name__}")
        if tokens is not None:
            if tokens < 1:
                raise ValueError(f"tokens must be >= 1, got {tokens}")
            ratio = None
        elif ratio is None or not 0.0 < ratio <= 1.0:
            raise ValueError(f"give ratio in (0, 1] or tokens >= 1, got ratio={ratio}, tokens={tokens}")
        self.backbone, self.ratio, self.tokens = backbone, ratio, tokens
        self.reset_costs()

    # --- the model API the task and the benchmark use ------------------------------------------------
    @property
    def num_items(self) -> int:
        """The backbone's catalogue size."""
        return self.backbone.num_items

    @property
    def max_len(self) -> int:
        """The backbone's history length."""
        return self.backbone.max_len

    def budget(self, n: Tensor) -> Tensor:
        """(B,) entries to keep per layer for n (B,) history items."""
        return kept_budget(n, self.ratio, self.tokens)

    def describe(self) -> str:
        """Method and budget, for tables."""
        return f"{self.method}@{self.ratio:.0%}" if self.tokens is None else f"{self.method}@{self.tokens}"

    def prefill(self, history: Tensor) -> KVState:
        """The backbone's prefill with this wrapper compressing after every layer."""
        self._n = (history > 0).sum(dim=1)
        self._k = self.budget(self._n)
        self._layer_tokens: list[Tensor] = []
        self._extra = torch.zeros(history.shape[0], dtype=torch.float64)
        state = self.backbone.prefill(history, compressor=self)
        self._record(state.kept_lengths(), self._layer_tokens, self._extra)
        return state

    def prefill_from(self, history: Tensor, shared: tuple[list, Tensor]) -> KVState:
        """``prefill`` resumed from the backbone's ``prefill_layers(history)``: the uncompressed layers are
        reused for as long as this method leaves the tokens unchanged (exactly what ``prefill`` computes)."""
        layers_done, position = shared
        self._n = (history > 0).sum(dim=1)
        self._k = self.budget(self._n)
        self._layer_tokens = []
        self._extra = torch.zeros(history.shape[0], dtype=torch.float64)
        caches, tokens, shared_so_far = [], None, True
        for i, block in enumerate(self.backbone.blocks):
            if shared_so_far:
                out_tokens, cache, trace = layers_done[i]
            else:
                out_tokens, cache, trace = self.backbone.history_layer(block, tokens)
            new_tokens, cache = self.compress(i, trace, out_tokens, cache)
            shared_so_far = shared_so_far and new_tokens is out_tokens
            caches.append(cache)
            tokens = new_tokens
        state = KVState(layers=caches, target_position=position)
        self._record(state.kept_lengths(), self._layer_tokens, self._extra)
        return state

    def compress(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache) -> tuple[TokenState, LayerCache]:
        """The hook the backbone calls: record n_l, then ``compress_layer`` unless nothing needs to go."""
        self._layer_tokens.append(trace.tokens.real.sum(dim=1))
        if bool((cache.lengths() <= self._k).all()):
            return tokens, cache
        return self.compress_layer(layer, trace, tokens, cache, self._k)

    def compress_layer(self, layer: int, trace: LayerTrace, tokens: TokenState, cache: LayerCache, k: Tensor) -> tuple[TokenState, LayerCache]:
        """Sub-classes: the tokens for the next layer and this layer's stored cache, k (B,) entries each."""
        raise NotImplementedError

    def score_state(self, state: KVState, targets: Tensor) -> Tensor:
        """Score targets from a (compressed) stored state."""
        return self.backbone.score_state(state, targets)

    def forward_windows(self, items: Tensor, targets: Tensor) -> Tensor:
        """Training: the backbone, uncompressed (compression is applied at inference)."""
        return self.backbone.forward_windows(items, targets)

    # --- accounting ---------------------------------------------------------------------------------
    def reset_costs(self) -> None:
        """Clear the running sums of ``costs``."""
        self._users = 0
        self._kept_sum: list[float] = []
        self._prefill_macs_sum = 0.0
        self._history_sum = 0.0

    def _record(self, kept: list[Tensor], layer_tokens: list[Tensor], extra: Tensor) -> None:
        d = self.backbone.d_model
        if not self._kept_sum:
            self._kept_sum = [0.0] * len(kept)
        for i, k in enumerate(kept):
            self._kept_sum[i] += float(k.sum())
        token_macs = [b.token_macs() for b in self.backbone.blocks]
        prefill = sum(n.double() * tm + 2 * n.double() ** 2 * d for n, tm in zip(layer_tokens, token_macs))
        self._prefill_macs_sum += float((prefill + extra).sum())
        self._history_sum += float(self._n.sum())
        self._users += len(self._n)

    def mean_kept_lengths(self) -> list[float]:
        """Mean stored entries per layer over the users prefilled since ``reset_costs``."""
        return [s / max(self._users, 1) for s in self._kept_sum]

    def entry_extra_bytes(self) -> int:
        """Bytes stored per entry beyond keys and values (ToMe: the merged size)."""
        return 0

    def costs(self) -> dict[str, float]:
        """Mean over users since ``reset_costs``: MACs per request, MACs per user prefill, stored bytes, kept lengths."""
        kept = self.mean_kept_lengths()
        users = max(self._users, 1)
        prefill = self._prefill_macs_sum / users
        out = {
            "macs_per_request": self.backbone.score_macs(kept),
            "macs_prefill_per_user": prefill,
            "state_bytes_per_user": self.backbone.state_bytes_for(kept, self.entry_extra_bytes()),
            "history_length": self._history_sum / users,
        }
        if not self.cacheable:  # every request re-encodes the history; only the item ids are stored
            out["macs_per_request"] = prefill + self.backbone.score_macs(kept)
            out["state_bytes_per_user"] = self._history_sum / users * 8
        out.update({f"kept_layer{i}": k for i, k in enumerate(kept)})
        return out

    # --- the callbacks' per-model protocol (a full history of L items) --------------------------------
    def kept_lengths(self, L: int | None = None) -> list[int]:
        """Entries stored per layer (and head) for a user with a full history of L items (default max_len).

        (The cost callbacks call it without arguments; ``mean_kept_lengths`` gives what the users seen kept.)
        """
        n = torch.tensor([L or self.max_len])
        return [int(self.budget(n))] * len(self.backbone.blocks)

    def macs_per_request(self, L: int | None = None) -> float:
        """MACs to score one target from the compressed state of L history items."""
        return self.backbone.score_macs([float(k) for k in self.kept_lengths(L)])

    def state_bytes_per_user(self, L: int | None = None) -> float:
        """Bytes of the compressed state of L history items."""
        return self.backbone.state_bytes_for([float(k) for k in self.kept_lengths(L)], self.entry_extra_bytes())


class Uncompressed(CompressedCTR):
    """The reference: the full KV cache (every budget is 100%)."""

    method = "uncompressed"

    def __init__(
        self, backbone: nn.Module | Callable[[int, int], nn.Module], num_items: int | None = None, max_len: int | None = None
    ) -> None:
        super().__init__(backbone, 1.0, None, num_items, max_len)

    def compress_layer(self, layer, trace, tokens, cache, k):  # noqa: ANN001, ANN201 (never called: nothing to drop)
        """Keeps everything."""
        return tokens, cache
