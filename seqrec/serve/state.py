"""Per-user serving state: what the store keeps for one user, and how one event advances it, per model kind.

A ``StateAdapter`` wraps a trained model and defines its per-user state (a tuple of tensors, batch dim 1) and
three operations: ``advance`` (fold one new event per user into the state), ``query_hidden`` (next-item models:
the vector the catalogue is scored from) and ``score`` (CTR models: logits of target items). Every adapter also
reads the user's item history (``window`` newest items, the store keeps them for ``exclude_seen`` anyway):

| adapter            | models                                  | stored state                  | an event costs          |
|--------------------|-----------------------------------------|-------------------------------|-------------------------|
| ``recurrent``      | LRURec, GRU4Rec (``RecurrentRecommender``) | per-layer state + last output | O(1): one ``step``      |
| ``recompute``      | SASRec, BERT4Rec, EvoRNN, MLP4Rec, NARM, FMLP-Rec, any other | nothing (the newest max_len items) | a query re-encodes the window |
| ``ctr-recurrent``  | CTRLRU                                  | per-layer state + last output | O(1): one ``step``      |
| ``kv-cache``       | CTRTransformer, a compression wrapper at 100% | per-layer keys/values   | O(L): one token appended |
| ``kv-compressed``  | a compression wrapper below 100%        | the compressed keys/values    | O(L²): the window re-encoded and compressed |
| ``ctr-recompute``  | a wrapper whose state needs the target (prune-target) | nothing           | a query re-encodes the window |

The adapter is chosen from what the model declares, in one table (``ADAPTERS``): rows of base classes and
runtime-checkable Protocols (``RecurrentRecommender``: it can step a recurrent state; ``StepsCTRState``, ``AppendsKV``,
``CompressesKV`` for the CTR kinds), the first row the model satisfies serves it; a model that declares none of
the stateful capabilities re-encodes its window.

Equal to offline: the state after feeding a history event by event gives the hidden vector (or the logits)
the evaluation computes from that history (``NextItemTask.ranks`` / ``CTRTask``), to float precision, as long
as the history fits the model's window (``max_len``). Past it the offline evaluation reads only the newest
``max_len`` events; so do the recompute and KV adapters (the KV cache is rebuilt from the window when it
slides, since the transformer's positions count from the window's oldest event), while a recurrent state
keeps folding in every event (LRURec's point: its state is the whole history at O(1) cost).

SASRec counts positions back from the newest event, so every cached key would change with each event: its
exact state is the window itself. GRU4Rec's step is exact (``GRU4Rec.step``); EvoRNN's capacity depends on the
distance from the newest event, so it cannot be a fixed-size recurrence and is recomputed. NARM's local encoder
re-weights every past GRU state with a query from the newest one (an exact state would hold all of them), and
FMLP-Rec's filter is a circular convolution over the padded window (every position changes with each event): both
recompute; the window handed to FMLP-Rec is always max_len wide, as in training. BERT4Rec is
bidirectional (every position changes with each event) and reads the newest max_len − 1 events followed by its
``[mask]`` (``run.max_len`` is the data's ``history_len``), as the evaluation does.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from seqrec.models.base import CTRBackbone, KVState, LayerCache, RecurrentRecommender, SequenceRecommender
from seqrec.session import RecurrentSession

UserTensors = tuple[Tensor, ...]
"""One user's stored state: tensors with a leading batch dimension of 1."""

# --- a compact, self-describing blob for a tuple of tensors ------------------------------------------------
_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.int64, torch.int32, torch.int16,
           torch.bool, torch.float64, torch.uint8, torch.int8]
_CODE = {dtype: code for code, dtype in enumerate(_DTYPES)}
BLOB_VERSION = 1


