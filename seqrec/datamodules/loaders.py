"""Data loaders shared by every datamodule: a resumable seeded training order, exact (padding-flagged) evaluation shards.

Training order. Epoch e visits the training examples in a permutation drawn from ``seed + e`` alone
(``EpochShuffle``), never from the global torch generator, and the loader records in every checkpoint how
many batches of its epoch were done (``ResumableLoader``; Lightning saves and restores a loader that has
``state_dict``/``load_state_dict``). A resumed run therefore sees exactly the batches an uninterrupted run
sees, wherever the checkpoint was taken (end of an epoch, a validation every N epochs or every N steps, a
signal in the middle of an epoch), and the global generator is left to the model (dropout), whose state
``seqrec.callbacks.rng`` restores.

Every loader also gets its own ``torch.Generator``: a DataLoader otherwise draws its workers' base seed
from the global generator each time it is iterated, so merely running a validation would move the
training's random stream.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol, runtime_checkable

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from seqrec.lightning_private import batches_processed


class FlaggedPadding(Dataset):
    """An evaluation dataset padded to a multiple of ``world_size`` with copies of its first queries, flagged.

    Every item gains ``valid``: True for the real queries, False for the copies. Each rank then runs the
    same number of queries and batches (DeepSpeed ZeRO-3 and FSDP gather parameters inside every forward,
    so a rank with a batch fewer would leave the others waiting forever), while the task drops the copies
    from its metric sums, so a multi-process evaluation counts every query exactly once.
    """

    def __init__(self, dataset: Dataset, world_size: int) -> None:
        self.dataset, self.size = dataset, len(dataset)  # type: ignore[arg-type]
        self.total = math.ceil(self.size / world_size) * world_size

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, index: int) -> dict:
        item = self.dataset[index % self.size]
        if not isinstance(item, dict):
            raise TypeError(f"distributed evaluation needs dict examples (to flag padding), got {type(item).__name__}")
        return {**item, "valid": torch.tensor(index < self.size)}


def eval_shards(dataset: Dataset, trainer: L.Trainer | None) -> tuple[Dataset, DistributedSampler | None]:
    """(dataset, sampler) for an evaluation loader: unchanged in one process; with W processes the
    dataset padded by ``FlaggedPadding`` and a non-shuffling DistributedSampler (rank r gets queries
    r, r+W, ...). Lightning keeps a DistributedSampler it finds, so it adds no padding of its own.
    """
    world = trainer.world_size if trainer is not None else 1
    if world <= 1:
        return dataset, None
    padded = FlaggedPadding(dataset, world)
    return padded, DistributedSampler(padded, num_replicas=world, rank=trainer.global_rank, shuffle=False)


def run_seed() -> int:
    """The run's seed as ``seed_everything`` recorded it (``$PL_GLOBAL_SEED``), else 0."""
    try:
        return int(os.environ.get("PL_GLOBAL_SEED", "0"))
    except ValueError:
        return 0


class EpochShuffle(DistributedSampler):
    """The training order: epoch e is a permutation drawn from ``seed + e``, this rank's share of it.

    A ``DistributedSampler`` (so Lightning keeps it under several processes and calls ``set_epoch``),
    also used in one process. ``resume(epoch, batches)`` makes the next iteration of that epoch skip its
    first ``batches`` batches of ``batch_size`` (the ones a checkpoint says were trained on).
    ``keyed``: yield ``(seed + epoch, index)`` instead of ``index``, for a dataset whose examples are drawn anew
    each epoch from that key alone (``seqrec.data.cloze.ClozeExamples``: exact on resume, whatever the workers).
    """

    def __init__(self, dataset: Dataset, batch_size: int, num_replicas: int = 1, rank: int = 0, seed: int = 0,
                 keyed: bool = False) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=False)
        self.batch_size = batch_size
        self.keyed = keyed
        self._resume: tuple[int, int] | None = None

    def resume(self, epoch: int, batches: int) -> None:
        """Start at ``epoch``, skipping its first ``batches`` batches, once."""
        self.set_epoch(epoch)
        self._resume = (epoch, batches)

    def __iter__(self) -> Iterator[int | tuple[int, int]]:
        indices = list(super().__iter__())  # randperm(seed + epoch), padded to a multiple of W, every W-th from rank
        skip = 0
        if self._resume is not None:
            epoch, batches = self._resume
            self._resume = None
            if epoch == self.epoch:
                skip = batches * self.batch_size
        if self.keyed:
            return iter([(self.seed + self.epoch, index) for index in indices[skip:]])
        return iter(indices[skip:])


