"""Checkpoints written atomically beside their destination; a checkpoint that cannot be used is named with the fix."""

import errno
import os

import pytest
import torch

import seqrec.callbacks.checkpoint_io as checkpoint_io
from seqrec.callbacks.checkpoint_io import (
    AtomicCheckpointIO,
    CheckpointError,
    CheckpointWriteError,
    check_checkpoint,
)


def test_a_failed_write_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.arange(1000)}, path)
    before = path.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()  # not mkstemp's 0600

    def full_disk(checkpoint, tmp):
        with open(tmp, "wb") as handle:
            handle.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint_io, "_write", full_disk)
    with pytest.raises(CheckpointWriteError, match=r"could not write checkpoint .*last.ckpt \(the disk is full\); "
                                                   r"the previous last.ckpt is intact.*--ckpt_path"):
        io.save_checkpoint({"step": 2, "w": torch.arange(1000)}, path)
    assert path.read_bytes() == before and os.listdir(path.parent) == ["last.ckpt"]
    monkeypatch.undo()
    (path.parent / ".last.ckpt.abc.tmp").write_bytes(b"left by a kill -9")
    io.save_checkpoint({"step": 3}, path)
    assert os.listdir(path.parent) == ["last.ckpt"] and io.load_checkpoint(path)["step"] == 3


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def test_check_checkpoint_names_the_file_the_problem_and_the_fix(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    torch.save({"w": torch.arange(10000)}, folder / "best-epoch=1-step=8.ckpt")
    good = (folder / "best-epoch=1-step=8.ckpt").read_bytes()
    last = folder / "last.ckpt"
    with pytest.raises(CheckpointError, match="last.ckpt cannot be used .it does not exist"):
        check_checkpoint(last)
    last.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointError, match=r"truncated or not a checkpoint.*--ckpt_path .*best-epoch=1-step=8.ckpt"):
        check_checkpoint(last)
    flipped = bytearray(good)
    flipped[len(flipped) // 2] ^= 0x10
    last.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="fails its CRC check"):  # torch.load would accept it
        check_checkpoint(last)
    (folder / "best-epoch=1-step=8.ckpt").unlink()
    with pytest.raises(CheckpointError, match="no other usable checkpoint is beside it: start a new run"):
        check_checkpoint(last)
