"""Data loaders shared by every datamodule: shuffled training, exact (padding-flagged) evaluation shards."""

from __future__ import annotations

import math

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler


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


class SplitLoaders:
    """Mixin: ``train/val/test_dataloader`` over ``self.datasets["train" | "valid" | "test"]``.

    Expects ``datasets``, ``batch_size``, ``eval_batch_size`` and ``num_workers`` on the datamodule.
    Evaluation loaders never shuffle and, under several processes, shard exactly (``eval_shards``).
    """

    datasets: dict[str, Dataset]
    batch_size: int
    eval_batch_size: int
    num_workers: int

    def _loader(self, name: str, batch_size: int, shuffle: bool) -> DataLoader:
        dataset, sampler = self.datasets[name], None
        if not shuffle:  # evaluation: exact shards under multi-process runs (see eval_shards)
            dataset, sampler = eval_shards(dataset, getattr(self, "trainer", None))
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            sampler=sampler,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled training examples."""
        return self._loader("train", self.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        """Validation examples in order."""
        return self._loader("valid", self.eval_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        """Test examples in order."""
        return self._loader("test", self.eval_batch_size, shuffle=False)
