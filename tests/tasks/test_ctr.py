"""CTR task: the real CLI with the shipped CTR configs, learning on a fixture, wrappers as models, padding trim."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import lightning as L
import pytest
import torch

from seqrec.compress import SnapKV
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.datamodules.ctr import CTRDataModule
from seqrec.fit import main
from seqrec.models.ctr.transformer import CTRTransformer
from seqrec.tasks.ctr import CTRTask, trim_padding


def cli_args(config: str, root: Path, run_dir: Path) -> list[str]:
    return [
        "--config", config,
        "--data.init_args.source", "seqrec.data.sources.movielens.MovieLens100K",
        "--data.init_args.source.init_args.root", str(root),
        "--data.init_args.max_len", "12",
        "--data.init_args.batch_size", "16",
        "--trainer.max_epochs", "2",
        "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(run_dir),
        *(["--model.net.backbone.init_args.d_model", "16"] if "snapkv" in config
          else ["--model.net.d_model", "16"]),
        "--threads", "1",
    ]


@pytest.mark.parametrize("config", ["ctr_transformer_ml1m.yaml", "ctr_lru_ml1m.yaml", "ctr_transformer_snapkv_ml1m.yaml"])
def test_cli_fits_and_tests(config, ml100k_root, tmp_path):
    results = main(cli_args(config, ml100k_root, tmp_path))
    assert {"test/auc", "test/gauc", "test/logloss", "cost/macs_per_request"} <= set(results)
    assert 0.0 <= results["test/gauc"] <= 1.0 and results["test/logloss"] > 0
    written = json.loads(next(tmp_path.rglob("test_metrics.json")).read_text())
    assert written == pytest.approx(results)


def fixture_data(root: Path) -> CTRDataModule:
    data = CTRDataModule(MovieLens100K(root=str(root)), max_len=20, train_mode="windows", batch_size=16, eval_negatives=4)
    data.prepare_data()
    return data


def trainer(epochs: int) -> L.Trainer:
    return L.Trainer(max_epochs=epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, check_val_every_n_epoch=epochs)


def test_transformer_learns_the_fixture(ml100k_root):
    logging.getLogger("lightning").setLevel(logging.WARNING)
    L.seed_everything(0)
    data = fixture_data(ml100k_root)
    task = CTRTask(CTRTransformer(data.num_items, max_len=20, d_model=16, num_heads=2), lr=0.003)
    run = trainer(20)
    run.fit(task, datamodule=data)
    [result] = run.test(task, datamodule=data, verbose=False)
    # users mostly step to the next item id, negatives are random: the target is predictable from the history
    assert result["test/gauc"] > 0.65 and result["test/auc"] > 0.6


def test_compression_wrapper_runs_as_the_tasks_model(ml100k_root):
    data = fixture_data(ml100k_root)
    backbone = CTRTransformer(data.num_items, max_len=20, d_model=16, num_heads=2)
    full, compressed = CTRTask(backbone), CTRTask(SnapKV(backbone, ratio=0.25))
    [a] = trainer(1).test(full, datamodule=data, verbose=False)
    [b] = trainer(1).test(compressed, datamodule=data, verbose=False)
    assert b["cost/macs_per_request"] < a["cost/macs_per_request"]
    assert 0.0 <= b["test/gauc"] <= 1.0


def test_trim_padding_is_exact():
    torch.manual_seed(0)
    model = CTRTransformer(30, max_len=10, d_model=16, num_heads=2).eval()
    history = torch.zeros(3, 10, dtype=torch.long)
    history[0, 6:] = torch.tensor([1, 2, 3, 4])
    history[1, 8:] = torch.tensor([5, 6])
    history[2, 9:] = torch.tensor([7])
    batch = {"history": history, "targets": torch.tensor([[8], [9], [10]])}
    trimmed = trim_padding(batch)
    assert trimmed["history"].shape == (3, 4)
    with torch.no_grad():
        torch.testing.assert_close(model(trimmed["history"], trimmed["targets"]), model(history, batch["targets"]))
    windows = {"items": history, "targets": torch.ones(3, 10, 2, dtype=torch.long),
               "labels": torch.zeros(3, 10, 2), "target_mask": history > 0}
    assert trim_padding(windows)["targets"].shape == (3, 4, 2)


def test_vocabulary_mismatch_is_a_clear_error():
    task = CTRTask(CTRTransformer(5, max_len=4, d_model=8, num_heads=2))
    batch = {"history": torch.tensor([[0, 1, 2, 9]]), "targets": torch.tensor([[3, 4]]), "labels": torch.tensor([[1.0, 0.0]])}
    with pytest.raises(ValueError, match="vocabulary is 0..5"):
        task.training_step(batch, 0)
