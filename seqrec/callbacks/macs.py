"""MACs per scored sequence and per training sample, logged as ``cost/macs_*`` when fitting starts and with every test.

What is counted (``seqrec.cost.flops`` states the convention: 1 MAC = one multiply-add; complex × complex
= 4 real MACs; elementwise real ops, norms, softmax and lookups are free) on a probe batch made of the
first ``probe_size`` examples of the split, divided by the number of examples:

- ``cost/macs_per_sequence``: the model's ``forward(items)`` on one sequence of length L (all L positions,
  as the model computes them; a compression wrapper's reduced lengths are what runs, so they are what
  is counted);
- ``cost/macs_per_scored_sequence``: what evaluation runs per user: the forward plus scoring the
  newest position against the full catalogue (or the frozen candidates): ``task.ranks(batch)``;
- ``cost/macs_per_train_sample_forward``: the task's ``training_step`` (forward + loss scoring, e.g.
  full-softmax logits at every labelled position) per training example;
- ``cost/macs_per_train_sample``: forward + backward ≈ 3 × forward (the backward computes gradients
  of both operands of every product: 2 × the forward's MACs; the usual 6N-FLOPs-per-token rule);
- ``cost/macs_hand_per_sequence``: the model's own formula, when it declares one (below).

Cost hooks for model authors (all optional; plain ``nn.Module`` methods, torch only). They are the
runtime-checkable Protocols of ``seqrec.models.base``; the callbacks ask ``isinstance(model, ...)``:

``DeclaresMACs``: ``macs_per_sequence(self, seq_len: int) -> int``
    Hand formula for the MACs of ``forward`` on ONE sequence of ``seq_len`` items (all positions, no
    scoring), under the convention above. The callback logs it beside the measured count and warns
    when they differ by more than ``tolerance``; tests/cost/test_flops.py checks every model in
    ``seqrec.models`` that defines it at two lengths. Examples: SASRec with b blocks, width d, FFN f:
    b·(4·L·d² + 2·L²·d + 2·L·d·f); LRURec (parallel scan, P = 2^⌈log2 L⌉, H = state width):
    layers·(4·L·d·H + 8·L·d² + 2·P·log2(P)·H).
``DeclaresStateBytes``: ``state_bytes(self, batch_size: int = 1, seq_len: int | None = None) -> int``
    Bytes of per-user state a served model keeps (see ``seqrec.cost.state`` and the memory callback).
``DeclaresKeptLengths``: ``kept_lengths(self) -> list[int]``
    For attention models that drop or merge tokens (compression wrappers): tokens kept per attention
    layer; used for the KV-cache bytes.

What a task counts is declared by the Protocols of ``seqrec.tasks.base``: a task that ``ProbesMACs``
(``macs_probe(self, batch, stage) -> Tensor``, stage "train" or "eval") gives the computation to count for
one batch. It must return the tensors that computation produces (a tuple is fine): fvcore traces only the
operators that reach the outputs, so work whose result is dropped would count for FlopCounterMode but not
for fvcore. Otherwise "eval" counts ``task.ranks(batch)`` for a task that ``RanksTargets`` (else
``task.net(batch["items"])``) and "train" counts ``task.training_step(batch, 0)`` with logging muted.
(A CTR task would return e.g. ``model.score_state(model.prefill(history), targets)``.)

Backends: "fvcore" (FlopCountAnalysis on a jit trace; the issue's choice) or "flop_counter" (torch's
FlopCounterMode, no extra package); both give the same numbers (tested). A model fvcore cannot trace is
counted by FlopCounterMode instead, with a warning. ``cross_check`` counts with both and warns on a gap.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator, Sized
from typing import Any, Literal

import lightning as L
import torch
from lightning.fabric.utilities.apply_func import move_data_to_device
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import DeepSpeedStrategy
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch import Tensor
from torch.utils.data import DataLoader, IterableDataset

from seqrec.cost.flops import BACKENDS, MACCount, MACsTraceError, count_macs, fvcore_available
from seqrec.models.base import DeclaresMACs
from seqrec.tasks.base import ProbesMACs, RanksTargets, RecommendationTask

log = logging.getLogger(__name__)
TRAIN_BACKWARD_FACTOR = 3  # forward + backward ≈ 3 × forward


# ---------------------------------------------------------------------------------------------------
# probe batches and computations
# ---------------------------------------------------------------------------------------------------


def first_examples(loader: Any, count: int) -> dict[str, Tensor] | None:
    """The first ``count`` examples of a DataLoader's map-style dataset, collated as the loader collates them."""
    if not isinstance(loader, DataLoader) or isinstance(loader.dataset, IterableDataset):
        return None
    dataset = loader.dataset
    if not isinstance(dataset, Sized) or len(dataset) == 0:
        return None
    collate = loader.collate_fn or torch.utils.data.default_collate
    count = min(count, loader.batch_size or count)  # never more than a real step computes
    return collate([dataset[i] for i in range(min(count, len(dataset)))])


