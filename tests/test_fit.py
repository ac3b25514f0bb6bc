"""``seqrec fit``: resume equals an uninterrupted run on every shipped validation cadence, ``--ckpt_path``
continues one named run, a failed start leaves no run directory, step-0 validation."""

import json
from pathlib import Path

import pytest

from seqrec.fit import main
from seqrec.loggers.run_logger import SittingMarker

CADENCES = {
    # as sasrec_ml100k.yaml ships: validation (and last.ckpt) every 2 epochs
    "every_2_epochs": ("--trainer.check_val_every_n_epoch", "2"),
    # as the LRURec configs: every N steps; the first sitting's last.ckpt is mid-epoch (step 15 of 16)
    "every_5_steps": ("--trainer.check_val_every_n_epoch", "null", "--trainer.val_check_interval", "5"),
}


def tiny(root: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "--config", "sasrec_ml100k.yaml",
        "--data.init_args.source.init_args.root", str(root),
        "--data.max_len", "10", "--data.batch_size", "16",
        "--model.net.d_model", "16",
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(run_dir),
        "--threads", "1",
        *extra,
    ]


@pytest.mark.parametrize("cadence", sorted(CADENCES))
def test_resume_matches_uninterrupted_run(ml100k_root, tmp_path, cadence):
    every = CADENCES[cadence]
    whole = main(tiny(ml100k_root, tmp_path / "whole", "--trainer.max_epochs", "4", *every))
    # first sitting stops after 2 epochs; the second resumes from last.ckpt and runs to 4
    main(tiny(ml100k_root, tmp_path / "split", "--trainer.max_epochs", "2", "--test", "false", *every))
    resumed = main(tiny(ml100k_root, tmp_path / "split", "--trainer.max_epochs", "4", "--ckpt_path", "last", *every))
    assert resumed == whole  # exactly: same batches in the same order, same dropout
    # one run directory: the resumed run logged into the first sitting's version, after the first sitting's rows
    run = tmp_path / "split" / "sasrec_ml100k" / "version_0"
    assert [p.name for p in run.parent.iterdir()] == ["version_0"]
    assert json.loads((run / "test_metrics.json").read_text()) == pytest.approx(resumed)
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    sitting = header.split(",").index("sitting")
    assert {row.split(",")[sitting] for row in rows} == {"0", "1"}


def test_a_resumed_sittings_summary_counts_its_own_steps_and_epochs(ml100k_root, tmp_path):
    """fit_summary.json's pace is the sitting's own: a resume restores the step inside Trainer.fit, so the start is
    taken when training starts (SittingMarker), not before fit (which said 0 and counted the earlier sittings too)."""
    main(tiny(ml100k_root, tmp_path, "--trainer.max_epochs", "1", "--test", "false"))
    run = tmp_path / "sasrec_ml100k" / "version_0"
    first = json.loads((run / "fit_summary.json").read_text())
    main(tiny(ml100k_root, tmp_path, "--trainer.max_epochs", "3", "--test", "false", "--ckpt_path", "last"))
    second = json.loads((run / "fit_summary.json").read_text())
    assert first["epochs"] == 1 and first["steps_this_sitting"] == first["global_step"] > 0
    assert second["epochs"] == 3
    assert second["steps_this_sitting"] == second["global_step"] - first["global_step"] == 2 * first["global_step"]
    assert second["seconds_per_epoch"] == pytest.approx(second["seconds_this_sitting"] / 2, abs=0.05)
    assert second["seconds_per_step"] == pytest.approx(second["seconds_this_sitting"] / second["steps_this_sitting"],
                                                       abs=0.01)


def test_ckpt_path_last_refuses_a_run_of_another_config_and_a_run_can_be_named(ml100k_root, tmp_path, capsys):
    runs = tmp_path / "runs"
    main(tiny(ml100k_root, runs, "--trainer.max_epochs", "1", "--test", "false"))  # version_0: lr 0.001
    main(tiny(ml100k_root, runs, "--trainer.max_epochs", "1", "--test", "false", "--model.init_args.lr", "0.01"))
    base = runs / "sasrec_ml100k"
    saved = {v: (base / v / "config.yaml").read_text() for v in ("version_0", "version_1")}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # the newest run (version_1) ran with lr 0.01
        main(tiny(ml100k_root, runs, "--trainer.max_epochs", "2", "--ckpt_path", "last"))
    [line] = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error: ")]
    assert exit_info.value.code == 2
    assert "model.lr: 0.01 in the run, 0.001 now" in line
    assert "version_1 (differs in model.lr); version_0 (same config)" in line and f"--ckpt_path {base}/version_N" in line
    assert {v: (base / v / "config.yaml").read_text() for v in saved} == saved  # no config rewritten
    # a run named by its directory continues there
    main(tiny(ml100k_root, runs, "--trainer.max_epochs", "2", "--test", "false", "--ckpt_path", str(base / "version_0")))
    assert sorted(p.name for p in base.iterdir()) == ["version_0", "version_1"]
    assert json.loads((base / "version_0" / "fit_summary.json").read_text())["epochs"] == 2
    # and a run of another config continues under its own config
    main(["--config", str(base / "version_1" / "config.yaml"), "--trainer.max_epochs", "2", "--test", "false",
          "--ckpt_path", str(base / "version_1")])
    assert json.loads((base / "version_1" / "fit_summary.json").read_text())["epochs"] == 2
    assert (base / "version_1" / "config.yaml").read_text() == saved["version_1"].replace("max_epochs: 1", "max_epochs: 2")


def test_a_run_that_fails_at_start_leaves_no_run_directory(ml100k_root, tmp_path, monkeypatch, capsys):
    def fail(self, trainer, pl_module):
        raise RuntimeError("injected failure at the start of training")

    monkeypatch.setattr(SittingMarker, "on_train_start", fail)
    with pytest.raises(SystemExit) as exit_info:
        main(tiny(ml100k_root, tmp_path, "--trainer.max_epochs", "1"))
    assert exit_info.value.code == 1
    assert "error: RuntimeError: injected failure at the start of training" in capsys.readouterr().err
    assert list((tmp_path / "sasrec_ml100k").iterdir()) == []  # config.yaml had been written; the folder is gone


def test_validate_first_logs_step_zero(ml100k_root, tmp_path):
    main(tiny(ml100k_root, tmp_path, "--trainer.max_epochs", "1", "--validate_first", "true", "--test", "false"))
    lines = next(tmp_path.rglob("metrics.csv")).read_text().splitlines()
    header = lines[0].split(",")
    first = dict(zip(header, lines[1].split(",")))
    assert first["step"] == "0" and first["val/ndcg@10"]


def test_config_yaml_lists_every_callback_that_ran(ml100k_root, tmp_path):
    main(tiny(ml100k_root, tmp_path, "--trainer.max_epochs", "1", "--test", "false", "--sitting_time", "00:01:00:00"))
    text = next(tmp_path.rglob("config.yaml")).read_text()
    header = [line for line in text.splitlines() if line.startswith("#   ")]
    ran = [line.split()[1].rsplit(".", 1)[-1] for line in header]
    for name in ("ModelCheckpoint", "EarlyStopping", "MACsCallback", "MemoryCallback", "ThroughputCallback",
                 "RNGStateCheckpoint", "SignalCheckpoint", "SittingMarker", "SaveRunConfig"):
        assert name in ran, (name, ran)
    assert ran.index("EarlyStopping") < ran.index("RNGStateCheckpoint")
    assert "(monitor val/ndcg@10, mode max, patience 5)" in text
