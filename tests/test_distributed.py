"""Multi-process evaluation is exact: shards without counted duplicates, sums and counts, identical negatives.

The end-to-end test runs the issue's command (2 CPU processes, gloo) on a fixture whose number of test
users is odd, then evaluates the checkpoint it selected in one process: the test metrics agree to 1e-6.
(Two trainings, one per process count, would not: each process draws its own batches, so the models
differ; what must not differ is the evaluation of a given model.)
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from seqrec.build import build, parse
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.datamodules.loaders import FlaggedPadding, eval_shards
from seqrec.datamodules.next_item import NextItemDataModule
from seqrec.fit import main
from seqrec.metrics.query_ranks import read_ranks_csv
from seqrec.models.next_item.sasrec import SASRec
from seqrec.tasks.next_item import NextItemTask
from tests.conftest import tiny_fit_args, write_ml100k

REPO = Path(__file__).resolve().parents[1]


class FakeTrainer:
    def __init__(self, world_size: int, global_rank: int) -> None:
        self.world_size, self.global_rank = world_size, global_rank


def test_eval_shards_cover_every_query_once_with_equal_lengths():
    dataset = [{"index": torch.tensor(i)} for i in range(7)]
    assert eval_shards(dataset, None) == (dataset, None)
    assert eval_shards(dataset, FakeTrainer(1, 0)) == (dataset, None)
    seen, lengths = [], []
    for rank in range(3):
        padded, sampler = eval_shards(dataset, FakeTrainer(3, rank))
        indices = list(sampler)
        lengths.append(len(indices))
        items = [padded[i] for i in indices]
        seen += [int(item["index"]) for item in items if item["valid"]]
    assert lengths == [3, 3, 3]  # equal work per rank (ZeRO-3 gathers parameters in every forward)
    assert sorted(seen) == list(range(7))  # every query exactly once among the valid rows
    assert len(FlaggedPadding(dataset, 2)) == 8 and not FlaggedPadding(dataset, 2)[7]["valid"]


def test_task_drops_padding_rows_from_the_metric_sums():
    task = NextItemTask(SASRec(num_items=9, max_len=4, d_model=8), metrics=["hr@10"])
    batch = {"items": torch.tensor([[0, 1, 2, 3], [0, 1, 2, 3], [0, 0, 4, 5]]), "target": torch.tensor([4, 4, 6]),
             "valid": torch.tensor([True, False, True])}
    task.test_step(batch, 0)
    assert int(task.test_metrics.count) == 2


def test_frozen_negatives_are_identical_on_every_rank(tmp_path):
    """Each rank builds (or reads) the frozen candidates itself: same seed, same arrays, whatever the cache."""
    root = write_ml100k(tmp_path / "ml", num_users=31)
    arrays = []
    for rank in range(2):
        data = NextItemDataModule(MovieLens100K(root=str(root)), max_len=8, eval_negatives=10,
                                  cache_dir=str(tmp_path / f"cache_rank{rank}"))
        data.setup("fit")
        arrays.append(data.datasets["test"].negatives)
    assert np.array_equal(arrays[0], arrays[1])


def ddp_args(root: Path, runs: Path, *extra: str, d_model: int | None = None) -> list[str]:
    """Two CPU processes under ``configs/trainer/ddp.yaml``: the tiny fit's flags (tests/conftest.py), 3 epochs,
    evaluation in batches of 8, CSV logging only."""
    return tiny_fit_args(root, runs, "--config", "configs/trainer/ddp.yaml", "--trainer.devices", "2",
                         "--trainer.accelerator", "cpu", "--data.init_args.eval_batch_size", "8",
                         "--trainer.logger.init_args.loggers", "[csv]", *extra, config="configs/sasrec_ml100k.yaml",
                         max_len=16, batch_size=32, d_model=d_model, max_epochs=3)


def test_popularity_refuses_several_processes(tmp_path, capsys):
    root = write_ml100k(tmp_path / "ml", num_users=11)
    args = ddp_args(root, tmp_path / "runs", "--model.net", "seqrec.models.next_item.popularity.Popularity")
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    assert re.search(r"^error: .*no trainable parameters.*one process", capsys.readouterr().err, re.M)


def evaluate_in_one_process(run_dir: Path, checkpoint: str, out: Path) -> tuple[dict[str, float], np.ndarray]:
    """Test ``checkpoint`` with the run's own config.yaml, in this process (no strategy, one device): the metrics
    and the (Q, 2) per-query ranks."""
    run = build(["--config", str(run_dir / "config.yaml"), "--trainer.strategy", "auto", "--trainer.devices", "1",
                 "--trainer.logger", "false", "--trainer.default_root_dir", str(out), "--threads", "1"])
    [result] = run.trainer.test(run.task, datamodule=run.datamodule, ckpt_path=checkpoint, verbose=False)
    return result, run.task.last_test_ranks.numpy()


@pytest.mark.slow  # a 2-process DDP fit in a subprocess
def test_two_cpu_processes_report_the_single_process_test_metrics(tmp_path):
    root = write_ml100k(tmp_path / "ml", num_users=61)
    data = NextItemDataModule(MovieLens100K(root=str(root)), max_len=16)
    data.setup("test")
    users = len(data.datasets["test"])
    assert users % 2 == 1, "the fixture must not split evenly over 2 processes"
    runs = tmp_path / "runs"
    command = [sys.executable, "-m", "seqrec.fit", *ddp_args(root, runs, d_model=16)]
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    [run] = (runs / "sasrec_ml100k").glob("version_*")
    two = json.loads((run / "test_metrics.json").read_text())
    best = json.loads((run / "fit_summary.json").read_text())["best_checkpoint"]
    one, ranks = evaluate_in_one_process(run, best, tmp_path / "single")
    # each query's rank, gathered from both processes, equals the single process's, query by query
    assert np.array_equal(read_ranks_csv(run / "test_ranks.csv"), ranks) and len(ranks) == users
    ranking = [k for k in two if k.startswith("test/") and "@" in k]
    assert len(ranking) == 6
    for key in ranking:
        assert one[key] == pytest.approx(two[key], abs=1e-6), key
    # the same number of users was evaluated (no padded duplicate counted, none lost)
    assert one["cost/state_mib_all_users"] == pytest.approx(two["cost/state_mib_all_users"])
    per_user = two["cost/state_bytes_per_user"]
    assert two["cost/state_mib_all_users"] == pytest.approx(per_user * users / 2**20)


@pytest.mark.parametrize("name", ["ddp.yaml", "deepspeed_stage2.yaml", "deepspeed_stage3.yaml"])
def test_trainer_configs_stack_onto_an_experiment(name):
    config = parse(["--config", "sasrec_ml100k.yaml", "--config", f"trainer/{name}"])
    strategy = config.trainer.strategy
    assert strategy.class_path.endswith("DDPStrategy" if name == "ddp.yaml" else "DeepSpeedStrategy")
    if name == "deepspeed_stage3.yaml":
        zero = strategy.init_args.config["zero_optimization"]
        assert zero["stage"] == 3 and zero["stage3_param_persistence_threshold"] >= 1_000_000
    assert config.model.class_path.endswith("NextItemTask")  # the experiment is untouched
