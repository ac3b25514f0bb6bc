import json

import pytest

from seqrec.bench import repro
from seqrec.bench.repro_compare import (
    best_step,
    relative_differences,
    seed_groups,
    seed_label,
    seed_of,
    seed_spread,
    selection,
    setting_of,
    signed_percent,
    validation_curve,
    verdict,
)


def test_a_difference_too_small_to_show_reads_plus_zero_in_every_table():
    assert signed_percent(-0.0004) == "+0.0%" and signed_percent(0.0123) == "+1.2%"
    assert signed_percent(-0.0351) == "-3.5%"
    cells = {"lru_video": [{"metrics": {"recall@10": 0.1133, "ndcg@10": 0.062, "recall@20": 0.1670,
                                       "ndcg@20": 0.0755}, "status": "early_stopping", "hardware": "cpu"}]}
    assert "-0.0%" not in repro.report(cells)


PAPER = {"recall@10": 0.30, "ndcg@10": 0.20, "recall@20": 0.40, "ndcg@20": 0.25}
METRICS_CSV = """epoch,sitting,step,train/loss_step,val/recall@10,val/ndcg@10
0,0,0,,0.01,0.005
0,0,50,7.5,,
1,0,100,,0.20,0.10
2,0,200,,0.25,0.12
,1,150,,,
1,1,200,,0.26,0.13
3,1,300,,0.24,0.11
"""


def scaled(factors: dict[str, float]) -> dict[str, float]:
    return {name: value * factors.get(name, 1.0) for name, value in PAPER.items()}


def test_verdict_within_above_and_below_with_or_without_a_recorded_cause():
    assert verdict({"metrics": scaled({"recall@10": 1.02, "ndcg@20": 0.971})}, PAPER) == (
        "within 3% on all 4 metrics (-2.9% to +2.0%)")
    assert verdict({"metrics": scaled({"ndcg@10": 1.065, "recall@10": 0.973})}, PAPER) == (
        "above the paper: ndcg@10 +6.5%; recall@10 -2.7%, recall@20 +0.0%, ndcg@20 +0.0%")
    below = {"metrics": scaled({"ndcg@20": 0.965, "recall@20": 0.968})}
    assert verdict(below, PAPER) == ("below the paper by more than 3% on recall@20 -3.2%, ndcg@20 -3.5%; "
                                      "cause: not measured yet")
    assert verdict({**below, "cause": "dropout 0.2 is off the paper's grid optimum"}, PAPER).endswith(
        "cause: dropout 0.2 is off the paper's grid optimum")
    assert verdict({"metrics": {}}, PAPER) == "no test metrics to compare"
    assert relative_differences({"recall@10": 0.33}, PAPER) == pytest.approx({"recall@10": 0.1})


def test_the_curve_is_read_per_step_with_a_resumed_sittings_rows_replacing_the_lost_ones(tmp_path):
    (tmp_path / "metrics.csv").write_text(METRICS_CSV)
    curve = validation_curve(tmp_path)
    # the second sitting resumed from step 150: its step-200 value replaces the first sitting's
    assert curve == [[0, 0.01], [100, 0.20], [200, 0.26], [300, 0.24]]
    assert best_step(curve, "runs/x/checkpoints/best-epoch=2-step=201.ckpt", 0.26) == 201  # the checkpoint's step
    assert best_step(curve, None, 0.26) == 200
    assert best_step(curve, None, None) == 200  # no recorded score: the curve's maximum
    assert best_step([[0, 0.9], [100, 0.2]], None, None) == 100  # step 0 is never a checkpoint
    assert validation_curve(tmp_path / "missing") == [] and best_step([], None, 0.1) is None


def test_run_entry_keeps_the_curve_best_step_and_seed(tmp_path):
    run = tmp_path / "runs" / "lru_ml1m" / "version_0"
    run.mkdir(parents=True)
    (run / "metrics.csv").write_text(METRICS_CSV)
    (run / "config.yaml").write_text("seed_everything: 7\nmodel: {}\n")
    (run / "test_metrics.json").write_text(json.dumps({"test/recall@10": 0.3}))
    (run / "fit_summary.json").write_text(json.dumps({"status": "early_stopping", "best_score": 0.26,
                                                       "best_checkpoint": str(run / "checkpoints" / "best-epoch=1-step=200.ckpt")}))
    entry = repro.run_entry(run, "CPU: test", "cmd")
    assert entry["val_curve"][-1] == [300, 0.24] and entry["best_step"] == 200 and entry["seed"] == 7
    assert entry["best_score"] == 0.26
    assert seed_of(tmp_path) is None


