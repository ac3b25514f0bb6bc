"""``python -m seqrec tune``: a small study end to end on the ML-100k fixture (table, plots, best config that refits
to the same validation figure, the test split never read, seeds), pruning through the real callback, bad input
as one line with nothing written, a trial stopped by SIGTERM resumed by a re-run, and two workers on a real
PostgreSQL server with one killed by SIGKILL mid-trial."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

import seqrec.fit
from seqrec.datamodules.next_item import NextItemDataModule
from seqrec.tune import main

optuna = pytest.importorskip("optuna", reason="the tune extra is not installed (pip install 'seqrec[tune]')")


def tiny(root: Path, *extra: str) -> list[str]:
    """The experiment's flags: sasrec_ml100k on the fixture, a small model, one thread, validation every epoch."""
    return [
        "--data.init_args.source.init_args.root", str(root),
        "--data.max_len", "10", "--data.batch_size", "16", "--model.net.d_model", "16",
        "--trainer.check_val_every_n_epoch", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.loggers", "[csv]", "--threads", "1", *extra,
    ]


def write_space(path: Path, space: dict) -> Path:
    path.write_text(yaml.safe_dump(space))
    return path


def load(runs: Path, study: str, storage: str | None = None):
    url = storage or f"sqlite:///{runs / 'tune' / study / 'study.db'}"
    return optuna.load_study(study_name=study, storage=url)


def refuse_test_split(self, *args, **kwargs):
    raise AssertionError("the test split was read while searching")


