"""``predict`` (and ``load_run``, ``serve``) fail in one line, exit 2, naming the file and the fix: a corrupt best
checkpoint, a ``--ckpt_path`` that is no checkpoint or another model's, an ``--out`` that cannot be written."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from seqrec.__main__ import main
from seqrec.runs import recorded_best
from tests.reliability.user_runs import fit_from

pytestmark = pytest.mark.slow  # fault injection: predict on broken runs


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny LRURec run and a tiny SASRec run of the same data."""
    root = tmp_path_factory.mktemp("predict-failures")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQREC_CACHE", str(root / "cache"))
        return {"lru": fit_from(root / "p"), "sasrec": fit_from(root / "p", config="sasrec_interactions.yaml"),
                "root": root}


@pytest.fixture
def run(runs, tmp_path, monkeypatch) -> Path:
    """A copy of the LRURec project (its data and the run), free to damage, predicted from its folder."""
    monkeypatch.setenv("SEQREC_CACHE", str(runs["root"] / "cache"))
    copy = tmp_path / "runs" / "lru_interactions" / "version_0"
    shutil.copytree(runs["lru"], copy)
    shutil.copy(runs["root"] / "p" / "events.csv", tmp_path / "events.csv")
    monkeypatch.chdir(tmp_path)
    return copy


def predict(run: Path, capsys, *extra: str) -> tuple[int, list[str], str]:
    """``python -m seqrec predict`` in process: (exit status, the ``error:`` lines, all of stderr)."""
    capsys.readouterr()
    code = 0
    try:
        main(["predict", str(run), "--threads", "1", "--no_progress", *extra])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    return code, [line for line in err.splitlines() if line.startswith("error:")], err


def one_line(code: int, errors: list[str], err: str) -> str:
    assert "Traceback" not in err, err[-3000:]
    assert code == 2 and len(errors) == 1, err[-3000:]
    return errors[0]


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_best_checkpoint_names_it_and_checkpoint_last(run, capsys, damage):
    best = run / "checkpoints" / Path(recorded_best(run)).name
    data = bytearray(best.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[len(data) // 2:]
    best.write_bytes(bytes(data))
    line = one_line(*predict(run, capsys, "--out", str(run / "top.csv")))
    assert line.startswith(f"error: checkpoint {best} cannot be used (") and line.endswith("; pass --ckpt_path last")
    assert predict(run, capsys, "--out", str(run / "top.csv"), "--ckpt_path", "last")[0] == 0


def test_a_checkpoint_option_that_is_no_checkpoint_is_one_line(run, capsys):
    not_one = run / "config.yaml"
    line = one_line(*predict(run, capsys, "--ckpt_path", str(not_one), "--out", str(run / "top.csv")))
    assert line == (f"error: checkpoint {not_one} cannot be used (truncated or not a checkpoint: File is not a zip "
                    "file); pass --ckpt_path last")


def test_another_models_checkpoint_is_one_line(runs, run, capsys):
    foreign = runs["sasrec"] / "checkpoints" / "last.ckpt"
    line = one_line(*predict(run, capsys, "--ckpt_path", str(foreign), "--out", str(run / "top.csv")))
    assert line.startswith(f"error: checkpoint {foreign} does not fit this run's model (")
    assert line.endswith("it is another run's or another config's; pass --ckpt_path last")


def test_an_output_in_a_folder_that_cannot_exist_is_one_line(run, capsys):
    blocker = run / "a-file"
    blocker.write_text("not a folder")
    out = blocker / "top.csv"
    line = one_line(*predict(run, capsys, "--out", str(out)))
    assert line.startswith(f"error: --out {out}: cannot write it (") and "nothing was written" in line


@pytest.mark.parametrize(("code", "reason"), [(errno.ENOSPC, "the disk is full"), (errno.EROFS, "the file system is "
                                              "read-only"), (errno.EACCES, "permission denied")])
def test_a_full_or_read_only_output_keeps_the_previous_file_and_is_one_line(run, capsys, monkeypatch, code, reason):
    out = run / "top.csv"
    assert predict(run, capsys, "--out", str(out))[0] == 0
    before = out.read_bytes()
    import seqrec.predict

    if code == errno.ENOSPC:  # halfway through the rows, as a disk filling up
        def full(self, table):  # noqa: ANN001
            raise OSError(code, os.strerror(code))

        monkeypatch.setattr(seqrec.predict.RowWriter, "write", full)
    else:  # the folder refuses the temporary file, as a read-only mount or a folder of another user
        def refused(*args, **kwargs):  # noqa: ANN002, ANN003
            raise OSError(code, os.strerror(code), str(out.parent))

        monkeypatch.setattr(tempfile, "mkstemp", refused)
    line = one_line(*predict(run, capsys, "--out", str(out)))
    assert line == (f"error: --out {out}: cannot write it ({reason}); the previous file is kept. Free space, or pass "
                    "--out a path in a writable folder")
    assert out.read_bytes() == before and not list(out.parent.glob(".top.csv.*"))