def test_the_report_gives_each_converged_cell_a_verdict_and_draws_the_curves_it_holds(tmp_path):
    paper = repro.PAPER["sasrec_ml1m"]
    curve = [[0, 0.01], [500, 0.2], [1000, 0.3]]
    cells = {
        "sasrec_ml1m": [{"metrics": {k: v * 0.965 for k, v in paper.items()}, "status": "early_stopping",
                         "val_curve": curve, "best_step": 1000, "best_score": 0.3, "seed": 42, "hardware": "CPU: x"}],
        "lru_ml1m": [{"metrics": dict(repro.PAPER["lru_ml1m"]), "status": "early_stopping", "hardware": "CPU: x"}],
        "lru_beauty": [{"metrics": {}, "status": "sitting_time_limit", "val_curve": curve, "hardware": "CPU: x"}],
    }
    out = tmp_path / "REPRODUCTION.md"
    text = repro.write_report(out, cells)
    assert "- `lru_ml1m` (seed not recorded, best step not recorded): within 3% on all 4 metrics (+0.0% to +0.0%)" in text
    assert ("- `sasrec_ml1m` (seed 42, best step 1,000): below the paper by more than 3% on recall@10 -3.5%, "
            "ndcg@10 -3.5%, recall@20 -3.5%, ndcg@20 -3.5%; cause: not measured yet") in text
    assert "`lru_beauty` (" not in text  # partial cells get no verdict
    assert "No curve in the ledger for `lru_ml1m`" in text and "](reproduction_curves.png)" in text
    figure = tmp_path / "reproduction_curves.png"
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left beside it


def test_seed_reruns_join_their_cell_and_the_spread_is_max_minus_min_against_the_mean():
    def converged(seed, recall, ndcg):
        return {"metrics": {"recall@10": recall, "ndcg@10": ndcg}, "status": "early_stopping", "seed": seed}

    cells = {"sasrec_ml1m": converged(42, 0.30, 0.20), "sasrec_ml1m@seed_43": converged(43, 0.32, 0.19),
             "sasrec_ml1m@seed_44": converged(44, 0.31, 0.21), "lru_ml1m": converged(42, 0.33, 0.20),
             "lru_beauty@dropout_04": converged(42, 0.05, 0.03), "lru_beauty@dropout_04+seed_7": converged(7, 0.04, 0.02),
             "lru_beauty@seed_7": converged(7, 0.06, 0.03)}  # the plain cell's rerun: not the variant's
    assert {cell: sorted(runs) for cell, runs in seed_groups(cells).items()} == {
        "sasrec_ml1m": ["sasrec_ml1m", "sasrec_ml1m@seed_43", "sasrec_ml1m@seed_44"],
        "lru_beauty@dropout_04": ["lru_beauty@dropout_04", "lru_beauty@dropout_04+seed_7"]}
    lines = seed_spread(cells, {"sasrec_ml1m": PAPER, "lru_beauty": {"recall@10": 0.05}})
    assert "| sasrec_ml1m | recall@10 | 42: 0.30000, 43: 0.32000, 44: 0.31000 | 0.31000 | 0.02000 (6.5%) | +3.3% |" in lines
    assert "| sasrec_ml1m | ndcg@10 | 42: 0.20000, 43: 0.19000, 44: 0.21000 | 0.20000 | 0.02000 (10.0%) | +0.0% |" in lines
    assert not [line for line in lines if line.startswith("| sasrec_ml1m | recall@20")]  # a metric no seed measured
    assert "| lru_beauty@dropout_04 | recall@10 | 42: 0.05000, 7: 0.04000 | 0.04500 | 0.01000 (22.2%) | -10.0% |" in lines
    assert seed_spread({"lru_ml1m": cells["lru_ml1m"], "lru_beauty@seed_7": cells["lru_beauty@seed_7"]}, {}) == []