# --- a small study, end to end ---------------------------------------------------------------------------
@pytest.mark.slow
def test_a_grid_study_end_to_end(ml100k_root, tmp_path, monkeypatch, capsys):
    runs = tmp_path / "runs"
    space = write_space(tmp_path / "space.yaml", {"grid": {"model.net.dropout": [0.1, 0.3], "model.lr": ["1e-3", "3e-3"]}})
    monkeypatch.setattr(NextItemDataModule, "test_dataloader", refuse_test_split)
    result = main(["--config", "sasrec_ml100k", "--space", str(space), "--study", "grid", "--runs_dir", str(runs),
                   *tiny(ml100k_root, "--trainer.max_epochs", "3")])
    monkeypatch.undo()
    folder = runs / "tune" / "grid"

    # four complete trials, each grid point once, each a normal run directory that was never tested
    study = load(runs, "grid")
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    assert sorted((t.params["model.net.dropout"], t.params["model.lr"]) for t in trials) == [
        (0.1, 0.001), (0.1, 0.003), (0.3, 0.001), (0.3, 0.003)]
    for t in trials:
        run = folder / "trials" / f"trial_{t.number}"
        config = yaml.safe_load((run / "config.yaml").read_text())
        assert config["model"]["init_args"]["lr"] == t.params["model.lr"]
        assert config["model"]["init_args"]["net"]["init_args"]["dropout"] == t.params["model.net.dropout"]
        assert config["test"] is False and not (run / "test_metrics.json").exists()
        assert not [k for k in (run / "metrics.csv").read_text().splitlines()[0].split(",") if k.startswith("test/")]
        summary = json.loads((run / "fit_summary.json").read_text())
        assert t.value == summary["best_score"]  # the protocol's own checkpoint selection
        assert set(t.intermediate_values) == {0, 1, 2}  # pruning saw every validation, at its epoch
        assert max(t.intermediate_values.values()) == pytest.approx(t.value)

    # the table, the plots, the best config
    printed = capsys.readouterr().out
    table = (folder / "trials.md").read_text()
    best = study.best_trial
    assert f"| {best.number} | complete | {best.value:.4f} |" in table and "| best |" in table
    assert table.count("| complete |") == 4 and f"best: trial {best.number}" in printed
    for name in ("history.png", "importances.png", "parallel_coordinate.png", "curves.png"):
        assert (folder / name).read_bytes()[:4] == b"\x89PNG"
    assert result["best_trial"] == best.number and result["best_value"] == best.value
    best_config = folder / "grid_best.yaml"
    written = yaml.safe_load(best_config.read_text())
    assert written["compose"] == ["sasrec_ml100k.yaml"]
    assert written["model"]["init_args"]["lr"] == best.params["model.lr"]
    assert written["data"]["init_args"]["source"]["init_args"]["root"] == str(ml100k_root)
    assert "save_dir" not in json.dumps(written) and "test" not in written

    # fit --config grid_best.yaml reproduces the trial's validation figure, then tests it
    tested = seqrec.fit.main(["--config", str(best_config), "--trainer.logger.init_args.save_dir", str(tmp_path / "refit")])
    [refit] = (tmp_path / "refit" / "grid_best").glob("version_*")
    assert json.loads((refit / "fit_summary.json").read_text())["best_score"] == best.value
    assert "test/ndcg@10" in tested

    # --summary reprints the table; the study refuses another space; --seeds 2 reruns the best trial on seeds 42
    # and 43, tests included
    capsys.readouterr()
    main(["--summary", "grid", "--runs_dir", str(runs)])
    assert table.splitlines()[2] in capsys.readouterr().out
    other = write_space(tmp_path / "other.yaml", {"grid": {"model.lr": [0.01]}})
    with pytest.raises(SystemExit) as exit_info:
        main(["--config", "sasrec_ml100k", "--space", str(other), "--study", "grid", "--runs_dir", str(runs),
              *tiny(ml100k_root, "--trainer.max_epochs", "3")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: study 'grid' searched another experiment (space: " in err and "{'model.lr': [0.01]}} now" in err
    seeds = main(["--study", "grid", "--runs_dir", str(runs), "--seeds", "2"])["seeds"]
    assert seeds[best.number]["seeds"] == [42, 43]
    assert seeds[best.number]["value"][0] == best.value  # seed 42 is the trial's own seed
    assert len(seeds[best.number]["test"]["test/ndcg@10"]) == 2
    report = (folder / "seeds.md").read_text()
    assert "±" in report and f"| {best.number} |" in report
    assert sorted(p.name for p in (folder / "seeds").iterdir()) == [
        f"trial_{best.number}_seed_42", f"trial_{best.number}_seed_43"]


@pytest.mark.slow
def test_pruning_stops_a_worse_trial_through_the_callback(ml100k_root, tmp_path):
    """Two trials: lr 3e-3, then lr 1e-6 (far below at its first validation): the median pruner, after one
    finished trial, stops the second after its first epoch; its run ends as a normal run marked pruned."""
    values = [0.003, 1e-6]
    dry = optuna.create_study(sampler=optuna.samplers.GridSampler({"model.lr": values}))
    dry.optimize(lambda t: t.suggest_categorical("model.lr", values), n_trials=1)
    if dry.trials[0].params["model.lr"] != 0.003:  # GridSampler shuffles with a fixed seed: put the good one first
        values.reverse()
    space = write_space(tmp_path / "space.yaml", {"grid": {"model.lr": values}})
    runs = tmp_path / "runs"
    main(["--config", "sasrec_ml100k", "--space", str(space), "--study", "prune", "--runs_dir", str(runs),
          "--pruner", "median", "--pruner_startup_trials", "1", *tiny(ml100k_root, "--trainer.max_epochs", "4")])
    first, second = load(runs, "prune").get_trials()
    assert first.params["model.lr"] == 0.003 and first.state.name == "COMPLETE" and len(first.intermediate_values) == 4
    assert second.state.name == "PRUNED" and list(second.intermediate_values) == [0]
    summary = json.loads((runs / "tune" / "prune" / "trials" / "trial_1" / "fit_summary.json").read_text())
    assert summary["status"] == "pruned" and summary["pruned_at"] == 0 and summary["epochs"] == 1
    assert "| 1 | pruned |" in (runs / "tune" / "prune" / "trials.md").read_text()


# --- bad input: one line, exit 2, nothing written ---------------------------------------------------------
def _refused(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and len(err) == 1 and err[0].startswith("error: ")
    return err[0]


@pytest.mark.parametrize(("space", "expected"), [
    ({"model.net.dropot": {"float": [0.1, 0.3]}}, "unknown key 'model.net.dropot'"),
    ({"model.net.d_model": {"float": [16, 64]}}, "does not fit the key's type: int (64 in the config)"),
    ({"model.net.dropout": {"float": [0.1, 1.5]}}, "the value 1.5 is refused"),
    ({"model.optimizer": {"categorical": ["adam", "sgdx"]}}, "the value 'sgdx' is refused"),
    ({"grid": {"model.lr": [0.1]}, "model.weight_decay": {"float": [0, 1]}}, "move ['model.weight_decay'] into it"),
])
def test_a_bad_space_is_one_line_and_writes_nothing(tmp_path, capsys, space, expected):
    path = write_space(tmp_path / "space.yaml", space)
    line = _refused(["--config", "sasrec_ml100k", "--space", str(path), "--trials", "2", "--study", "bad",
                     "--runs_dir", str(tmp_path / "runs")], capsys)
    assert f"--space {path}" in line and expected in line
    assert not (tmp_path / "runs").exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("url", ["postgresql://nobody@127.0.0.1:{port}/seqrec", "sqlite:///{tmp}/missing/dir/study.db"])
def test_an_unreachable_storage_is_one_line_and_writes_nothing(tmp_path, capsys, url):
    space = write_space(tmp_path / "space.yaml", {"model.lr": {"float": ["1e-4", "1e-2"], "log": True}})
    url = url.format(port=free_port(), tmp=tmp_path)
    line = _refused(["--config", "sasrec_ml100k", "--space", str(space), "--trials", "2", "--study", "bad",
                     "--runs_dir", str(tmp_path / "runs"), "--storage", url], capsys)
    assert "--storage" in line and "cannot open it" in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "missing").exists()


def test_flags_tune_sets_itself_are_refused(tmp_path, capsys):
    space = write_space(tmp_path / "space.yaml", {"model.lr": {"float": [0.001, 0.01]}})
    line = _refused(["--config", "sasrec_ml100k", "--space", str(space), "--trials", "2", "--study", "s",
                     "--runs_dir", str(tmp_path / "runs"), "--test", "true"], capsys)
    assert "--test: tune sets it for every trial" in line and not (tmp_path / "runs").exists()


# --- a trial stopped by SIGTERM resumes from its last.ckpt when the command is run again ------------------
def tune_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "seqrec", "tune", *args]


def wait_for(predicate, timeout: float, what: str, poll: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.mark.slow
def test_a_trial_stopped_by_sigterm_resumes_from_its_last_checkpoint(ml100k_root, tmp_path):
    runs = tmp_path / "runs"
    space = write_space(tmp_path / "space.yaml", {"grid": {"model.lr": [0.003]}})
    argv = ["--config", "sasrec_ml100k", "--space", str(space), "--study", "term", "--runs_dir", str(runs),
            *tiny(ml100k_root, "--trainer.max_epochs", "20", "--trainer.min_epochs", "20")]
    run = runs / "tune" / "term" / "trials" / "trial_0"
    with open(tmp_path / "worker.log", "wb") as out:
        worker = subprocess.Popen(tune_command(*argv), stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
        try:
            wait_for(lambda: (run / "checkpoints" / "last.ckpt").is_file(), 120, "trial 0's first last.ckpt")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 143
        finally:
            if worker.poll() is None:
                worker.kill()
    log = (tmp_path / "worker.log").read_text()
    assert "trial 0 is queued again and resumes from its last.ckpt" in log
    stopped_at = json.loads((run / "fit_summary.json").read_text())
    assert stopped_at["status"] == "interrupted" and stopped_at["epochs"] < 20

    main(argv)  # the same command again
    trials = load(runs, "term").get_trials()
    assert [(t.number, t.state.name) for t in trials] == [(0, "FAIL"), (1, "COMPLETE")]
    assert trials[1].system_attrs["failed_trial"] == 0 and trials[1].user_attrs["run_name"] == "trial_0"
    assert not (run.parent / "trial_1").exists()
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    sitting = header.split(",").index("sitting")
    assert {row.split(",")[sitting] for row in rows} == {"0", "1"}  # resumed, not restarted
    assert json.loads((run / "fit_summary.json").read_text())["epochs"] == 20


# --- several workers on a real PostgreSQL server -----------------------------------------------------------
def _postgres_bin() -> Path | None:
    """The folder of initdb and pg_ctl: on PATH, or Debian's /usr/lib/postgresql/<version>/bin."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda p: p.parent.parent.name)
    return versions[-1].parent if versions else None


@pytest.fixture(scope="module")
def postgres_url():
    """A private PostgreSQL cluster (initdb, then pg_ctl on 127.0.0.1 and a free port), stopped at the end.

    ``SEQREC_TEST_POSTGRES`` (a SQLAlchemy URL) uses a server CI started instead. initdb refuses to run as
    root: as root the cluster runs as the ``postgres`` user Debian's package creates.
    """
    if os.environ.get("SEQREC_TEST_POSTGRES"):
        yield os.environ["SEQREC_TEST_POSTGRES"]
        return
    pytest.importorskip("psycopg", reason="psycopg is not installed (pip install 'seqrec[tune]')")
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql): the several-worker test needs a real server")
    as_user = None
    if os.geteuid() == 0:
        try:
            as_user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root without a 'postgres' user (apt-get install postgresql creates it): "
                        "initdb refuses to run as root")
    root = Path(tempfile.mkdtemp(prefix="seqrec-pg-"))
    if as_user is not None:
        os.chown(root, as_user.pw_uid, as_user.pw_gid)

    def as_owner() -> None:
        if as_user is not None:
            os.setgid(as_user.pw_gid)
            os.setuid(as_user.pw_uid)

    def run(*command: str) -> None:
        subprocess.run(command, check=True, preexec_fn=as_owner, cwd=root, capture_output=True)

    port = free_port()
    run(str(bindir / "initdb"), "-D", str(root / "data"), "-U", "seqrec", "--auth=trust", "-E", "UTF8", "--no-sync")
    run(str(bindir / "pg_ctl"), "-D", str(root / "data"), "-l", str(root / "server.log"), "-w", "-t", "60", "-o",
        f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
    try:
        yield f"postgresql+psycopg://seqrec@127.0.0.1:{port}/postgres"
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            run(str(bindir / "pg_ctl"), "-D", str(root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_two_workers_on_postgresql_one_killed_mid_trial(ml100k_root, tmp_path, postgres_url):
    """Two worker processes run one grid study (4 points) against PostgreSQL; once one is inside a trial that has
    written a last.ckpt it gets SIGKILL. The other fails that trial once its heartbeat is stale, retries it (resuming
    its run directory from last.ckpt) and the study ends with 4 complete trials: every grid point once, the
    trial numbers without a gap, the killed trial the only failure."""
    runs = tmp_path / "runs"
    space = write_space(tmp_path / "space.yaml", {"grid": {"model.net.dropout": [0.1, 0.3], "model.lr": [0.001, 0.003]}})
    argv = ["--config", "sasrec_ml100k", "--space", str(space), "--study", "pg", "--runs_dir", str(runs),
            "--storage", postgres_url, "--heartbeat_interval", "1", "--pruner", "none",
            *tiny(ml100k_root, "--trainer.max_epochs", "15", "--trainer.min_epochs", "15")]
    logs = [open(tmp_path / f"worker{i}.log", "wb") for i in range(2)]  # noqa: SIM115 (closed below)
    workers = [subprocess.Popen(tune_command(*argv), stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path) for log in logs]
    pids = {w.pid: w for w in workers}
    trials_dir = runs / "tune" / "pg" / "trials"

    def victim():
        try:
            running = load(runs, "pg", postgres_url).get_trials(states=(optuna.trial.TrialState.RUNNING,))
        except KeyError:  # the study does not exist yet
            return None
        for t in running:
            pid = int(t.user_attrs.get("worker", ":0").rsplit(":", 1)[1])
            run = trials_dir / t.user_attrs.get("run_name", "-")
            if pid in pids and (run / "checkpoints" / "last.ckpt").is_file() and not (run / "fit_summary.json").exists():
                return t.number, pid
        return None

    try:
        killed_trial, pid = wait_for(victim, 180, "a worker inside a trial with a last.ckpt", poll=0.2)
        os.kill(pid, signal.SIGKILL)
        survivor = next(w for w in workers if w.pid != pid)
        assert pids[pid].wait(30) == -signal.SIGKILL
        assert survivor.wait(400) == 0, (tmp_path / f"worker{workers.index(survivor)}.log").read_text()[-3000:]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
        for log in logs:
            log.close()

    trials = load(runs, "pg", postgres_url).get_trials()
    states = {t.number: t.state.name for t in trials}
    assert sorted(states) == list(range(len(trials)))  # no trial number lost
    assert [n for n, s in states.items() if s != "COMPLETE"] == [killed_trial] and states[killed_trial] == "FAIL"
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    assert len(complete) == 4
    points = sorted((t.params["model.net.dropout"], t.params["model.lr"]) for t in complete)
    assert points == [(0.1, 0.001), (0.1, 0.003), (0.3, 0.001), (0.3, 0.003)]  # none run twice
    [retry] = [t for t in complete if t.system_attrs.get("failed_trial") == killed_trial]
    assert retry.params == trials[killed_trial].params
    run = trials_dir / retry.user_attrs["run_name"]
    assert run.name == f"trial_{killed_trial}" and len(list(trials_dir.iterdir())) == 4
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    sitting = header.split(",").index("sitting")
    assert {row.split(",")[sitting] for row in rows} == {"0", "1"}  # resumed from last.ckpt, not restarted
    assert json.loads((run / "fit_summary.json").read_text())["epochs"] == 15