def pack_tensors(tensors: Sequence[Tensor]) -> bytes:
    """Tensors -> bytes: version, count, then per tensor (dtype code, ndim, dims as u32, raw little-endian bytes)."""
    parts = [struct.pack("<BB", BLOB_VERSION, len(tensors))]
    for t in tensors:
        t = t.detach().cpu().contiguous()
        if t.dtype not in _CODE:
            raise TypeError(f"cannot store a {t.dtype} tensor; known: {sorted(map(str, _CODE))}")
        parts.append(struct.pack(f"<BB{t.dim()}I", _CODE[t.dtype], t.dim(), *t.shape))
        parts.append(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return b"".join(parts)


def unpack_tensors(blob: bytes, device: torch.device | str = "cpu") -> UserTensors:
    """The inverse of ``pack_tensors``; ValueError on a blob that does not parse to the end."""
    try:
        version, count = struct.unpack_from("<BB", blob, 0)
        if version != BLOB_VERSION:
            raise ValueError(f"state blob version {version}, expected {BLOB_VERSION}")
        offset, out = 2, []
        for _ in range(count):
            code, ndim = struct.unpack_from("<BB", blob, offset)
            shape = struct.unpack_from(f"<{ndim}I", blob, offset + 2)
            offset += 2 + 4 * ndim
            dtype = _DTYPES[code]
            size = int(np.prod(shape, dtype=np.int64)) * torch.empty((), dtype=dtype).element_size()
            raw = blob[offset : offset + size]
            if len(raw) != size:
                raise ValueError("truncated")
            offset += size
            flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
            out.append(flat.view(dtype).reshape(shape).to(device))
        if offset != len(blob):
            raise ValueError(f"{len(blob) - offset} trailing bytes")
        return tuple(out)
    except (struct.error, IndexError, RuntimeError) as error:
        raise ValueError(f"unreadable state blob ({error})") from error


def tensors_bytes(tensors: Sequence[Tensor]) -> int:
    """Bytes of the tensors' values (what a state holds, without the blob's few header bytes)."""
    return int(sum(t.numel() * t.element_size() for t in tensors))


def left_padded(histories: Sequence[Sequence[int]], width: int, device: torch.device) -> Tensor:
    """(B, width) the newest ``width`` items of each history, left-padded with 0 (``api.left_padded_windows``)."""
    out = np.zeros((len(histories), width), dtype=np.int64)
    for row, history in enumerate(histories):
        tail = np.asarray(history[-width:], dtype=np.int64) if len(history) else np.zeros(0, dtype=np.int64)
        if len(tail):
            out[row, width - len(tail):] = tail
    return torch.from_numpy(out).to(device)


# --- the adapters ---------------------------------------------------------------------------------------------
class StateAdapter(ABC):
    """A trained model's per-user state and what one event does to it (module docstring).

    ``family`` is "next_item" (``query_hidden``; the catalogue is scored by the model's item table) or "ctr"
    (``score``: click logits of targets). ``window``: how many newest history items an operation reads
    besides the state (None: the state is enough). ``exact_window``: histories up to this length give
    exactly the offline result (None: any length).
    """

    name = "base"
    family = "next_item"

    def __init__(self, model: torch.nn.Module, max_len: int | None) -> None:
        self.net, self.max_len = model, max_len
        parameter = next(model.parameters(), None)
        self.device = parameter.device if parameter is not None else torch.device("cpu")

    window: int | None = None

    @property
    def exact_window(self) -> int | None:
        """Longest history whose served result equals the offline one (the evaluation reads max_len events)."""
        return self.max_len

    @abstractmethod
    def empty(self) -> UserTensors:
        """The state of a user without events."""

    @abstractmethod
    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """One new event per user: states and histories (item ids, oldest first) before it, items (B,) -> new states."""

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """Several new events of one user, oldest first (default: ``advance`` one at a time)."""
        history = list(history)
        for item in items:
            state = self.advance([state], [history], torch.tensor([item], device=self.device))[0]
            history.append(item)
        return state

    def query_hidden(self, states: list[UserTensors], histories: list[list[int]]) -> Tensor:
        """Next-item models: (B, d) the vector the catalogue is scored from (``SequenceRecommender.score_chunk``)."""
        raise TypeError(f"{type(self.net).__name__} is a CTR model: score targets instead")

    def score(self, state: UserTensors, history: list[int], targets: Tensor) -> Tensor:
        """CTR models: click logits of targets (C,) for one user -> (C,)."""
        raise TypeError(f"{type(self.net).__name__} is a next-item model: rank the catalogue instead")

    def describe(self) -> dict[str, Any]:
        """What is served, for /v1/info and the benchmark."""
        return {"adapter": self.name, "family": self.family, "model": type(self.net).__name__,
                "max_len": self.max_len, "window": self.window}


class RecurrentAdapter(StateAdapter):
    """A ``RecurrentRecommender`` (LRURec, GRU4Rec): state = per-layer recurrent state + the newest output, stepped by
    the run's ``RecurrentSession`` (``seqrec.session``, what ``TrainedRun.update`` steps through)."""

    name = "recurrent"

    def __init__(self, model: SequenceRecommender, max_len: int | None, session: RecurrentSession | None = None) -> None:
        """``session``: the run's (``TrainedRun.session``); one of the model's own when None."""
        super().__init__(model, max_len)
        self.session = session if session is not None else RecurrentSession(model)
        self.layers = self.session.layers

    def empty(self) -> UserTensors:
        """Zero recurrent state per layer and a zero output (1, d)."""
        state, hidden = self.session.start(1)
        return (*state, hidden)

    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """One ``session.step`` on the stacked states of B users: O(1) per event whatever the history length (items
        are known: serving refuses an unknown one before, so no row keeps its previous output)."""
        stacked = tuple(torch.cat([s[i] for s in states]) for i in range(self.layers))
        new_state, hidden = self.session.step(stacked, None, items)
        return [(*(layer[b:b + 1] for layer in new_state), hidden[b:b + 1]) for b in range(len(states))]

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """An empty user's history at once (``session.prefill``), else event by event."""
        if len(history) or not items:
            return super().extend(state, history, items)
        new_state, hidden = self.session.prefill(torch.tensor([items], device=self.device))
        return (*new_state, hidden)

    def query_hidden(self, states: list[UserTensors], histories: list[list[int]]) -> Tensor:
        """The stored output after the newest event (B, d)."""
        return torch.cat([s[-1] for s in states])

    @property
    def exact_window(self) -> int | None:
        """The recurrence reads the whole history; the evaluation only the newest max_len events."""
        return self.max_len


class RecomputeAdapter(StateAdapter):
    """Any ``SequenceRecommender`` (SASRec, EvoRNN, MLP4Rec, NARM, FMLP-Rec): no state; a query re-encodes the newest
    max_len items."""

    name = "recompute"

    def __init__(self, model: SequenceRecommender, max_len: int) -> None:
        super().__init__(model, max_len)
        self.window = max_len

    def empty(self) -> UserTensors:
        """Nothing: the history is the state."""
        return ()

    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """Nothing to compute at an event (the store appends the item)."""
        return [() for _ in states]

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """Nothing to compute."""
        return ()

    def query_hidden(self, states: list[UserTensors], histories: list[list[int]]) -> Tensor:
        """``query_hidden`` of the left-padded (B, max_len) windows, as the evaluation computes it."""
        return self.net.query_hidden(left_padded(histories, self.max_len, self.device))


class CTRRecurrentAdapter(StateAdapter):
    """``CTRLRU``: state = per-layer recurrent state + the newest output u; a target costs the head alone."""

    name = "ctr-recurrent"
    family = "ctr"

    def __init__(self, model: CTRBackbone, max_len: int | None) -> None:
        super().__init__(model, max_len)
        empty = model.prefill(torch.zeros(1, 1, dtype=torch.long, device=self.device))
        self.layers = len(empty.recurrent)
        self._empty = (*empty.recurrent, torch.zeros_like(empty.hidden))

    def _state(self, tensors: Sequence[UserTensors]) -> Any:
        from seqrec.models.ctr.lru import LRUCTRState

        return LRUCTRState(recurrent=tuple(torch.cat([t[i] for t in tensors]) for i in range(self.layers)),
                           hidden=torch.cat([t[-1] for t in tensors]))

    def empty(self) -> UserTensors:
        """Zero recurrent state and output."""
        return tuple(t.clone() for t in self._empty)

    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """``CTRLRU.step`` on the stacked states: O(1) per event."""
        new = self.net.step(self._state(states), items)
        return [(*(layer[b:b + 1] for layer in new.recurrent), new.hidden[b:b + 1]) for b in range(len(states))]

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """An empty user's history at once (``prefill``), else event by event."""
        if len(history) or not items:
            return super().extend(state, history, items)
        new = self.net.prefill(torch.tensor([items], device=self.device))
        return (*new.recurrent, new.hidden)

    def score(self, state: UserTensors, history: list[int], targets: Tensor) -> Tensor:
        """The head on the stored output: (C,) logits."""
        return self.net.score_state(self._state([state]), targets.unsqueeze(0))[0]


# --- attention CTR models: the KV cache -------------------------------------------------------------------------
def kv_to_tensors(state: KVState) -> UserTensors:
    """A (batch 1) ``KVState`` -> (target_position, then per layer keys, values, mask, pos, log_size or empty)."""
    out: list[Tensor] = [state.target_position.reshape(1).to(torch.int32)]
    for layer in state.layers:
        pos = layer.pos if layer.pos is not None else torch.zeros(layer.mask.shape, dtype=torch.int32)
        log_size = layer.log_size if layer.log_size is not None else torch.zeros(0)
        out += [layer.keys, layer.values, layer.mask, pos.to(torch.int32), log_size]
    return tuple(out)


def tensors_to_kv(tensors: UserTensors) -> KVState:
    """The inverse of ``kv_to_tensors``."""
    position, rest = tensors[0].long(), tensors[1:]
    layers = []
    for i in range(0, len(rest), 5):
        keys, values, mask, pos, log_size = rest[i:i + 5]
        layers.append(LayerCache(keys=keys, values=values, mask=mask.bool(), pos=pos.long(),
                                 log_size=log_size if log_size.numel() else None))
    return KVState(layers=layers, target_position=position)


def transformer_of(model: torch.nn.Module) -> Any:
    """The ``CTRTransformer`` inside a compression wrapper (or the model itself)."""
    return getattr(model, "backbone", model)


def append_event(transformer: Any, state: KVState, item: Tensor) -> KVState:
    """One more history token for one user (batch 1): its keys and values at every layer, attending causally to
    the stored entries, appended to the cache (a decoder's KV-cache step). Exactly ``prefill`` of the longer
    history while no entry was dropped (positions count from the oldest event, so stored entries never change).

    x = E[item] + P[n];  per layer: q, k, v = qkv(x); x = finish(x, attend(q, [K; k], [V; v], recency bias))
    Cost O(layers · (n · d + d² + d·f)) for n stored entries.
    """
    n = state.target_position  # (1,): the new token's position
    x = transformer.embedding_dropout(transformer.item_embedding(item.view(1, 1)) + transformer.position_embedding(n.view(1, 1)))
    layers = []
    for block, cache in zip(transformer.blocks, state.layers, strict=True):
        q, k, v = block.qkv(x)  # (1, h, 1, d/h)
        keys, values = torch.cat([cache.keys, k], dim=2), torch.cat([cache.values, v], dim=2)
        pos = torch.cat([cache.pos, n.view(1, 1, 1)], dim=2)  # (1, 1, K+1)
        mask = torch.cat([cache.mask, torch.ones(1, cache.mask.shape[1], 1, dtype=torch.bool, device=x.device)], dim=2)
        bias = None if block.recency is None else block.recency(n.view(1, 1, 1) - pos[:, 0][:, None, :])  # (1, h, 1, K+1)
        out, _ = block.attend(q, keys, values, mask[:, :1, None, :], bias)
        x = block.finish(x, out)
        layers.append(LayerCache(keys=keys, values=values, mask=mask, pos=pos, log_size=None))
    return KVState(layers=layers, target_position=n + 1)


class KVCacheAdapter(StateAdapter):
    """``CTRTransformer`` (or a compression wrapper keeping everything): state = the per-layer KV cache.

    An event appends one token (``append_event``) until the history fills ``max_len``; past it the window
    slides, every position shifts, and the cache is rebuilt from the window (``prefill``), as the evaluation
    reads the newest max_len events.
    """

    name = "kv-cache"
    family = "ctr"

    def __init__(self, model: CTRBackbone, max_len: int) -> None:
        super().__init__(model, max_len)
        self.window = max_len
        self.transformer = transformer_of(model)

    def empty(self) -> UserTensors:
        """A cache with no entries (position 0)."""
        layers = []
        for block in self.transformer.blocks:
            h, dh = block.num_heads, block.head_dim
            keys = torch.zeros(1, h, 0, dh, device=self.device)
            layers.append(LayerCache(keys=keys, values=keys.clone(), mask=torch.zeros(1, 1, 0, dtype=torch.bool, device=self.device),
                                     pos=torch.zeros(1, 1, 0, dtype=torch.long, device=self.device)))
        return kv_to_tensors(KVState(layers=layers, target_position=torch.zeros(1, dtype=torch.long, device=self.device)))

    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """Append one token per user, or rebuild the window's cache once it slides."""
        out = []
        for state, history, item in zip(states, histories, items.tolist()):
            if len(history) < self.max_len:
                out.append(kv_to_tensors(append_event(self.transformer, tensors_to_kv(state), torch.tensor([item], device=self.device))))
            else:
                window = left_padded([[*history, item]], self.max_len, self.device)
                out.append(kv_to_tensors(self.net.prefill(window)))
        return out

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """An empty user's history at once (``prefill`` of its newest max_len events), else event by event."""
        if len(history) or not items:
            return super().extend(state, history, items)
        return kv_to_tensors(self.net.prefill(left_padded([items], min(len(items), self.max_len), self.device)))

    def score(self, state: UserTensors, history: list[int], targets: Tensor) -> Tensor:
        """Targets attend to the stored cache: (C,) logits."""
        return self.net.score_state(tensors_to_kv(state), targets.unsqueeze(0))[0]


class CompressedKVAdapter(KVCacheAdapter):
    """A compression wrapper below 100%: state = exactly the compressed KV cache the compression benchmark counts.

    The methods choose what to keep from the whole window at once (one-shot, as evaluated), so an event
    re-encodes the window and compresses it again (O(L²)); a query reads only the kept entries (O(kept)).
    """

    name = "kv-compressed"

    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """``prefill`` (with the wrapper's compression) of each user's newest max_len events."""
        return [self._prefill([*history, item]) for history, item in zip(histories, items.tolist())]

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """The window after the events, prefilled once."""
        return self._prefill([*history, *items]) if items else state

    def _prefill(self, history: list[int]) -> UserTensors:
        return kv_to_tensors(self.net.prefill(left_padded([history], min(len(history), self.max_len), self.device)))


class CTRRecomputeAdapter(StateAdapter):
    """A CTR model whose state depends on the target (``cacheable`` False): no state, each query re-encodes."""

    name = "ctr-recompute"
    family = "ctr"

    def __init__(self, model: CTRBackbone, max_len: int) -> None:
        super().__init__(model, max_len)
        self.window = max_len

    def empty(self) -> UserTensors:
        """Nothing: the history is the state."""
        return ()

    def advance(self, states: list[UserTensors], histories: list[list[int]], items: Tensor) -> list[UserTensors]:
        """Nothing to compute at an event."""
        return [() for _ in states]

    def extend(self, state: UserTensors, history: list[int], items: list[int]) -> UserTensors:
        """Nothing to compute."""
        return ()

    def score(self, state: UserTensors, history: list[int], targets: Tensor) -> Tensor:
        """``model(window, targets)``: the evaluation's own computation."""
        window = left_padded([history], min(len(history), self.max_len), self.device)
        return self.net(window, targets.unsqueeze(0))[0]


# --- which adapter: the model's declared capabilities, one table ----------------------------------------------
@runtime_checkable
class CompressesKV(Protocol):
    """A compression wrapper over an attention CTR backbone (``seqrec.compress``): its budget of kept entries,
    and ``cacheable`` False where what it keeps depends on the target (then no state can be stored)."""

    cacheable: bool
    ratio: float | None
    tokens: int | None

    def budget(self, n: Tensor) -> Tensor:
        """(B,) entries kept per layer for n (B,) history items."""
        ...


@runtime_checkable
class StepsCTRState(Protocol):
    """A CTR model that folds one event into a fixed-size state (``CTRLRU``): O(1) per event."""

    def prefill(self, history: Tensor) -> Any:  # noqa: ANN401 (the model's state type)
        """The state after a (B, L) history."""
        ...

    def step(self, state: Any, item: Tensor) -> Any:  # noqa: ANN401
        """The state after one more event per user, item (B,)."""
        ...


@runtime_checkable
class AppendsKV(Protocol):
    """An attention CTR model whose history tokens are a KV cache that grows by one token per event
    (``CTRTransformer``: ``append_event`` runs its blocks on the new token)."""

    blocks: torch.nn.ModuleList

    def embed_history(self, history: Tensor) -> Any:  # noqa: ANN401
        """Token states of a (B, L) history."""
        ...


def _window(model: torch.nn.Module, max_len: int | None) -> int:
    """The window an adapter re-reads: the run's ``max_len``, else the model's own."""
    return int(max_len or model.max_len)


def _compressed(model: torch.nn.Module, max_len: int | None) -> StateAdapter:
    """A compression wrapper: no state when it depends on the target, the whole KV cache when the budget keeps every
    entry of the window, else the compressed cache."""
    window = _window(model, max_len)
    if not model.cacheable:
        return CTRRecomputeAdapter(model, window)
    full = model.tokens is None and model.ratio is not None and model.ratio >= 1.0
    full = full or (model.tokens is not None and model.tokens >= window)
    return (KVCacheAdapter if full else CompressedKVAdapter)(model, window)


def _recompute(model: torch.nn.Module, max_len: int | None) -> StateAdapter:
    """A next-item model without a recurrent state: the window, re-encoded per query."""
    if max_len is None:
        raise ValueError(f"{type(model).__name__} is served by recomputing its window: give max_len")
    return RecomputeAdapter(model, max_len)


ADAPTERS: tuple[tuple[tuple[type, ...], Callable[[Any, int | None], StateAdapter]], ...] = (
    ((CTRBackbone, CompressesKV), _compressed),
    ((CTRBackbone, StepsCTRState), CTRRecurrentAdapter),
    ((CTRBackbone, AppendsKV), lambda model, max_len: KVCacheAdapter(model, _window(model, max_len))),
    ((CTRBackbone,), lambda model, max_len: CTRRecomputeAdapter(model, _window(model, max_len))),
    ((SequenceRecommender, RecurrentRecommender), RecurrentAdapter),
    ((SequenceRecommender,), _recompute),
)
"""(what the model must be, every one: a base class or a runtime-checkable Protocol, -> the adapter); the first row
the model satisfies serves it (the module docstring's table)."""


def adapter_kind(model: torch.nn.Module) -> Callable[[Any, int | None], StateAdapter]:
    """The factory of the first ``ADAPTERS`` row whose classes and Protocols the model all satisfies."""
    for kinds, factory in ADAPTERS:
        if all(isinstance(model, kind) for kind in kinds):
            return factory
    raise TypeError(f"cannot serve a {type(model).__name__}: neither a SequenceRecommender nor a CTRBackbone")


def adapter_for(model: torch.nn.Module, max_len: int | None, session: RecurrentSession | None = None) -> StateAdapter:
    """The adapter a model is served with (``ADAPTERS``); ``session``: a run's recurrent session, for a recurrent model."""
    factory = adapter_kind(model)
    if factory is RecurrentAdapter:
        return RecurrentAdapter(model, max_len, session)
    return factory(model, max_len)