def probe_batch(trainer: L.Trainer, split: Literal["train", "val", "test"], count: int) -> dict[str, Tensor] | None:
    """First examples of a split, from the trainer's loaders when set, else from the datamodule."""
    loaders = {"train": trainer.train_dataloader, "val": trainer.val_dataloaders, "test": trainer.test_dataloaders}[split]
    datamodule = trainer.datamodule
    if loaders is None and datamodule is not None:
        method = {"train": datamodule.train_dataloader, "val": datamodule.val_dataloader,
                  "test": datamodule.test_dataloader}[split]
        try:
            loaders = method()
        except Exception as error:  # noqa: BLE001 (a datamodule without that split)
            log.debug("no %s loader for the MACs probe: %s", split, error)
            return None
    if isinstance(loaders, (list, tuple)):
        loaders = loaders[0] if loaders else None
    if isinstance(loaders, dict):
        loaders = next(iter(loaders.values()), None)
    return first_examples(loaders, count) if loaders is not None else None


def _rows(batch: dict[str, Tensor]) -> int:
    for value in batch.values():
        if isinstance(value, Tensor) and value.dim() > 0:
            return int(value.shape[0])
    raise ValueError("the probe batch holds no tensor with a batch dimension")


@contextlib.contextmanager
def _probe_mode(module: torch.nn.Module, training: bool) -> Iterator[None]:
    """Train/eval mode, no autograd, the RNG state restored afterwards (counting never changes a run)."""
    modes = [(m, m.training) for m in module.modules()]
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices), torch.no_grad():
        module.train(training)
        try:
            yield
        finally:
            for m, mode in modes:
                m.training = mode


