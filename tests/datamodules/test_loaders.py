"""Training order from (seed, epoch) alone, resumable mid-epoch; no loader draws from the global generator."""

import torch
from torch.utils.data import TensorDataset

from seqrec.datamodules.loaders import EpochShuffle, ResumableLoader, SplitLoaders


def order(sampler: EpochShuffle, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_epoch_order_depends_on_seed_and_epoch_only():
    data = TensorDataset(torch.arange(10))
    sampler = EpochShuffle(data, batch_size=3, seed=5)
    expected = torch.randperm(10, generator=torch.Generator().manual_seed(5 + 1)).tolist()
    torch.manual_seed(123)
    first = order(sampler, 1)
    torch.manual_seed(456)  # the global generator plays no part
    assert first == order(EpochShuffle(data, batch_size=3, seed=5), 1) == expected
    assert sorted(first) == list(range(10)) and order(sampler, 2) != first


def test_resume_skips_the_batches_done_once():
    data = TensorDataset(torch.arange(10))
    sampler = EpochShuffle(data, batch_size=3, seed=0)
    whole = order(sampler, 4)
    sampler.resume(4, 2)
    assert list(sampler) == whole[6:]  # two batches of 3 were done
    assert list(sampler) == whole  # only once
    sampler.resume(3, 2)
    sampler.set_epoch(4)
    assert list(sampler) == whole  # a position in another epoch does not apply


def test_ranks_share_the_epoch_without_overlap():
    data = TensorDataset(torch.arange(11))
    shares = [order(EpochShuffle(data, batch_size=2, num_replicas=2, rank=r, seed=1), 0) for r in (0, 1)]
    assert len(shares[0]) == len(shares[1]) == 6 and set(shares[0]) | set(shares[1]) == set(range(11))


class Data(SplitLoaders):
    def __init__(self) -> None:
        self.datasets = {name: TensorDataset(torch.arange(20)) for name in ("train", "valid", "test")}
        self.batch_size, self.eval_batch_size, self.num_workers = 4, 8, 0
        self.trainer = None  # a LightningDataModule's, before a trainer attaches it


def test_loaders_leave_the_global_generator_alone_and_save_their_position():
    data = Data()
    state = torch.get_rng_state()
    train = data.train_dataloader()
    for loader in (train, data.val_dataloader(), data.test_dataloader()):
        list(loader)
    assert torch.equal(torch.get_rng_state(), state)  # a validation cannot move the training's random stream
    assert isinstance(train, ResumableLoader)
    train.batches_done = lambda: 3
    train.sampler.set_epoch(2)
    saved = train.state_dict()
    assert saved == {"epoch": 2, "batches": 3}
    again = Data().train_dataloader()
    again.load_state_dict(saved)
    rest = [batch[0].tolist() for batch in again]
    train.sampler.set_epoch(2)
    assert rest == [batch[0].tolist() for batch in train][3:]


def test_a_keyed_sampler_hands_each_example_the_epochs_seed():
    data = TensorDataset(torch.arange(10))
    plain, keyed = EpochShuffle(data, batch_size=3, seed=5), EpochShuffle(data, batch_size=3, seed=5, keyed=True)
    assert order(keyed, 2) == [(7, i) for i in order(plain, 2)]
    keyed.resume(2, 1)
    assert list(keyed) == [(7, i) for i in order(plain, 2)[3:]]


def test_only_a_dataset_drawn_per_epoch_gets_epoch_keys():
    import numpy as np

    from seqrec.data.cloze import ClozeExamples
    from seqrec.data.examples import TrainExamples
    from seqrec.datamodules.loaders import KeyedByEpoch

    items, start, stop = np.arange(1, 9), np.array([0]), np.array([8])
    assert isinstance(ClozeExamples(items, start, stop, 8, 8, 0.2, "bert"), KeyedByEpoch)
    assert not isinstance(TrainExamples(items, start, stop, 8, "windows", True), KeyedByEpoch)
