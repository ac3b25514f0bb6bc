"""benchmarks.fit_grid: a grid of fits runs once and is read back; paired differences by hand."""

import json
import runpy
import sys

import numpy as np
import pytest

from benchmarks import fit_grid
from seqrec.metrics.query_ranks import read_ranks_csv, write_ranks_csv


def ranks_run(root, name, ranks):
    run = root / name
    run.mkdir()
    (run / "config.yaml").write_text("{}\n")  # a run directory holds its config
    write_ranks_csv(run / "test_ranks.csv", np.array([[q, r] for q, r in enumerate(ranks)]))
    return run


def test_paired_by_hand(tmp_path):
    """d_q = mean over pairs of HR@2(run) − HR@2(base); s.e. = std(d, ddof=1)/√Q."""
    runs = [ranks_run(tmp_path, "a1", [1, 3, 2, 9]), ranks_run(tmp_path, "a2", [2, 2, 5, 1])]
    bases = [ranks_run(tmp_path, "b1", [3, 1, 1, 9]), ranks_run(tmp_path, "b2", [1, 4, 1, 1])]
    d = ((np.array([1, 0, 1, 0]) - np.array([0, 1, 1, 0])) + (np.array([1, 1, 0, 1]) - np.array([1, 0, 1, 1]))) / 2
    mean, se = fit_grid.paired(runs, bases, "hr@2")
    assert mean == pytest.approx(d.mean()) and se == pytest.approx(d.std(ddof=1) / 2)
    other = ranks_run(tmp_path, "c", [1, 1, 1])
    with pytest.raises(ValueError, match="other test queries"):
        fit_grid.paired([other], [bases[0]], "hr@2")


@pytest.mark.slow
def test_a_grid_fits_once_and_reads_back(ml100k_root, tmp_path):
    """Two tiny fits through the command line: their outcomes, curves and ranks are read; a second call trains
    nothing (the wall-time records stay as they were); a failing fit names its log."""
    common = ("--data.init_args.source.init_args.root", str(ml100k_root), "--data.max_len", "10",
              "--data.batch_size", "16", "--model.net.d_model", "16", "--trainer.max_epochs", "2",
              "--trainer.check_val_every_n_epoch", "1", "--threads", "1")
    fits = [fit_grid.Fit(f"tiny_s{seed}", "sasrec_ml100k.yaml", (*common, "--seed_everything", str(seed)))
            for seed in (1, 2)]
    dirs = fit_grid.run_all(fits, tmp_path, jobs=2)
    walls = {name: (run / fit_grid.RECORD).read_text() for name, run in dirs.items()}
    for run in dirs.values():
        done = fit_grid.outcome(run)
        assert done.steps > 0 and done.wall_s > 0 and "test/ndcg@10" in done.test
        assert done.epochs == 2 and done.best_epoch in (1, 2) and done.status == "max_epochs"
        steps = [step for step, _ in fit_grid.validation_curve(run, "ndcg@10")]
        assert len(steps) >= 2 and steps == sorted(set(steps))  # one validation per epoch, in order
        ranks = read_ranks_csv(run / "test_ranks.csv")  # (Q, 2): the queries' ranks give the test metric
        assert (ranks[:, 1] <= 10).mean() == pytest.approx(done.test["test/hr@10"], abs=1e-6)
    mean, _ = fit_grid.paired([dirs["tiny_s2"]], [dirs["tiny_s1"]], "ndcg@10")
    expected = fit_grid.outcome(dirs["tiny_s2"]).test["test/ndcg@10"] - fit_grid.outcome(dirs["tiny_s1"]).test["test/ndcg@10"]
    assert mean == pytest.approx(expected, abs=1e-6)
    again = fit_grid.run_all(fits, tmp_path, jobs=1)
    assert again == dirs and {name: (run / fit_grid.RECORD).read_text() for name, run in again.items()} == walls
    bad = fit_grid.Fit("bad", "sasrec_ml100k.yaml", (*common, "--model.net.no_such_flag", "1"))
    with pytest.raises(RuntimeError, match="bad failed .*logs/bad.log"):
        fit_grid.run_all([bad], tmp_path)
    assert json.loads(walls["tiny_s1"])["resumed"] is False
    changed = fit_grid.Fit("tiny_s1", "sasrec_ml100k.yaml", (*common, "--seed_everything", "3"))
    with pytest.raises(ValueError, match="other flags"):  # a tested run is never reused for another fit
        fit_grid.run_all([changed], tmp_path)


