"""benchmarks.evornn: the rows' schedules and MACs, the paired column by hand, each row's fit."""

import numpy as np
import pytest

from benchmarks import evornn
from benchmarks.fit_grid import outcome
from seqrec.metrics.query_ranks import write_ranks_csv
from seqrec.models.next_item.evornn import EvoRNN


def rows():
    return {row.name: row for row in evornn.ROWS}


def build(row):
    return EvoRNN(1682, **{"max_len": 50, "d_model": 64, **row.net_kwargs()})


def test_rows_build_and_cost_what_the_formula_says():
    """serving MACs = Σ_τ 3h(τ)(d + h(τ)) + Σ h_k·h_{k+1} + h_K·d (0 when h_K = d), with d = 64."""
    table = rows()
    assert build(table["gru64"]).serving_macs(50) == 50 * 3 * 64 * 128
    assert build(table["gru16"]).serving_macs(50) == 50 * 3 * 16 * 80 + 16 * 64
    assert build(table["gru64_L10"]).serving_macs(10) == 10 * 3 * 64 * 128
    seg_a = 30 * 3 * 16 * 80 + 15 * 3 * 32 * 96 + 5 * 3 * 64 * 128 + 16 * 32 + 32 * 64
    assert build(table["evo_segA"]).serving_macs(50) == seg_a
    net = build(table["evo_segA"])
    assert evornn.describe_schedule(net, 50) == "h=16 for τ 21..50; h=32 for τ 6..20; h=64 for τ 1..5"
    for row in evornn.ROWS:  # every schedule is valid and no cheaper row is mislabelled as the reference
        assert build(row).serving_macs() <= build(table[evornn.REFERENCE]).serving_macs()
    assert len({row.name for row in evornn.ROWS}) == len(evornn.ROWS)


def test_paired_column_by_hand(tmp_path):
    """d_q = mean over seeds of AP@20(row) − AP@20(reference); s.e. = std(d, ddof=1)/√Q."""
    ranks = {("gru64", 1): [1, 4, 30], ("gru64", 2): [2, 2, 5], ("gru16", 1): [2, 4, 1], ("gru16", 2): [2, 1, 40]}
    results = {}
    for (row, seed), values in ranks.items():
        run = tmp_path / f"{row}_{seed}"
        run.mkdir()
        (run / "config.yaml").write_text("{}\n")  # a run directory holds its config
        write_ranks_csv(run / "test_ranks.csv", np.array([[q, r] for q, r in enumerate(values)]))
        results[row, seed] = evornn.Result(row, seed, str(run), 0.0, 0.0, 0.0, 50, 1, "")
    ap = lambda r: np.where(np.array(r) <= 20, 1.0 / np.array(r), 0.0)  # noqa: E731
    d = ((ap(ranks["gru16", 1]) - ap(ranks["gru64", 1])) + (ap(ranks["gru16", 2]) - ap(ranks["gru64", 2]))) / 2
    mean, se = evornn.paired_to_reference(results, "gru16", [1, 2])
    assert mean == pytest.approx(d.mean()) and se == pytest.approx(d.std(ddof=1) / np.sqrt(3))


def test_a_rows_fit_sets_its_flags_and_seed():
    row = rows()["evo_pl05"]
    fit = row.fit(7, 3)
    assert fit.name == "evo_pl05_s7" and fit.config == "evornn_ml100k.yaml"
    flags = dict(zip(fit.flags[::2], fit.flags[1::2], strict=True))
    assert flags["--seed_everything"] == "7" and flags["--trainer.max_epochs"] == "3" and flags["--threads"] == "1"
    assert row.net_kwargs() == {"schedule": "power_law", "hidden_sizes": [64], "lrd_d": 0.05, "min_hidden": 16}
    assert rows()["gru64_L10"].net_kwargs()["max_len"] == 10
    assert "--trainer.max_epochs" not in row.fit(7, 0).flags  # 0: the protocol's budget (early stopping)
    assert evornn.budget(0) == "early stopping" and evornn.budget(3) == "3 epochs"


def test_a_runs_window_comes_from_the_data_as_the_config_links_it(tmp_path):
    """config.yaml holds the window once, under data (the net's max_len is linked to it): a run with
    --data.init_args.max_len 10 costs 10 steps of the GRU, not the net default's 50."""
    import json

    import yaml

    run = tmp_path / "gru64_L10_s42" / "version_0"
    run.mkdir(parents=True)
    config = {"model": {"init_args": {"net": {"init_args": {"d_model": 64, "schedule": "segments",
                                                            "hidden_sizes": [64], "segment_lengths": []}}}},
              "data": {"init_args": {"max_len": 10}}}
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    (run / "fit_summary.json").write_text(json.dumps({"best_score": 0.05, "global_step": 9, "epochs": 3,
                                                      "seconds_this_sitting": 1.0, "status": "max_epochs"}))
    (run / "test_metrics.json").write_text(json.dumps({"test/map@20": 0.04}))
    result = evornn.read_result(rows()["gru64_L10"], 42, run, outcome(run))
    assert result.max_len == 10 and result.macs == 10 * 3 * 64 * 128
    assert result.schedule == "h=64 for τ 1..10" and result.test == 0.04 and result.val == 0.05
