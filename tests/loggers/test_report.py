"""The run report (and the summarize command that rebuilds it): a run directory (as the CSV logger and the CLI write it) -> PNG plot, per-k table, markdown."""

import csv
import json

import pytest

from seqrec.loggers.report import (
    current_rows,
    find_run_dir,
    learning_curve,
    metrics_at_k,
    read_metrics,
    write_report,
)
from seqrec.tools.summarize import main


def make_run(root, version=0, epochs=4):
    run = root / "sasrec_ml100k" / f"version_{version}"
    run.mkdir(parents=True)
    columns = ["epoch", "step", "train/loss", "val/ndcg@10", "val/hr@10", "cost/macs_per_sequence"]
    rows = [{"epoch": 0, "step": 0, "cost/macs_per_sequence": 123456.0}]
    for epoch in range(epochs):
        rows.append({"epoch": epoch, "step": 10 * epoch + 5, "train/loss": 5.0 - epoch})
        rows.append({"epoch": epoch, "step": 10 * epoch + 9, "val/ndcg@10": 0.1 * (epoch + 1), "val/hr@10": 0.2 * (epoch + 1)})
    with open(run / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns)
        writer.writeheader()
        writer.writerows(rows)
    (run / "test_metrics.json").write_text(json.dumps({
        "test/hr@10": 0.5, "test/ndcg@10": 0.25, "test/hr@20": 0.75, "test/ndcg@20": 0.3, "test/map@20": 0.2,
        "cost/macs_per_sequence": 123456.0, "cost/state_bytes_per_user": 5120.0, "test/users_per_s": 1000.0,
    }))
    (run / "config.yaml").write_text(
        "model:\n  class_path: seqrec.tasks.next_item.NextItemTask\n  init_args:\n    lr: 0.001\n"
        "    model:\n      class_path: seqrec.models.next_item.sasrec.SASRec\n      init_args:\n        d_model: 64\n"
        "trainer:\n  max_epochs: 4\n  devices: 2\n"
    )
    return run


def test_per_k_table_and_learning_curve(tmp_path):
    run = make_run(tmp_path)
    columns, rows = metrics_at_k(json.loads((run / "test_metrics.json").read_text()))
    assert columns == ["k", "hr", "ndcg", "map"]
    assert rows == [[10, 0.5, 0.25, None], [20, 0.75, 0.3, 0.2]]
    loss, validation = learning_curve(read_metrics(run))
    assert loss == {5: 5.0, 15: 4.0, 25: 3.0, 35: 2.0}
    assert validation["val/ndcg@10"] == pytest.approx({0: 0.1, 1: 0.2, 2: 0.3, 3: 0.4})


def test_report_files(tmp_path):
    run = make_run(tmp_path)
    written = write_report(run)
    assert written["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and written["plot"].stat().st_size > 5000
    with open(written["table"]) as handle:
        assert list(csv.reader(handle)) == [["k", "hr", "ndcg", "map"], ["10", "0.5", "0.25", ""], ["20", "0.75", "0.3", "0.2"]]
    summary = written["summary"].read_text()
    assert "| 10 | 0.50000 | 0.25000 |  |" in summary
    assert "`cost/macs_per_sequence` | 123,456 (123.5K)" in summary
    assert "best `val/ndcg@10` = 0.40000 at epoch 3" in summary
    assert "`SASRec` (d_model=64)" in summary and "devices=2" in summary
    assert "![learning curve](learning_curve.png)" in summary
    assert oct(written["summary"].stat().st_mode)[-3:] == "644"


def test_cli_picks_the_newest_version_and_rejects_other_folders(tmp_path, capsys):
    make_run(tmp_path, 0)
    newest = make_run(tmp_path, 1)
    assert find_run_dir(tmp_path / "sasrec_ml100k") == newest
    assert main([str(tmp_path / "sasrec_ml100k")]) == 0
    assert f"summary: {newest / 'summary.md'}" in capsys.readouterr().out
    out = tmp_path / "elsewhere"
    assert main([str(newest), "--out", str(out)]) == 0 and (out / "learning_curve.png").is_file()
    assert main([str(tmp_path / "missing")]) == 1
    assert "not a run directory" in capsys.readouterr().err


def test_the_history_takes_a_later_sitting_over_what_a_crashed_one_logged_after_its_checkpoint():
    rows = [
        {"sitting": 0, "step": 10, "train/loss": 1.0},
        {"sitting": 0, "step": 20, "val/ndcg@10": 0.2, "epoch": 1},  # the checkpoint the next sitting resumed from
        {"sitting": 0, "step": 30, "train/loss": 0.9},  # lost with the crash: done again below
        {"sitting": 0, "step": 40, "val/ndcg@10": 0.5, "epoch": 3},  # never happened in the run that continued
        {"sitting": 1, "step": 20},
        {"sitting": 1, "step": 30, "train/loss": 0.8},
    ]
    kept = current_rows(rows)
    assert kept == [rows[0], rows[1], rows[4], rows[5]]
    loss, validation = learning_curve(kept)
    assert loss == {10: 1.0, 30: 0.8} and validation == {"val/ndcg@10": {1: 0.2}}
