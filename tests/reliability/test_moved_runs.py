"""A copied or moved run directory predicts and serves with its own checkpoints and finds its data; where it cannot,
one line names both places, and it never loads another run's file (``seqrec.runs``).

Runs are trained as a user trains them (``tests/reliability/user_runs.py``): from a project folder, with a relative
``--data.source.path events.csv`` and ``runs/`` beside it, so ``fit_summary.json`` records the best checkpoint as
``runs/lru_interactions/version_0/checkpoints/best-....ckpt``, relative to that folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import seqrec
from seqrec.__main__ import main
from seqrec.runs import recorded_best
from tests.reliability.user_runs import fit_from, weights

pytestmark = pytest.mark.slow  # fault injection: runs moved or missing their data


@pytest.fixture(scope="module")
def projects(tmp_path_factory):
    """Two projects trained alike but with other seeds: ``a`` and ``b``, each with runs/lru_interactions/version_0."""
    root = tmp_path_factory.mktemp("projects")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQREC_CACHE", str(root / "cache"))
        return {"a": fit_from(root / "a", seed=1), "b": fit_from(root / "b", seed=2), "root": root}


@pytest.fixture
def cache(projects, monkeypatch):
    monkeypatch.setenv("SEQREC_CACHE", str(projects["root"] / "cache"))


def predict(run: Path, out: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    """``python -m seqrec predict`` in process: (exit status, the ``error:`` lines of stderr)."""
    capsys.readouterr()
    code = 0
    try:
        main(["predict", str(run), "--out", str(out), "--threads", "1", "--no_progress", *extra])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err[-3000:]
    return code, [line for line in err.splitlines() if line.startswith("error:")]


@pytest.fixture
def hidden_data(projects):
    """Project a's events.csv moved away for the test (as when the project folder moved), then put back."""
    data = projects["a"].parents[2] / "events.csv"
    away = data.with_name("events.csv.away")
    data.rename(away)
    yield data
    away.rename(data)


def test_a_copied_run_loads_its_own_weights_not_the_working_directorys_run(projects, cache, tmp_path, monkeypatch, capsys):
    a, b = projects["a"], projects["b"]
    project_b = b.parents[2]
    recorded = recorded_best(a)
    assert not Path(recorded).is_absolute() and (project_b / recorded).is_file()  # the probe's setting
    copy = project_b / "copies" / "version_0"
    shutil.copytree(a, copy)
    monkeypatch.chdir(project_b)
    own = weights(a / "checkpoints" / Path(recorded).name)
    other = weights(project_b / recorded)
    assert not torch.equal(own["net.item_embedding.weight"], other["net.item_embedding.weight"])

    run = seqrec.load_run(copy, threads=1)
    assert run.checkpoint == copy / "checkpoints" / Path(recorded).name
    assert torch.equal(run.task.state_dict()["net.item_embedding.weight"], own["net.item_embedding.weight"])
    assert predict(copy, tmp_path / "copy.csv", capsys) == (0, [])
    assert predict(a, tmp_path / "original.csv", capsys) == (0, [])
    assert (tmp_path / "copy.csv").read_bytes() == (tmp_path / "original.csv").read_bytes()

    pytest.importorskip("fastapi", reason="the serve extra is not installed (pip install 'seqrec[serve]')")
    from seqrec.serve.cli import build_serving, parser

    serving = build_serving(parser().parse_args([str(copy), "--store", ":memory:", "--threads", "1"]))
    assert serving.description["checkpoint"] == str(copy / "checkpoints" / Path(recorded).name)
    serving.close()


def test_a_run_without_its_best_checkpoint_names_both_places_and_loads_no_other(projects, cache, tmp_path, monkeypatch,
                                                                                 capsys):
    a, b = projects["a"], projects["b"]
    project_b = b.parents[2]
    copy = project_b / "copies" / "version_1"
    shutil.copytree(a, copy)
    name = Path(recorded_best(a)).name
    (copy / "checkpoints" / name).unlink()  # copied without it: the recorded path from here is b's file
    monkeypatch.chdir(project_b)
    code, errors = predict(copy, tmp_path / "out.csv", capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"run {copy}: its best checkpoint runs/lru_interactions/version_0/checkpoints/{name}" in errors[0]
    assert f"{copy / 'checkpoints' / name} is missing; the run was trained at {a}" in errors[0]
    assert errors[0].endswith("or pass --ckpt_path last")
    assert predict(copy, tmp_path / "out.csv", capsys, "--ckpt_path", "last") == (0, [])


def test_a_run_moved_alone_reads_its_data_where_it_was(projects, cache, tmp_path, monkeypatch, capsys):
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(projects["a"], elsewhere / "run")
    monkeypatch.chdir(elsewhere)  # no events.csv here: the config's relative path names nothing
    assert predict(elsewhere / "run", tmp_path / "out.csv", capsys) == (0, [])
    assert len(seqrec.load_run(elsewhere / "run", threads=1).sequences.user_ids) == 60


def test_a_project_moved_with_its_runs_reads_the_data_beside_them(projects, cache, hidden_data, tmp_path, monkeypatch,
                                                                  capsys):
    moved = tmp_path / "moved-project"
    shutil.copytree(projects["a"].parents[2], moved, ignore=shutil.ignore_patterns("*.away"))
    shutil.copy(hidden_data.with_name("events.csv.away"), moved / "events.csv")
    monkeypatch.chdir(tmp_path)
    run = moved / "runs" / "lru_interactions" / projects["a"].name
    assert predict(run, tmp_path / "out.csv", capsys) == (0, [])
    (run / "origin.json").unlink()  # a run older than origin.json: its place under runs/ says where its data was
    assert predict(run, tmp_path / "out.csv", capsys) == (0, [])


def test_a_run_whose_data_is_gone_names_both_places_and_the_flag(projects, cache, hidden_data, tmp_path, monkeypatch,
                                                                 capsys):
    other = tmp_path / "other-project"
    run = other / "runs" / "lru_interactions" / "version_0"
    shutil.copytree(projects["a"], run)
    (other / "events.csv").write_text("user,item,timestamp\nx,y,1\n")  # another file at the relative place
    monkeypatch.chdir(tmp_path)
    code, errors = predict(run, tmp_path / "out.csv", capsys)
    assert code == 2 and len(errors) == 1, errors
    assert (f"error: run {run}: its data --data.source.path 'events.csv' is not at {hidden_data} (where it was when "
            f"the run was trained) nor at {other / 'events.csv'} (the same place relative to the run)") in errors[0]
    assert "bytes, not" in errors[0] and errors[0].endswith("pass --data.source.path PATH (the same data) to predict or serve it")
    data = hidden_data.with_name("events.csv.away")
    assert predict(run, tmp_path / "out.csv", capsys, "--data.source.path", str(data)) == (0, [])