def test_selection_picks_the_best_validation_setting_never_the_best_test_and_lists_every_setting():
    def converged(seed, val, recall, best=True):
        return {"metrics": scaled({"recall@10": recall}), "status": "early_stopping", "seed": seed,
                **({"best_score": val} if best else {})}

    assert setting_of("lru_beauty@dropout_04+seed_7") == ("lru_beauty", "dropout_04")
    assert setting_of("sasrec_ml1m@seed_43") == ("sasrec_ml1m", "shipped")
    assert setting_of("sasrec_ml1m") == ("sasrec_ml1m", "shipped")
    cells = {"sasrec_ml1m": converged(42, None, 1.0, best=False),  # converged before validation was recorded
             "sasrec_ml1m@seed_43": converged(43, 0.30, 0.98),
             "sasrec_ml1m@dropout_04": converged(42, 0.32, 0.90),  # best on validation, worst on test: selected
             "sasrec_ml1m@wd_0": converged(42, 0.3149, 1.05),
             "sasrec_ml1m@dropout_04+seed_43": converged(43, 0.31, 0.94),
             "lru_ml1m": converged(42, 0.33, 1.0)}  # one setting: no choice to make
    lines = selection(cells, {"sasrec_ml1m": PAPER})
    rows = {line.split(" | ")[1]: line for line in lines if line.startswith("| sasrec_ml1m |")}
    assert set(rows) == {"shipped", "dropout_04", "wd_0"} and not [line for line in lines if line.startswith("| lru_ml1m")]
    assert rows["shipped"].startswith("| sasrec_ml1m | shipped | 42, 43 | 0.30000 | 0.29700 |")  # val of 43 only
    assert rows["dropout_04"].startswith("| sasrec_ml1m | dropout_04 | 42, 43 | 0.31500 | 0.27600 |")
    assert rows["wd_0"].startswith("| sasrec_ml1m | wd_0 | 42 | 0.31490 | 0.31500 |")
    assert rows["dropout_04"].endswith("| -8.0% | selected |") and rows["shipped"].endswith("| -1.0% |  |")
    assert not rows["wd_0"].endswith("selected |")  # the best test figure does not choose
    assert selection({"lru_ml1m": cells["lru_ml1m"]}, {}) == []
    unknown = selection({"a": converged(42, None, 1.0, best=False), "a@b": converged(42, None, 1.0, best=False)}, {})
    assert [line for line in unknown if line.startswith("| a |")][0].split(" | ")[3] == "not recorded"
    assert not [line for line in unknown if line.endswith("selected |")]


def test_a_grid_point_that_has_not_converged_is_listed_with_its_step_and_never_selected():
    def run(seed, val, recall, status="early_stopping", step=10_000, hardware="CPU: x"):
        return {"metrics": scaled({"recall@10": recall}), "status": status, "seed": seed, "best_score": val,
                "global_step": step, "hardware": hardware}

    converged = {"sasrec_ml1m@seed_43": run(43, 0.30, 0.98), "sasrec_ml1m@seed_44": run(44, 0.32, 0.96, hardware="1× GPU")}
    partial = {"sasrec_ml1m@wd_1e-4": run(42, 0.35, 1.01, "sitting_time_limit", 13_230, "1× GPU"),  # higher, unfinished
               "sasrec_ml1m@seed_45": run(45, 0.20, 0.50, "sitting_time_limit", 2_000)}  # a seed of a converged setting
    lines = selection(converged, {"sasrec_ml1m": PAPER}, partial=partial)
    rows = {line.split(" | ")[1]: line for line in lines if line.startswith("| sasrec_ml1m |")}
    assert set(rows) == {"shipped", "wd_1e-4"}  # the partial seed joins no mean: its setting has converged seeds
    assert rows["shipped"].startswith("| sasrec_ml1m | shipped | 43, 44 (GPU) | 0.31000 | 0.29100 |")
    assert rows["shipped"].endswith("| selected |")  # the partial point validates higher but does not choose
    assert rows["wd_1e-4"].startswith("| sasrec_ml1m | wd_1e-4 | 42 (GPU) | 0.35000 | 0.30300 |")
    assert rows["wd_1e-4"].endswith("| partial (stopped at step 13,230): not in the choice |")
    # one converged setting and nothing else: no choice to show; partial points alone still list the grid
    assert selection(converged, {}, partial={"sasrec_ml1m@seed_45": partial["sasrec_ml1m@seed_45"]}) == []
    only = selection({}, {}, partial={"a@b": run(42, 0.3, 1.0, "x"), "a@c": run(42, 0.2, 1.0, "x")})
    assert not [line for line in only if line.endswith("| selected |")]
    assert len([line for line in only if line.startswith("| a |")]) == 2
    assert seed_label({"seed": 42}) == "42" and seed_label({"seed": 7, "hardware": "1× NVIDIA H200"}) == "7 (GPU)"


