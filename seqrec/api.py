"""The Python API: load a trained run and recommend in the data's own ids.

    import seqrec

    run = seqrec.load_run("runs/sasrec_interactions/version_0")      # a run directory or a checkpoint
    run.recommend({"alice": ["m1", "m7", "m3"]}, k=10)               # {"alice": [(item, score), ...]}
    run.recommend_users(["alice", "bob"], k=10)                      # from the users' histories in the data

    state = run.init_state()                                         # recurrent models (LRURec): O(1) per event
    state = run.update(state, "m1")
    run.topk(state, k=10)                                            # [[(item, score), ...]]

The ranking is the evaluation's (``NextItemTask.ranks``): the model's hidden state at the newest of the last
``max_len`` events, scores against the whole catalogue in item chunks (``seqrec.tasks.catalogue_topk``: a running
top-k, never a users x items matrix), items in the history masked when asked, item 0 (padding) never. Ties: an
item's ``rank`` is 1 + the number of items scored strictly higher (how the metrics count a target's rank), and
``ties="all"`` keeps every item whose rank is <= k, so a list can exceed k only where items tie with the k-th.
``python -m seqrec predict`` (``seqrec/predict.py``) writes the same lists for many users to a file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import yaml
from torch import Tensor

from seqrec.callbacks.checkpoint_io import CheckpointError
from seqrec.data.item_map import ItemMap
from seqrec.data.sequences import RawIdIndex, Sequences
from seqrec.datamodules.base import RecommendationData
from seqrec.models.base import RecurrentState, SequenceRecommender
from seqrec.renamed_keys import note
from seqrec.runs import (
    CONFIG,
    check_run_checkpoint,
    checkpoint_fix,
    data_overrides,
    find_run_dir,
    resolve_checkpoint,
)
from seqrec.session import RecurrentSession
from seqrec.tasks.base import RanksTargets
from seqrec.tasks.catalogue_topk import Ties, TopK, catalogue_topk

log = logging.getLogger("seqrec.api")

Exclude = Literal["window", "all", "none"]
# the inference precision rule: a run is served under the precision it was evaluated under (``trainer.precision``)
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "bf16": torch.bfloat16, "16-mixed": torch.float16, "16": torch.float16}
WEIGHT_DTYPES = {"bf16-true": torch.bfloat16, "16-true": torch.float16, "64-true": torch.float64, "64": torch.float64}


def _precision_of(config_path: Path) -> str:
    """The trainer precision a run was evaluated under ("32-true" when unset)."""
    document = yaml.safe_load(config_path.read_text()) or {}
    return str((document.get("trainer") or {}).get("precision") or "32-true")


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
    """A trained run, ready to recommend: its network ``net`` (weights from a checkpoint), data (ids, histories) and
    config.

    Build it with ``load_run``. Raw ids are the data's own (int or str as the source had them); an item the
    data does not know has no embedding and is skipped in a history (logged). The one owner of what inference
    on a run needs, which serving (``seqrec.serve``) takes from it: the raw-id <-> row map (``items``), the
    inference precision (``autocast``, ``inference``; weights cast at load for a ``*-true`` precision) and the
    recurrent session (``session``).
    """

    def __init__(self, config: Any, datamodule: Any, task: torch.nn.Module, run_dir: Path, checkpoint: Path,  # noqa: ANN401
                 device: torch.device, precision: str) -> None:
        """The task on ``device`` (its weights cast to a ``*-true`` precision's dtype), its data and config."""
        if not isinstance(datamodule, RecommendationData):
            raise TypeError(f"{type(datamodule).__name__} is not a seqrec.datamodules.base.RecommendationData")
        self.run_dir, self.checkpoint, self.device, self.precision = run_dir, checkpoint, device, precision
        self.config, self.datamodule, self.task = config, datamodule, task
        task.to(device)
        if precision in WEIGHT_DTYPES:
            task.to(WEIGHT_DTYPES[precision])
        self.net: SequenceRecommender = task.net
        # the events a query reads, as the evaluation's windows (max_len - 1 for a cloze model, which appends [mask])
        self.max_len: int = datamodule.history_len
        ranker = task if isinstance(task, RanksTargets) else None  # a CTR task: the defaults
        self.mask_history: bool = ranker.mask_history if ranker is not None else True
        self.chunk_size: int = ranker.score_chunk_size if ranker is not None else 65536
        self.eval_batch_size: int = datamodule.eval_batch_size
        self._items: ItemMap | None = None
        self._user_index: RawIdIndex | None = None
        self._session: RecurrentSession | None = None

    @property
    def model(self) -> SequenceRecommender:
        """The network under its name from before the rename to ``net`` (one note; use ``net``)."""
        note("TrainedRun.model is now TrainedRun.net")
        return self.net

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

    @property
    def items(self) -> ItemMap:
        """The catalogue's raw item ids <-> item ids 1..N (a hash map, built on first use)."""
        if self._items is None:
            self._items = ItemMap.of_sequences(self.sequences)
        return self._items

    def item_rows(self, raw: Sequence | np.ndarray) -> np.ndarray:
        """Item ids (1..N) of raw item ids; 0 where the catalogue does not have one."""
        return self.items.rows(raw)

    def user_rows(self, raw: Sequence | np.ndarray) -> np.ndarray:
        """User rows of raw user ids; -1 where the data does not have one."""
        if self._user_index is None:
            self._user_index = RawIdIndex(self.sequences.user_ids)
        return self._user_index.lookup(raw if isinstance(raw, np.ndarray) else np.array(list(raw), dtype=object))

    # --- the model -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """No autograd, and the autocast the run was evaluated under (``trainer.precision``; none for 32/64 and
        ``*-true``, whose weights ``__init__`` cast); the caller keeps the model in eval mode (serving does once)."""
        dtype = AUTOCAST_DTYPES.get(self.precision)
        with torch.inference_mode(), torch.autocast(self.device.type, dtype=dtype) if dtype else contextlib.nullcontext():
            yield

    @contextlib.contextmanager
    def inference(self) -> Iterator[None]:
        """Eval mode, no autograd, and the autocast the run was evaluated under (``autocast``)."""
        self.task.eval()
        with self.autocast():
            yield

    def hidden(self, windows: np.ndarray) -> Tensor:
        """(B, d) the model's state at the newest position of left-padded windows (B, max_len), as ``NextItemTask.ranks``
        computes it (``SequenceRecommender.query_hidden``)."""
        return self.net.query_hidden(torch.from_numpy(windows).to(self.device))

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
            return catalogue_topk(self.net, hidden, k, exclude, allowed, pairs, self.chunk_size, ties)

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
        mask = torch.zeros(self.net.num_items + 1, dtype=torch.bool, device=self.device)
        mask[torch.from_numpy(ids[ids > 0]).to(self.device)] = True
        return mask

    # --- recurrent models: O(1) state per user ------------------------------------------------------
    @property
    def session(self) -> RecurrentSession:
        """The model's streaming inference (``seqrec.session``); TypeError for a model that is not recurrent."""
        if self._session is None:
            self._session = RecurrentSession(self.net)
        return self._session

    def init_state(self, batch_size: int = 1) -> SessionState:
        """The empty state of ``batch_size`` users (recurrent models only, e.g. LRURec)."""
        session = self.session
        with self.inference():
            return SessionState(session.start(batch_size)[0], None, [[] for _ in range(batch_size)])

    def update(self, state: SessionState, item: Any | Sequence) -> SessionState:
        """Feed one event per user (a raw item id, or one per row of the batch) -> the new state; O(1) per event.

        An item the catalogue does not know leaves that row's state unchanged (it has no embedding).
        """
        session = self.session
        raw = list(item) if isinstance(item, (list, tuple, np.ndarray)) else [item]
        if len(raw) != len(state.seen):
            raise ValueError(f"update: {len(raw)} items for a state of {len(state.seen)} users")
        ids = self.item_rows(raw)
        with self.inference():  # rows fed an unknown item (0) keep their state and previous output
            new_state, hidden = session.step(state.state, state.hidden, torch.from_numpy(ids).to(self.device))
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
            top = catalogue_topk(self.net, state.hidden, k, exclude, None, None, self.chunk_size, ties)
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
    must be the same). Builds the task and data through ``seqrec.build.build_for_inference`` from its ``config.yaml``
    (no Trainer, no logger: nothing is written to the run directory) and loads the checkpoint's ``state_dict``.
    """
    from seqrec.build import bind, build_for_inference, default_threads

    given = Path(path).expanduser()
    run_dir = find_run_dir(given)
    ckpt = given if given.is_file() and str(checkpoint) == "best" else resolve_checkpoint(run_dir, checkpoint)
    check_run_checkpoint(ckpt, run_dir)
    config_path = run_dir / CONFIG
    precision = _precision_of(config_path)
    args = [
        "--config", str(config_path),
        "--trainer.logger", "false", "--trainer.enable_progress_bar", "false",
        "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.strategy", "auto",
        "--trainer.precision", "32-true", "--threads", str(threads or default_threads()),
        *data_overrides(run_dir, overrides), *overrides,
    ]
    config, datamodule, task = build_for_inference(args)
    bind(task, datamodule)
    load_weights(task, ckpt, run_dir)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    log.info("loaded %s (%s, %s)", ckpt, type(task.net).__name__, datamodule.sequences.summary())
    return TrainedRun(config, datamodule, task, run_dir, ckpt, torch.device(device), precision)


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
