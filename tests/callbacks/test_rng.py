"""RNG states travel with checkpoints and are put back just before the next training batch."""

import torch

from seqrec.callbacks.rng import RNGStateCheckpoint


def test_states_are_restored_before_the_first_batch_not_when_loaded():
    torch.manual_seed(0)
    saved = RNGStateCheckpoint().state_dict()
    expected = torch.rand(3)
    callback = RNGStateCheckpoint()
    torch.manual_seed(1)
    callback.load_state_dict(saved)
    assert callback.state_dict() is saved  # a checkpoint taken before the restore keeps the loaded states
    torch.rand(5)  # whatever draws between loading and training does not shift the stream
    callback.on_train_batch_start(None, None, None, 0)
    assert torch.equal(torch.rand(3), expected)