def _muted(task: L.LightningModule) -> contextlib.AbstractContextManager:
    """``task.log`` / ``task.log_dict`` as no-ops (a training step logs; outside the loop it may not)."""
    stack = contextlib.ExitStack()
    for name in ("log", "log_dict"):
        stack.enter_context(_patched(task, name, lambda *args, **kwargs: None))
    return stack


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    had = name in vars(obj)
    old = vars(obj).get(name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if had:
            setattr(obj, name, old)
        else:
            delattr(obj, name)


def network(task: L.LightningModule) -> torch.nn.Module | None:
    """The network a ``RecommendationTask`` holds (``task.net``); None for another LightningModule."""
    return task.net if isinstance(task, RecommendationTask) else None


def probe_function(task: L.LightningModule, stage: Literal["train", "eval", "encoder"]) -> Callable[[dict], Any] | None:
    """The computation to count for one batch of ``stage`` (see the module docstring), or None."""
    model = network(task)
    if stage == "encoder":
        if model is None:
            return None
        return lambda batch: model(batch["items"]) if "items" in batch else None
    if isinstance(task, ProbesMACs):
        return lambda batch: task.macs_probe(batch, stage)
    if stage == "eval":
        if isinstance(task, RanksTargets):
            return task.ranks
        return (lambda batch: model(batch["items"])) if model is not None else None
    if not any(p.requires_grad for p in task.parameters()) or not task.automatic_optimization:
        return None  # no gradient step to count (e.g. the popularity baseline only counts labels)

    def train(batch: dict) -> Any:
        with _muted(task):
            return task.training_step(batch, 0)

    return train


def measure(
    task: L.LightningModule,
    batch: dict[str, Tensor],
    stage: Literal["train", "eval", "encoder"],
    backend: str = "fvcore",
) -> MACCount | None:
    """MACs of ``stage``'s computation on ``batch`` (the whole batch; divide by its rows per example)."""
    fn = probe_function(task, stage)
    if fn is None or (stage == "encoder" and "items" not in batch):
        return None
    keys = [k for k, v in batch.items() if isinstance(v, Tensor)]
    rest = {k: v for k, v in batch.items() if not isinstance(v, Tensor)}

    def call(*tensors: Tensor) -> Any:
        out = fn({**rest, **dict(zip(keys, tensors))})
        return out if out is not None else torch.zeros(())

    inputs = tuple(batch[k] for k in keys)
    with _probe_mode(task, training=stage == "train"):
        return count_macs(call, inputs, backend, owner=task)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------
# the callback
# ---------------------------------------------------------------------------------------------------


class MACsCallback(Callback):
    """Counts MACs per scored sequence / training sample (see the module docstring) and logs ``cost/macs_*``.

    Args:
        backend: "fvcore" (default when installed) or "flop_counter".
        cross_check: also count with the other backend and warn when they differ by more than ``tolerance``.
        probe_size: examples in the probe batch (the first ones of the split; data-dependent models are averaged).
        tolerance: relative gap that triggers a warning (hand formula vs measured, backend vs backend).
    """

    def __init__(
        self,
        backend: Literal["fvcore", "flop_counter"] = "fvcore",
        cross_check: bool = False,
        probe_size: int = 8,
        tolerance: float = 0.01,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"unknown MACs backend {backend!r}: use one of {BACKENDS}")
        if probe_size < 1:
            raise ValueError(f"probe_size must be >= 1, got {probe_size}")
        if backend == "fvcore" and not fvcore_available():
            log.warning("fvcore is not installed (pip install 'seqrec[cost]'): counting MACs with FlopCounterMode")
            backend = "flop_counter"
        self.backend, self.cross_check = backend, cross_check
        self.probe_size, self.tolerance = probe_size, tolerance
        self.values: dict[str, float] = {}
        self._untraceable: set[str] = set()
        self._used: set[str] = set()

    # --- counting ---------------------------------------------------------------------------------
    def _count(self, task: L.LightningModule, batch: dict[str, Tensor], stage: str) -> int | None:
        name = type(network(task) or task).__name__
        backend = "flop_counter" if name in self._untraceable else self.backend
        try:
            result = measure(task, batch, stage, backend)  # type: ignore[arg-type]
        except MACsTraceError as error:
            self._untraceable.add(name)
            log.warning("%s; counting %s with FlopCounterMode instead", error, name)
            result, backend = measure(task, batch, stage, "flop_counter"), "flop_counter"  # type: ignore[arg-type]
        if result is None:
            return None
        self._used.add(backend)
        if result.skipped:
            log.warning(
                "MACs (%s, %s): operators that may multiply-accumulate were not counted: %s. Register a handler "
                "in seqrec/cost/flops.py", backend, stage, result.skipped,
            )
        if self.cross_check:
            other = "flop_counter" if backend == "fvcore" else "fvcore"
            try:
                second = measure(task, batch, stage, other)  # type: ignore[arg-type]
            except MACsTraceError as error:
                log.warning("MACs cross-check with %s impossible: %s", other, error)
            else:
                if second is not None and abs(second.total - result.total) > self.tolerance * max(result.total, 1):
                    log.warning(
                        "MACs (%s): %s counts %d but %s counts %d", stage, backend, result.total, other, second.total
                    )
        return result.total

    def compute(self, trainer: L.Trainer, task: L.LightningModule, eval_split: Literal["val", "test"]) -> dict[str, float]:
        """All ``cost/macs_*`` values for the current model, from probe batches of train and ``eval_split``."""
        values: dict[str, float] = {}
        device = task.device
        eval_batch = probe_batch(trainer, eval_split, self.probe_size)
        if eval_batch is not None:
            rows = _rows(eval_batch)
            eval_batch = move_data_to_device(eval_batch, device)
            encoder = self._count(task, eval_batch, "encoder")
            if encoder is not None:
                values["cost/macs_per_sequence"] = encoder / rows
            scored = self._count(task, eval_batch, "eval")
            if scored is not None:
                values["cost/macs_per_scored_sequence"] = scored / rows
            model = network(task)
            if isinstance(model, DeclaresMACs) and "items" in eval_batch:
                seq_len = int(eval_batch["items"].shape[1])
                values["cost/macs_hand_per_sequence"] = float(model.macs_per_sequence(seq_len))
                measured = values.get("cost/macs_per_sequence")
                if measured is not None and abs(measured - values["cost/macs_hand_per_sequence"]) > self.tolerance * max(measured, 1):
                    log.warning(
                        "%s.macs_per_sequence(%d) = %d but %d MACs were counted: fix the formula or the model",
                        type(model).__name__, seq_len, values["cost/macs_hand_per_sequence"], measured,
                    )
        train_batch = probe_batch(trainer, "train", self.probe_size)
        if train_batch is not None:
            rows = _rows(train_batch)
            forward = self._count(task, move_data_to_device(train_batch, device), "train")
            if forward is None and not any(p.requires_grad for p in task.parameters()):
                forward = 0  # nothing to train: no gradient step
            if forward is not None:
                values["cost/macs_per_train_sample_forward"] = forward / rows
                values["cost/macs_per_train_sample"] = TRAIN_BACKWARD_FACTOR * forward / rows
        return values

    # --- hooks ------------------------------------------------------------------------------------
    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        """Under DeepSpeed ZeRO-3 count here, before the parameters are partitioned across ranks."""
        if _zero_stage(trainer) == 3 and stage in ("fit", "test") and not self.values:
            self.values = self.compute(trainer, pl_module, "val" if stage == "fit" else "test")

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Count and send ``cost/macs_*`` to the loggers before the first step."""
        if _zero_stage(trainer) != 3:
            self.values = self.compute(trainer, pl_module, "val")
        if self.values:
            _describe(self.values, "+".join(sorted(self._used)) or self.backend)
            for logger in trainer.loggers:
                logger.log_metrics(dict(self.values), step=trainer.global_step)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Count again for the weights under test (a compression wrapper's kept lengths may depend on them)."""
        if _zero_stage(trainer) != 3:
            self.values = self.compute(trainer, pl_module, "test")

    def on_test_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Log ``cost/macs_*`` with the test metrics (so they land in test_metrics.json)."""
        for name, value in self.values.items():
            pl_module.log(name, torch.tensor(value, dtype=torch.float64, device=pl_module.device), sync_dist=True)


def _zero_stage(trainer: L.Trainer) -> int | None:
    """The DeepSpeed ZeRO stage of the trainer's strategy (None without DeepSpeed)."""
    if isinstance(trainer.strategy, DeepSpeedStrategy) and isinstance(trainer.strategy.config, dict):
        return trainer.strategy.config.get("zero_optimization", {}).get("stage")
    return None


def _describe(values: dict[str, float], backend: str) -> None:
    text = ", ".join(f"{k.removeprefix('cost/')}={_human(v)}" for k, v in values.items())
    rank_zero_info(f"MACs ({backend}): {text}")


def _human(value: float) -> str:
    """1234567 -> '1.23M'."""
    if value == 0 or not math.isfinite(value):
        return str(value)
    units = ["", "K", "M", "G", "T", "P"]
    power = min(int(math.log10(abs(value)) // 3), len(units) - 1)
    return f"{value / 10 ** (3 * power):.3g}{units[power]}"