def test_the_report_has_a_seed_spread_section_once_a_cell_has_two_seeds(tmp_path):
    paper = repro.PAPER["lru_ml1m"]
    first = {"metrics": dict(paper), "status": "early_stopping", "seed": 42}
    text = repro.report({"lru_ml1m": [first]})
    assert "## Seed spread" not in text
    second = {"metrics": {k: v * 0.98 for k, v in paper.items()}, "status": "early_stopping", "seed": 43}
    partial = {"metrics": {k: v * 0.5 for k, v in paper.items()}, "status": "sitting_time_limit", "seed": 44}
    text = repro.report({"lru_ml1m": [first], "lru_ml1m@seed_43": [second], "lru_ml1m@seed_44": [partial]})
    assert "## Seed spread" in text
    row = next(line for line in text.splitlines() if line.startswith("| lru_ml1m | recall@10 | 42:"))
    assert row == (f"| lru_ml1m | recall@10 | 42: {paper['recall@10']:.5f}, 43: {paper['recall@10'] * 0.98:.5f} "
                   f"| {paper['recall@10'] * 0.99:.5f} | {paper['recall@10'] * 0.02:.5f} (2.0%) | -1.0% |")
    assert "## Selection on validation" not in text  # seeds of one setting are not a choice


def test_no_converged_curve_no_figure(tmp_path):
    text = repro.write_report(tmp_path / "R.md", {"lru_ml1m": [{"metrics": {}, "status": "early_stopping"}]})
    assert "## Verdicts" in text and "reproduction_curves.png" not in text
    assert not (tmp_path / "reproduction_curves.png").exists()


def test_a_variant_is_its_own_cell_compared_with_its_configs_paper_figures(tmp_path, monkeypatch):
    runs, out = tmp_path / "runs", tmp_path / "REPRODUCTION.md"
    calls = []

    def fake_run(config, runs_dir, extra, resume):
        calls.append((config, extra, resume))
        run = runs_dir / config / "version_0"
        run.mkdir(parents=True)
        recall = 0.06 if "@" in config else 0.05
        (run / "test_metrics.json").write_text(json.dumps({"test/recall@10": recall}))
        (run / "fit_summary.json").write_text(json.dumps({"status": "early_stopping"}))
        return ["py", "-m", "seqrec", "fit"], 1.0, 0

    monkeypatch.setattr(repro, "run_config", fake_run)
    repro.main(["--configs", "lru_beauty", "--runs_dir", str(runs), "--out", str(out), "--hardware", "here"])
    repro.main(["--configs", "lru_beauty", "--runs_dir", str(runs), "--out", str(out), "--hardware", "here",
                "--variant", "official_padding", "--", "--model.net.padding", "official"])
    assert [c for c, _, _ in calls] == ["lru_beauty", "lru_beauty@official_padding"]
    assert calls[1][1][-2:] == ["--model.net.padding", "official"]
    cells = repro.read_ledger(tmp_path / "reproduction.json")
    assert cells["lru_beauty"][0]["metrics"]["recall@10"] == 0.05  # the base cell keeps its entry
    assert cells["lru_beauty@official_padding"][0]["metrics"]["recall@10"] == 0.06
    text = out.read_text()
    paper = repro.PAPER["lru_beauty"]["recall@10"]
    assert f"| lru_beauty@official_padding | recall@10 | 0.06000 | {paper:.5f} | {100 * (0.06 - paper) / paper:+.1f}% |" in text
    assert "- `lru_beauty@official_padding` (" in text
    assert repro.dataset_of("lru_beauty@official_padding") == "beauty"
    with pytest.raises(SystemExit):
        repro.main(["--configs", "lru_beauty", "--out", str(out), "--variant", "Bad Name"])


def test_a_variant_runs_its_base_config_named_after_the_cell(tmp_path, monkeypatch):
    seen = {}

    def fake_run(command):
        seen["command"] = command
        return 0

    monkeypatch.setattr(repro.child_process, "run", fake_run)
    repro.run_config("lru_beauty@official_padding", tmp_path, ["--model.net.padding", "official"], resume=True)
    command = seen["command"]
    assert command[command.index("--config") + 1] == "lru_beauty.yaml"
    assert command[command.index("--trainer.logger.init_args.name") + 1] == "lru_beauty@official_padding"
    assert command[-2:] == ["--ckpt_path", "last"]
    repro.run_config("lru_beauty", tmp_path, [], resume=False)
    assert "--trainer.logger.init_args.name" not in seen["command"]
