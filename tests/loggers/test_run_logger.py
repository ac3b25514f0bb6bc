"""The run logger: wandb offline without an account (no prompt, no network), a complete run directory, bad names."""

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from seqrec.fit import main
from seqrec.loggers.run_logger import (
    RunLogger,
    check_logger_names,
    previous_wandb_id,
    resolve_wandb_mode,
    wandb_credentials,
)

WANDB_CLI = Path(sys.executable).parent / "wandb"


@pytest.fixture
def no_account(tmp_path, monkeypatch):
    """No wandb credentials anywhere and no WANDB_MODE: what a fresh machine has."""
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("NETRC", str(home / ".netrc"))
    return home


def test_mode_is_offline_without_an_account_and_online_with_one(no_account, monkeypatch):
    assert not wandb_credentials()
    assert resolve_wandb_mode("auto") == "offline"
    (no_account / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password " + "0" * 40 + "\n")
    (no_account / ".netrc").chmod(0o600)
    assert resolve_wandb_mode("auto") == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")  # the user's explicit choice wins
    assert resolve_wandb_mode("auto") == "offline"
    assert resolve_wandb_mode("disabled") == "disabled"
    with pytest.raises(ValueError, match="auto"):
        resolve_wandb_mode("cloud")


def test_logger_names_are_checked():
    assert check_logger_names(None) == ["csv", "wandb"]
    with pytest.raises(ValueError, match=r"unknown logger name\(s\) \['tensorboard'\]: valid names are \['csv', 'wandb'\]"):
        RunLogger(loggers=["csv", "tensorboard"])
    with pytest.raises(ValueError, match="leaves out 'csv'"):
        RunLogger(loggers=["wandb"])


@pytest.fixture
def fit_args(tiny_fit) -> Callable[..., list[str]]:
    """``tiny_fit`` (tests/conftest.py): two epochs that log every step, the config named by its path."""

    def args(run_dir: Path, *extra: str) -> list[str]:
        return tiny_fit(run_dir, "--trainer.log_every_n_steps", "1", *extra, config="configs/sasrec_ml100k.yaml",
                        max_len=12, batch_size=32, d_model=8, max_epochs=2)

    return args


def test_run_without_a_wandb_account_leaves_a_complete_run_directory(fit_args, tmp_path, no_account):
    results = main(fit_args(tmp_path / "runs"))
    [run] = (tmp_path / "runs" / "sasrec_ml100k").glob("version_*")
    # the CSV record, the report and the offline wandb run all live in the run directory
    for name in ("metrics.csv", "config.yaml", "test_metrics.json", "summary.md", "learning_curve.png", "metrics_at_k.csv"):
        assert (run / name).is_file(), name
    assert (run / "learning_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert {"cost/macs_per_sequence", "cost/macs_per_train_sample", "cost/state_bytes_per_user", "test/ndcg@10"} <= set(results)
    assert json.loads((run / "test_metrics.json").read_text()) == pytest.approx(results)
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"cost/macs_per_scored_sequence", "cost/peak_rss_mib", "train/samples_per_s", "train/tokens_per_s",
            "val/users_per_s", "test/users_per_s"} <= set(header)
    [offline] = (run / "wandb").glob("offline-run-*")
    assert list(offline.glob("run-*.wandb")) and (offline / "files" / "summary.md").is_file()
    summary = (run / "summary.md").read_text()
    assert f"wandb sync {offline}" in summary and "| 10 |" in summary and "cost/macs_per_sequence" in summary
    assert not (no_account / ".netrc").exists()  # nothing logged in, nothing prompted
    if WANDB_CLI.is_file():  # `wandb sync` accepts the folder (dry run: nothing leaves the machine)
        out = subprocess.run([str(WANDB_CLI), "sync", "--dry-run", str(offline)], capture_output=True, text=True,
                             timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(no_account), "WANDB_MODE": "offline"})
        assert "Would sync 1 run" in out.stdout + out.stderr, out.stdout + out.stderr


def test_csv_only_run_has_no_wandb_folder(fit_args, tmp_path, no_account):
    main(fit_args(tmp_path / "runs", "--trainer.logger.init_args.loggers", "[csv]", "--test", "false",
                  "--trainer.max_epochs", "1"))
    [run] = (tmp_path / "runs" / "sasrec_ml100k").glob("version_*")
    assert (run / "metrics.csv").is_file() and not (run / "wandb").exists()
    assert (run / "summary.md").is_file()


def one_line_error(capsys, args: list[str]) -> str:
    """Run fit expecting a bad-input failure: exit status 2 and exactly one line on stderr."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(err) == 1, err
    return err[0]


def test_unknown_logger_name_fails_with_the_valid_names(fit_args, tmp_path, capsys):
    err = one_line_error(capsys, fit_args(tmp_path, "--trainer.logger.init_args.loggers", "[csv, tensorboard]"))
    assert "valid names are ['csv', 'wandb']" in err
    assert not (tmp_path / "sasrec_ml100k").exists()  # rejected before a run directory exists


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="checks the message on a machine without CUDA")
def test_deepspeed_without_cuda_fails_at_start_and_says_what_to_use(fit_args, tmp_path, capsys):
    err = one_line_error(capsys, fit_args(tmp_path, "--config", "configs/trainer/deepspeed_stage2.yaml"))
    assert "needs CUDA GPUs" in err and "configs/trainer/ddp.yaml --trainer.accelerator cpu" in err
    assert "needs CUDA GPUs" in one_line_error(capsys, fit_args(tmp_path, "--config", "trainer/deepspeed_stage3.yaml"))


def test_a_resumed_version_appends_to_metrics_csv_and_tags_its_sitting(tmp_path):
    first = RunLogger(save_dir=str(tmp_path), name="exp", loggers=["csv"])
    first.log_metrics({"train/loss": 2.0}, step=0)
    first.log_metrics({"train/loss": 1.5}, step=1)
    path = Path(first.log_dir) / "metrics.csv"
    with open(path, "a") as handle:
        handle.write("1.25,2")  # a row cut short by a kill -9
    second = RunLogger(save_dir=str(tmp_path), name="exp", version=first.version, loggers=["csv"])
    second.mark_sitting(1)
    second.log_metrics({"train/loss": 1.4, "val/ndcg@10": 0.3}, step=2)  # a new column: the file is rewritten
    header, *rows = path.read_text().splitlines()
    assert header.split(",") == ["sitting", "step", "train/loss", "val/ndcg@10"]
    assert rows == ["0,0,2.0,", "0,1,1.5,", "1.25,2,,", "1,1,,", "1,2,1.4,0.3"]  # nothing lost, nothing truncated
    assert [p.name for p in Path(first.log_dir).iterdir() if p.name.startswith(".")] == []


def test_two_loggers_started_together_claim_two_versions(tmp_path):
    a, b = (RunLogger(save_dir=str(tmp_path), name="exp", loggers=["csv"]) for _ in range(2))
    assert (a.version, b.version) == (0, 1)
    assert sorted(p.name for p in (tmp_path / "exp").iterdir()) == ["version_0", "version_1"]


def test_a_resumed_version_continues_its_wandb_run(tmp_path, no_account, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    ids = []
    for _ in range(2):
        logger = RunLogger(save_dir=str(tmp_path), name="exp", version="version_0", loggers=["csv", "wandb"])
        logger.log_metrics({"train/loss": 1.0}, step=len(ids))
        ids.append(logger.wandb.experiment.id)
        logger.close()
    assert ids[0] == ids[1]
    assert previous_wandb_id(tmp_path / "exp" / "version_0") == ids[0]