class ResumableLoader(DataLoader):
    """A training DataLoader over an ``EpochShuffle`` whose position is saved in every checkpoint.

    ``state_dict()`` is ``{"epoch", "batches"}``: the sampler's epoch and the batches of it the trainer has
    processed (``batches_done()``); ``load_state_dict`` makes the sampler resume there. Lightning calls
    both for a loader that has them (its "stateful dataloader" support) and then counts on the loader to
    yield only the batches not yet done.
    """

    def __init__(self, dataset: Dataset, sampler: EpochShuffle, batches_done: Callable[[], int], **kwargs: Any) -> None:
        super().__init__(dataset, sampler=sampler, **kwargs)
        self.batches_done = batches_done

    def state_dict(self) -> dict[str, int]:
        """Where the training stands in the data: the epoch and how many of its batches are done."""
        assert isinstance(self.sampler, EpochShuffle)
        return {"epoch": int(self.sampler.epoch), "batches": int(self.batches_done())}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Continue from a position saved by ``state_dict``."""
        assert isinstance(self.sampler, EpochShuffle)
        self.sampler.resume(int(state["epoch"]), int(state["batches"]))


def batches_done(trainer: L.Trainer | None) -> int:
    """Training batches the trainer has processed in the current epoch (0 outside a fit)."""
    if trainer is None:
        return 0
    try:
        return batches_processed(trainer)
    except AttributeError:
        return 0


@runtime_checkable
class KeyedByEpoch(Protocol):
    """A training dataset whose examples are drawn anew each epoch from ``(seed + epoch, index)`` alone
    (``seqrec.data.cloze.ClozeExamples``): its sampler yields those keys (``EpochShuffle(keyed=True)``)."""

    keyed_by_epoch: Literal[True]


class SplitLoaders:
    """Mixin: ``train/val/test_dataloader`` over ``self.datasets["train" | "valid" | "test"]``.

    Expects ``datasets``, ``batch_size``, ``eval_batch_size``, ``num_workers`` and ``trainer`` on the datamodule.
    Training batches follow ``EpochShuffle`` (seeded by the run's seed, resumable mid-epoch); evaluation
    loaders never shuffle and, under several processes, shard exactly (``eval_shards``).
    """

    datasets: dict[str, Dataset]
    batch_size: int
    eval_batch_size: int
    num_workers: int
    trainer: L.Trainer | None  # LightningDataModule's: None until a trainer attaches it

    def _trainer(self) -> L.Trainer | None:
        return self.trainer

    def _eval_loader(self, name: str) -> DataLoader:
        dataset, sampler = eval_shards(self.datasets[name], self._trainer())
        return DataLoader(
            dataset,
            batch_size=self.eval_batch_size,
            shuffle=False,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator(),  # not the global one (see the module docstring)
        )

    def train_dataloader(self) -> DataLoader:
        """Training examples in the seeded, resumable order of ``EpochShuffle`` (keyed by epoch where the dataset asks)."""
        trainer = self._trainer()
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        seed = run_seed()
        keyed = isinstance(self.datasets["train"], KeyedByEpoch)  # cloze masks drawn per (seed + epoch, i)
        sampler = EpochShuffle(self.datasets["train"], self.batch_size, num_replicas=world, rank=rank, seed=seed, keyed=keyed)
        return ResumableLoader(
            self.datasets["train"],
            sampler,
            lambda: batches_done(self._trainer()),
            batch_size=self.batch_size,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=torch.Generator().manual_seed(seed),
        )

    def val_dataloader(self) -> DataLoader:
        """Validation examples in order."""
        return self._eval_loader("valid")

    def test_dataloader(self) -> DataLoader:
        """Test examples in order."""
        return self._eval_loader("test")