def test_publish_writes_the_section_and_the_raw_figures(tmp_path):
    out, raw = tmp_path / "R.md", tmp_path / "r.json"
    out.write_text("# R\n\n## Kept\n\nprose\n\n## Results\n\nold\n")
    done = {"a_s1": fit_grid.Outcome("runs/a", {"test/hr@10": 0.5}, 0.4, 10, 2, 1, "max_epochs", 30.0, 90.0),
            "b_s1": fit_grid.Outcome("runs/b", {"test/hr@10": 0.6}, 0.5, 10, 2, 2, "max_epochs", 20.0, 30.0)}
    text = fit_grid.publish(out, "Results", raw, "python -m benchmarks.x", "a machine", 2, done, ["| t |"],
                            {"extra": [1]})
    assert "2 fit(s) at a time" in text and "2 min of fit commands in all" in text and text.endswith("| t |")
    written = out.read_text()
    assert "## Kept\n\nprose" in written and "old" not in written and "| t |" in written
    payload = json.loads(raw.read_text())
    assert payload["command"] == "python -m benchmarks.x" and payload["extra"] == [1]
    assert payload["runs"]["b_s1"]["wall_s"] == 30.0


def test_a_fit_in_two_sittings_records_both_wall_times(tmp_path, monkeypatch):
    """A fit stopped by a signal at a resume point, then finished by the same command: the grid's record costs it
    as both sittings (5 s + 7 s of a fake clock), not the last one, and says it took two."""
    fit = fit_grid.Fit("two", "sasrec_ml100k.yaml")
    run = tmp_path / "two" / "version_0"
    commands = []

    def fake_fit(command, **_popen):  # first sitting: a checkpoint and SIGTERM's exit; second: the test
        commands.append(command)
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
        (run / "config.yaml").write_text("{}\n")
        (run / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
        if len(commands) == 1:
            return 143
        (run / "test_metrics.json").write_text('{"test/hr@10": 0.5}')
        write_ranks_csv(run / "test_ranks.csv", np.array([[0, 1]]))
        return 0

    clock = iter([0.0, 5.0, 10.0, 17.0])
    monkeypatch.setattr(fit_grid.child_process, "run", fake_fit)
    monkeypatch.setattr(fit_grid.time, "perf_counter", lambda: next(clock))
    with pytest.raises(fit_grid.child_process.Stopped, match="^two stopped by SIGTERM at a resume point") as stop:
        fit_grid.train(fit, tmp_path)
    assert stop.value.exit_code == 143
    assert json.loads((run / fit_grid.SITTINGS).read_text()) == {"wall_s": [5.0]}
    assert not (run / fit_grid.RECORD).exists()
    assert fit_grid.train(fit, tmp_path) == run
    assert "--ckpt_path" not in commands[0] and commands[1][-2:] == ["--ckpt_path", "last"]
    record = json.loads((run / fit_grid.RECORD).read_text())
    assert record["wall_s"] == 12.0 and record["sittings"] == 2 and record["resumed"] is True


def test_a_sitting_that_leaves_nothing_to_continue_is_not_counted(tmp_path):
    """No run directory, or one with neither a last.ckpt nor its test: the next sitting starts afresh, so [] ."""
    assert fit_grid.sitting_walls(None, 3.0) == []
    run = tmp_path / "version_0"
    run.mkdir()
    assert fit_grid.sitting_walls(run, 3.0) == []


@pytest.mark.parametrize("grid", ["benchmarks.baselines", "benchmarks.evornn", "benchmarks.mlp4rec"])
def test_a_grid_stopped_by_a_signal_says_so_in_one_line(grid, tmp_path, monkeypatch, capsys):
    """Run as a command (``python -m <grid>``), a grid whose fit a signal stopped exits with the fit's status and one
    line on stderr, no traceback (seqrec.errors.run_command): the user's cue to run the same command again."""
    def stopped(fits, runs_dir, jobs=1):
        raise fit_grid.child_process.Stopped(f"{fits[0].name} stopped by SIGTERM at a resume point: run the same "
                                             "command again to continue", 143)

    monkeypatch.setattr(fit_grid, "run_all", stopped)  # the grid module, run afresh below, imports it from here
    monkeypatch.delenv("SEQREC_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", [grid, "--runs_dir", str(tmp_path), "--out", str(tmp_path / "R.md")])
    monkeypatch.delitem(sys.modules, grid, raising=False)  # runpy runs a fresh copy as __main__
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_module(grid, run_name="__main__")
    err = capsys.readouterr().err
    assert exit_info.value.code == 143
    assert err.endswith("stopped by SIGTERM at a resume point: run the same command again to continue\n")
    assert err.count("\n") == 1 and "Traceback" not in err
