"""``seqrec fit``: resume equals an uninterrupted run, step-0 validation."""

import json
from pathlib import Path

import pytest

from seqrec.fit import main


def tiny(root: Path, run_dir: Path, *extra: str) -> list[str]:
    return [
        "--config", "sasrec_ml100k.yaml",
        "--data.init_args.source.init_args.root", str(root),
        "--data.max_len", "10", "--data.batch_size", "16",
        "--model.init_args.model.init_args.d_model", "16",
        "--trainer.check_val_every_n_epoch", "1",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(run_dir),
        "--threads", "1",
        *extra,
    ]


def test_resume_matches_uninterrupted_run(ml100k_root, tmp_path):
    whole = main(tiny(ml100k_root, tmp_path / "whole", "--trainer.max_epochs", "4"))
    # first sitting stops after 2 epochs; the second resumes from last.ckpt and runs to 4
    main(tiny(ml100k_root, tmp_path / "split", "--trainer.max_epochs", "2", "--test", "false"))
    resumed = main(tiny(ml100k_root, tmp_path / "split", "--trainer.max_epochs", "4", "--ckpt_path", "last"))
    assert resumed == pytest.approx(whole, abs=1e-6)
    # one run directory: the resumed run logged into the first sitting's version
    assert [p.name for p in (tmp_path / "split" / "sasrec_ml100k").iterdir()] == ["version_0"]
    written = json.loads((tmp_path / "split" / "sasrec_ml100k" / "version_0" / "test_metrics.json").read_text())
    assert written == pytest.approx(resumed)


def test_validate_first_logs_step_zero(ml100k_root, tmp_path):
    main(tiny(ml100k_root, tmp_path, "--trainer.max_epochs", "1", "--validate_first", "true", "--test", "false"))
    lines = next(tmp_path.rglob("metrics.csv")).read_text().splitlines()
    header = lines[0].split(",")
    first = dict(zip(header, lines[1].split(",")))
    assert first["step"] == "0" and first["val/ndcg@10"]
