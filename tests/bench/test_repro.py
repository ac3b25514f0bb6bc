import json
import re
from pathlib import Path

import pytest

from seqrec.bench import repro
from seqrec.bench.report import cpu_isa
from seqrec.bench.repro import (
    CELLS,
    PAPER,
    estimate_seconds,
    read_ledger,
    record,
    report,
    shared_data_overrides,
    uses_gpu,
)
from seqrec.build import parse
from seqrec.config_files import shipped_configs

PROTOCOLS = Path(__file__).resolve().parents[2] / "docs" / "PROTOCOLS.md"


def entry(status="early_stopping", hardware="1× NVIDIA H200", recall=0.32636 * 1.02, **extra):
    return {"metrics": {"recall@10": recall, "ndcg@10": 0.19298}, "status": status, "epochs": 80, "global_step": 4500,
            "seconds": 12.5, "hardware": hardware, "command": "python -m seqrec fit ...", **extra}


def write_run(runs: Path, config: str, version: int = 0, status: str = "early_stopping") -> Path:
    run = runs / config / f"version_{version}"
    run.mkdir(parents=True)
    (run / "test_metrics.json").write_text(json.dumps({"test/recall@10": 0.3, "test/ndcg@10": 0.18, "cost/macs": 1.0}))
    (run / "fit_summary.json").write_text(json.dumps({"epochs": 3, "global_step": 99, "status": status,
                                                       "seconds_this_sitting": 7.0}))
    return run


def test_every_cell_has_a_shipped_config_and_the_papers_four_figures():
    assert CELLS[:12] == ["lru_ml1m", "sasrec_ml1m", "lru_beauty", "sasrec_beauty", "lru_video", "sasrec_video",
                          "lru_sports", "sasrec_sports", "lru_steam", "sasrec_steam", "lru_xlong", "sasrec_xlong"]
    assert CELLS[12:18] == ["bert4rec_ml1m", "bert4rec_beauty", "bert4rec_video", "bert4rec_sports", "bert4rec_steam",
                            "bert4rec_xlong"]
    baselines = {f"{m}_{d}" for m in ("gru4rec", "narm", "fmlprec") for d in ("ml1m", "beauty", "video", "sports", "steam")}
    assert set(CELLS[18:]) == baselines
    assert set(CELLS) <= set(shipped_configs())
    for figures in PAPER.values():
        assert set(figures) == {"recall@10", "ndcg@10", "recall@20", "ndcg@20"}


def test_every_paper_figure_is_the_one_in_protocols_section_1_8():
    """The harness, the configs' headers and PROTOCOLS.md §1.8 carry the same figures."""
    section = PROTOCOLS.read_text().split("### 1.8", 1)[1].split("### 1.9", 1)[0]
    numbers = set(re.findall(r"\.\d{5}", section))
    for config, figures in PAPER.items():
        header = (Path(repro.__file__).parents[1] / "configs" / f"{config}.yaml").read_text()
        for value in figures.values():
            text = f"{value:.5f}".lstrip("0")
            assert text in numbers, (config, text)
            if config.split("_", 1)[1] in ("video", "sports", "steam", "xlong") or config.startswith("bert4rec"):
                assert text in header, (config, text)


def test_report_lists_every_cell_with_status_hardware_and_estimates():
    cells = {"lru_ml1m": [entry()], "lru_beauty": [entry(status="interrupted_or_time_limit", hardware="CPU: x, 2 cores",
                                                         note="a note")]}
    table = report(cells)
    assert "| lru_ml1m | converged | 1× NVIDIA H200 | 80 (4500) | 12 s (last sitting) |" in table
    assert "| lru_beauty | partial (interrupted_or_time_limit; a note) | CPU: x, 2 cores |" in table
    assert "| lru_ml1m | recall@10 | 0.33289 | 0.32636 | +2.0% | early_stopping | 1× NVIDIA H200 |" in table
    assert "| lru_ml1m | ndcg@10 | 0.19298 | 0.19298 | +0.0% |" in table
    for config in CELLS[1:]:
        if config != "lru_beauty":
            assert re.search(rf"\| {config} \| not yet run \| \| \| \| [\d.,]+ (h|min) / [\d.,]+ (h|min) \|", table), config
    assert "## How the estimates are made" in table and "- `lru_ml1m`: `python -m seqrec fit ...`" in table


def test_converged_wins_over_a_later_partial_and_entries_are_per_hardware(tmp_path):
    ledger = tmp_path / "reproduction.json"
    record(ledger, "lru_ml1m", entry(hardware="gpu"))
    record(ledger, "lru_ml1m", entry(status="interrupted_or_time_limit", hardware="cpu"))
    cells = record(ledger, "lru_ml1m", entry(status="interrupted_or_time_limit", hardware="cpu", recall=0.1))
    assert [e["hardware"] for e in cells["lru_ml1m"]] == ["gpu", "cpu"]  # the cpu entry replaced, not added
    assert read_ledger(ledger) == cells
    assert repro.cell_status(cells["lru_ml1m"])[0] == "converged"
    assert repro.cell_status([])[0] == "not yet run"


def test_a_variant_or_seed_cell_is_drawn_in_its_shipped_configs_panel_against_its_paper_figure(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    drawn, titles, labels = [], [], []
    monkeypatch.setattr(Axes, "axhline", lambda axis, y, **kwargs: drawn.append(y))
    monkeypatch.setattr(Axes, "set_title", lambda axis, title, **kwargs: titles.append(title))
    plot = Axes.plot

    def labelled_plot(axis, *args, **kwargs):
        if "label" in kwargs:
            labels.append(kwargs["label"])
        return plot(axis, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", labelled_plot)
    curve = {"val_curve": [[0, 0.1], [500, 0.3]], "best_step": 500, "best_score": 0.3, "metrics": {"recall@10": 0.25}}
    cells = ["sasrec_ml1m@seed_43", "lru_video@dropout_04", "lru_ml1m", "mlp4rec_ml100k@seed_43", "sasrec_ml1m"]
    repro.plot_curves({cell: curve for cell in cells}, PAPER, tmp_path / "curves.png")
    assert titles == ["sasrec_ml1m", "lru_video", "lru_ml1m", "mlp4rec_ml100k"]  # one panel per shipped config
    assert drawn == [PAPER["sasrec_ml1m"]["recall@10"], PAPER["lru_video"]["recall@10"], PAPER["lru_ml1m"]["recall@10"]]
    # the shipped setting's line first in its panel, then its seed rerun; each labelled with its test figure
    assert labels == ["shipped: test 0.2500", "seed_43: test 0.2500", "dropout_04: test 0.2500", "shipped: test 0.2500",
                      "seed_43: test 0.2500"]


def test_estimates_are_ordered_by_size():
    for config in CELLS:
        assert estimate_seconds(config, "h200") < estimate_seconds(config, "cpu")
    assert estimate_seconds("lru_xlong", "cpu") > estimate_seconds("lru_ml1m", "cpu")
    assert estimate_seconds("lru_steam", "h200") > estimate_seconds("lru_ml1m", "h200")


def test_a_cloze_cells_estimate_counts_its_own_masked_positions(monkeypatch):
    """The labels a BERT4Rec step scores follow its config: Beauty masks with probability 0.6 (not model/bert4rec.yaml's
    0.2), and 1/11 of its windows mask their newest event alone, one label each: (1 − q)·p·n + q per window."""
    shipped = repro.step_macs("bert4rec_beauty")
    settings = {"mask_prob": 0.0, "mask_last_prob": 0.0}
    monkeypatch.setattr(repro, "cloze_masking", lambda config: settings)
    encoder = repro.step_macs("bert4rec_beauty")  # no labels: the encoder's share alone
    settings["mask_prob"] = 0.2
    at_02 = repro.step_macs("bert4rec_beauty")
    data = repro.DATASETS["beauty"]
    n = data.interactions / data.users - 2  # Beauty's windows are shorter than max_len
    assert (shipped - encoder) / (at_02 - encoder) == pytest.approx((10 / 11 * 0.6 * n + 1 / 11) / (0.2 * n))


def test_main_records_each_cell_as_it_finishes_and_labels_the_hardware(tmp_path, monkeypatch):
    runs, out = tmp_path / "runs", tmp_path / "results" / "REPRODUCTION.md"
    calls = []

    def fake_run(config, runs_dir, extra, resume):
        calls.append((config, extra))
        if config == "sasrec_ml1m":
            return ["py", "-m", "seqrec", "fit", "--config", config], 1.0, 1  # failed: nothing new recorded
        assert not out.exists() or config == "lru_ml1m" or "lru_ml1m | converged" in out.read_text()
        write_run(runs_dir, config, status="early_stopping" if config == "lru_ml1m" else "interrupted_or_time_limit")
        return ["py", "-m", "seqrec", "fit", "--config", config], 1.0, 0

    monkeypatch.setattr(repro, "run_config", fake_run)
    with pytest.raises(SystemExit):
        repro.main(["--configs", "lru_ml1m", "sasrec_ml1m", "lru_video", "--runs_dir", str(runs), "--out", str(out),
                    "--hardware", "TEST-GPU", "--sitting_time", "00:00:05:00", "--", "--trainer.accelerator", "gpu"])
    assert [c for c, _ in calls] == ["lru_ml1m", "sasrec_ml1m", "lru_video"]
    assert calls[0][1][-4:] == ["--trainer.accelerator", "gpu", "--sitting_time", "00:00:05:00"]
    cells = read_ledger(out.parent / "reproduction.json")
    assert set(cells) == {"lru_ml1m", "lru_video"}
    assert cells["lru_ml1m"][0]["hardware"] == "TEST-GPU" and cells["lru_ml1m"][0]["metrics"]["recall@10"] == 0.3
    text = out.read_text()
    assert "| lru_ml1m | converged | TEST-GPU | 3 (99) |" in text
    assert "| lru_video | partial (interrupted_or_time_limit) | TEST-GPU |" in text
    assert "| sasrec_ml1m | not yet run |" in text


def test_report_only_records_runs_it_has_not_seen(tmp_path):
    runs, out = tmp_path / "runs", tmp_path / "REPRODUCTION.md"
    write_run(runs, "lru_beauty")
    repro.main(["--configs", "lru_beauty", "--runs_dir", str(runs), "--out", str(out), "--report_only",
                "--hardware", "here"])
    repro.main(["--configs", "lru_beauty", "--runs_dir", str(runs), "--out", str(out), "--report_only",
                "--hardware", "elsewhere"])  # already recorded: not recorded again under another label
    cells = read_ledger(tmp_path / "reproduction.json")
    assert [e["hardware"] for e in cells["lru_beauty"]] == ["here"]


def test_without_hardware_the_label_is_detected(tmp_path, monkeypatch):
    """No --hardware: the label comes from detect_hardware (a parameter named like the helper once shadowed it)."""
    runs, out = tmp_path / "runs", tmp_path / "R.md"

    def fake_run(config, runs_dir, extra, resume):
        write_run(runs_dir, config)
        return ["py", "-m", "seqrec", "fit", "--config", config], 1.0, 0

    monkeypatch.setattr(repro, "run_config", fake_run)
    repro.main(["--configs", "lru_ml1m", "--runs_dir", str(runs), "--out", str(out)])
    [entry] = read_ledger(tmp_path / "reproduction.json")["lru_ml1m"]
    assert entry["hardware"] == repro.detect_hardware(False) and entry["hardware"].startswith("CPU: ")


def test_a_cpu_sitting_long_enough_adds_the_cells_measured_pace_to_its_estimate(tmp_path):
    run = write_run(tmp_path / "runs", "fmlprec_ml1m", status="sitting_time_limit")
    summary = json.loads((run / "fit_summary.json").read_text())
    (run / "fit_summary.json").write_text(json.dumps({**summary, "steps_this_sitting": 12_000, "seconds_per_step": 0.5}))
    entry = repro.run_entry(run, "CPU: test", "cmd")
    assert entry["seconds_per_step"] == 0.5 and entry["steps_this_sitting"] == 12_000
    assert entry["cpu"] == cpu_isa() and "cpu" not in repro.run_entry(run, "1× GPU", "cmd")  # which CPU generation
    steps = repro.assumed_steps("fmlprec_ml1m")
    assert steps == 40 * 500  # the assumed 40 validation intervals of 500 steps on ML-1M
    line = next(row for row in repro.report({"fmlprec_ml1m": [entry]}).splitlines() if row.startswith("| fmlprec_ml1m |"))
    assert f"at its measured CPU pace (0.5 s/step): {repro.hours(steps * 0.5)} |" in line
    for other in ({**entry, "hardware": "GPU: H200"}, {**entry, "steps_this_sitting": 10}, {**entry, "seconds_per_step": None}):
        assert repro.measured_pace(other) is None  # another device, too short a sitting, or none recorded
    assert "measured CPU pace" not in repro.report({"fmlprec_ml1m": [{**entry, "steps_this_sitting": 10}]})


def test_a_resumed_sitting_of_the_same_run_carries_the_runs_whole_wall_time_and_pace(tmp_path):
    ledger, cpu = tmp_path / "reproduction.json", "CPU: test"
    first = entry(status="sitting_time_limit", hardware=cpu, global_step=30_000, seconds=7_200.0,
                  steps_this_sitting=30_000, run_dir="runs/repro/narm_ml1m/version_0")
    record(ledger, "narm_ml1m", first)
    assert repro.wall_time(first) == "7,200 s"  # one sitting ran every step
    second = {**first, "status": "sitting_time_limit", "global_step": 38_000, "seconds": 1_800.0, "steps_this_sitting": 8_000}
    record(ledger, "narm_ml1m", second)
    third = {**first, "status": "early_stopping", "global_step": 40_000, "seconds": 1_000.0, "steps_this_sitting": 2_000}
    [kept] = record(ledger, "narm_ml1m", third)["narm_ml1m"]
    assert kept["sittings"] == 3 and kept["seconds_total"] == 10_000.0
    assert repro.measured_pace(kept) == 10_000.0 / 40_000  # the whole run's, not the last sitting's 0.5 s/step
    assert repro.wall_time(kept) == "10,000 s (3 sittings)"
    line = next(row for row in report(read_ledger(ledger)).splitlines() if row.startswith("| narm_ml1m |"))
    assert "| 10,000 s (3 sittings) |" in line and "(0.25 s/step)" in line
    # a new run (another directory) or a rerun from an earlier step starts its own count
    fresh = {**third, "run_dir": "runs/repro/narm_ml1m/version_1", "global_step": 41_000}
    assert "sittings" not in repro.continued(fresh, kept)
    assert "sittings" not in repro.continued({**third, "global_step": 39_000}, kept)
    # the same directory path holding a new run from step 0 (the runs folder lost with a machine) is not a sitting
    anew = {**third, "global_step": 45_000, "steps_this_sitting": 45_000}
    assert "sittings" not in repro.continued(anew, kept)
    assert repro.wall_time({**third, "steps_this_sitting": None}) == "1,000 s (last sitting)"


def test_a_cell_run_beside_others_is_adopted_from_its_own_ledger_with_its_sittings(tmp_path):
    ledger, own, gpu, cpu = tmp_path / "reproduction.json", tmp_path / "cell" / "reproduction.json", "GPU: test", "CPU: test"
    record(ledger, "sasrec_ml1m", entry(hardware=cpu, recall=0.31))
    first = entry(status="sitting_time_limit", hardware=gpu, global_step=11_000, seconds=450.0,
                  steps_this_sitting=11_000, run_dir="/tmp/runs/sasrec_ml1m@wd_1e-4/version_0")
    record(ledger, "sasrec_ml1m@wd_1e-4", first)
    own.parent.mkdir()
    own.write_text(ledger.read_text())  # the script seeds each cell's ledger with a copy of the shared one
    second = {**first, "global_step": 13_000, "seconds": 100.0, "steps_this_sitting": 2_000}
    record(own, "sasrec_ml1m@wd_1e-4", second)  # the cell's process, writing its own copy
    record(ledger, "lru_ml1m@seed_43", entry(hardware=gpu))  # meanwhile another cell reached the shared ledger
    cells = repro.adopt(ledger, own, "sasrec_ml1m@wd_1e-4", gpu)
    assert set(cells) == {"sasrec_ml1m", "sasrec_ml1m@wd_1e-4", "lru_ml1m@seed_43"}  # nothing of the others lost
    [kept] = cells["sasrec_ml1m@wd_1e-4"]
    assert kept["global_step"] == 13_000 and kept["sittings"] == 2 and kept["seconds_total"] == 550.0
    assert repro.adopt(ledger, own, "sasrec_ml1m@wd_1e-4", gpu) == cells  # adopting again changes nothing
    assert read_ledger(ledger) == cells
    # a cell whose process wrote nothing of this hardware (it failed before its test) leaves the ledger as it was
    assert repro.adopt(ledger, own, "lru_beauty@dropout_06", gpu) == cells
    assert repro.adopt(ledger, tmp_path / "never_written.json", "sasrec_ml1m", gpu) == cells


def test_an_adopted_cell_keeps_the_sittings_its_own_ledger_counted(tmp_path):
    """The shared ledger saw a run's first sitting only; the cell's own ledger saw all three: its totals stand
    (adding its last sitting to the first would lose the middle one)."""
    ledger, own, cpu = tmp_path / "reproduction.json", tmp_path / "wt" / "reproduction.json", "CPU: test"
    first = entry(status="sitting_time_limit", hardware=cpu, global_step=12_000, seconds=5_400.0,
                  steps_this_sitting=12_000, run_dir="runs/repro/sasrec_ml1m@wd_1e-4/version_0")
    record(ledger, "sasrec_ml1m@wd_1e-4", first)
    own.parent.mkdir()
    own.write_text(ledger.read_text())
    record(own, "sasrec_ml1m@wd_1e-4", {**first, "global_step": 20_500, "seconds": 3_600.0, "steps_this_sitting": 8_500})
    record(own, "sasrec_ml1m@wd_1e-4", {**first, "status": "early_stopping", "global_step": 23_000, "seconds": 1_000.0,
                                        "steps_this_sitting": 2_500})
    [kept] = repro.adopt(ledger, own, "sasrec_ml1m@wd_1e-4", cpu)["sasrec_ml1m@wd_1e-4"]
    assert kept["sittings"] == 3 and kept["seconds_total"] == 10_000.0
    assert repro.wall_time(kept) == "10,000 s (3 sittings)"


def test_a_variant_name_is_a_folder_name_and_a_grid_points_seed_is_its_own_cell(tmp_path, capsys):
    assert repro.VARIANT_NAME.match("dropout_04") and repro.VARIANT_NAME.match("wd_1e-4+seed_43")
    for bad in ("Dropout", "a/b", "../x", "x+y", "+seed_4", "x+seed_", ""):
        assert not repro.VARIANT_NAME.match(bad), bad
    with pytest.raises(SystemExit):
        repro.main(["--configs", "sasrec_ml1m", "--variant", "a/b", "--runs_dir", str(tmp_path), "--out",
                    str(tmp_path / "R.md"), "--report_only", "true"])
    assert "--variant 'a/b': use lower-case letters" in capsys.readouterr().err
    repro.main(["--configs", "sasrec_ml1m", "--variant", "wd_1e-4+seed_43", "--runs_dir", str(tmp_path), "--out",
                str(tmp_path / "R.md"), "--report_only", "true"])
    assert "| sasrec_ml1m@wd_1e-4+seed_43 | not yet run |" in (tmp_path / "R.md").read_text()


def test_hardware_detection_reads_the_accelerator_flag():
    assert uses_gpu(["--trainer.accelerator", "gpu"]) and uses_gpu(["--trainer.accelerator=cuda"])
    assert not uses_gpu(["--trainer.accelerator", "cpu"])
    assert repro.detect_hardware(False).startswith("CPU: ")


def test_shared_data_overrides_parse(tmp_path):
    (tmp_path / "lrurec").mkdir()
    (tmp_path / "lrurec" / "ml-1m.txt.gz").write_bytes(b"")
    overrides = shared_data_overrides("lru_ml1m", tmp_path)
    config = parse(["--config", "lru_ml1m", *overrides])
    source = config.data.init_args.source
    assert source.class_path.endswith("SASRecText") and source.init_args.path.endswith("ml-1m.txt.gz")
    assert config.data.init_args.preprocessing.sort_by == "time"
    assert config.data.init_args.preprocessing.min_item_interactions == 0
    with pytest.raises(FileNotFoundError, match="lrurec/beauty.txt.gz"):
        shared_data_overrides("lru_beauty", tmp_path)
    assert shared_data_overrides("lru_video", tmp_path) == []  # no copy: the config's own source downloads it
    (tmp_path / "lrurec" / "video.txt.gz").write_bytes(b"")
    video = parse(["--config", "sasrec_video", *shared_data_overrides("sasrec_video", tmp_path)])
    assert video.data.init_args.source.init_args.path.endswith("video.txt.gz")
    assert video.data.init_args.preprocessing.dedupe_consecutive is True  # the protocol's preprocessing stays
    (tmp_path / "xlong").mkdir()
    xlong = parse(["--config", "lru_xlong", *shared_data_overrides("lru_xlong", tmp_path)])
    assert xlong.data.init_args.source.init_args.root == str(tmp_path / "xlong")


def test_sitting_time_is_fits_sitting_time_and_a_paused_cell_says_resume(tmp_path, monkeypatch, capsys):
    """--sitting_time bounds each sitting with fit's --sitting_time (an exact resume point; exit 75 when it ran out)."""
    runs = tmp_path / "runs"
    calls = []

    def paused(config, runs_dir, extra, resume):
        calls.append((extra, resume))
        write_run(runs_dir, config, status="sitting_time_limit")
        return ["py", "-m", "seqrec", "fit", "--config", config], 1.0, 75

    monkeypatch.setattr(repro, "run_config", paused)
    with pytest.raises(SystemExit) as exit_info:
        repro.main(["--configs", "lru_ml1m", "--runs_dir", str(runs), "--out", str(tmp_path / "R.md"), "--resume",
                    "--sitting_time", "00:00:25:00", "--hardware", "TEST"])
    assert exit_info.value.code == 75
    [(extra, resume)] = calls
    assert extra[-2:] == ["--sitting_time", "00:00:25:00"] and resume
    assert "lru_ml1m reached the sitting's --sitting_time with a checkpoint; continue with the same command and --resume" \
        in capsys.readouterr().err
    assert "| lru_ml1m | partial (sitting_time_limit) | TEST |" in (tmp_path / "R.md").read_text()


def test_public_command_names_the_shared_data_folder_by_its_variable():
    argv = ["py", "-m", "seqrec", "fit", "--path", "/data/shared/x.gz", "--source", '{"path": "/data/shared/y.gz"}']
    command = repro.public_command(argv, Path("/data/shared"))
    assert command == """python -m seqrec fit --path "$SEQREC_SHARED_DATA"/x.gz --source '{"path": "'"$SEQREC_SHARED_DATA"'/y.gz"}'"""


BASELINES = [f"{m}_{d}" for m in ("gru4rec", "narm", "fmlprec") for d in ("ml1m", "beauty", "video", "sports", "steam")]
BERT4REC = [f"bert4rec_{d}" for d in ("ml1m", "beauty", "video", "sports", "steam", "xlong")]


@pytest.mark.parametrize("config", BASELINES)
def test_baseline_cells_train_on_their_models_examples(config):
    """Each Table 3 baseline cell resolves with its model, LRURec's protocol and the training examples its model
    needs (prefixes for NARM and FMLP-Rec, the estimate's ``PREFIX_MODELS``; LRURec's windows for GRU4Rec)."""
    parsed = parse(["--config", config])
    mode = parsed.data.init_args.train_mode
    assert mode == ("prefix" if repro.model_of(config) in repro.PREFIX_MODELS else "windows")
    assert parsed.model.init_args.loss == "ce" and parsed.model.init_args.optimizer == "adamw"
    assert parsed.trainer.callbacks[1].init_args.monitor == "val/recall@10"


# (mask probability, dropout, attention dropout): the original BERT4Rec's run_<data>.sh and bert_config_<data>_64.json
# where it has the dataset (ML-1M, Beauty, Steam), else model/bert4rec.yaml's (config.py's, equal to ML-1M's)
BERT4REC_SETTINGS = {"bert4rec_beauty": (0.6, 0.5, 0.2), "bert4rec_steam": (0.4, 0.1, 0.1)}


@pytest.mark.parametrize("config", BERT4REC)
def test_bert4rec_cells_train_by_the_cloze_task(config):
    """Each BERT4Rec cell: the model, cloze windows (80/10/10) masked with its dataset's probability and 1/11 of them
    last-item instances, its dataset's dropouts and protocol."""
    parsed = parse(["--config", config])
    assert parsed.model.init_args.net.class_path == "seqrec.models.next_item.bert4rec.BERT4Rec"
    data, net = parsed.data.init_args, parsed.model.init_args.net.init_args
    mask_prob, dropout, attention_dropout = BERT4REC_SETTINGS.get(config, (0.2, 0.2, 0.2))
    assert (data.train_mode, data.mask_prob, data.mask_replacement) == ("cloze", mask_prob, "bert")
    assert data.mask_last_prob == pytest.approx(1 / 11, abs=1e-6)  # the original's last-item instances
    # the time estimate reads the same two settings from the YAML without the parser
    assert repro.cloze_masking(config) == pytest.approx({"mask_prob": mask_prob, "mask_last_prob": data.mask_last_prob})
    assert (net.dropout, net.attention_dropout) == (dropout, attention_dropout)
    assert data.max_len == repro.DATASETS[repro.dataset_of(config)].max_len
    assert parsed.model.init_args.loss == ("sampled_ce" if config.endswith("xlong") else "ce")
    assert parsed.trainer.callbacks[1].init_args.monitor == "val/recall@10"


@pytest.fixture(scope="module")
def ml1m_cache(tmp_path_factory) -> Path:
    """One cache for every cell's real ML-1M: its sequences are preprocessed once, not once per cell (each cell
    still builds its own examples; the cache is keyed by what built it)."""
    return tmp_path_factory.mktemp("ml1m-cache")


@pytest.mark.slow
@pytest.mark.parametrize("config", BASELINES + BERT4REC)
def test_baseline_cells_train_three_steps_on_real_ml1m(config, shared_data, tmp_path, ml1m_cache, monkeypatch):
    """Every new cell end to end (build, 3 training steps, validation, test of the best checkpoint) with its
    dataset swapped for LRURec's ML-1M file (its protocol part's max_len and cadence kept)."""
    from seqrec.fit import main

    monkeypatch.setenv("SEQREC_CACHE", str(ml1m_cache))

    results = main([
        "--config", f"{config}.yaml", *shared_data_overrides("x_ml1m", shared_data),
        "--data.init_args.expected_counts", "null",
        "--trainer.max_steps", "3", "--trainer.val_check_interval", "3", "--trainer.limit_val_batches", "1",
        "--trainer.limit_test_batches", "1", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path), "--trainer.default_root_dir", str(tmp_path),
        "--threads", "1",
    ])
    assert {"test/recall@10", "test/ndcg@10", "test/recall@20", "test/ndcg@20"} <= set(results)
    if "cost/macs_hand_per_sequence" in results:  # a declared formula (BERT4Rec, NARM, FMLP-Rec) equals the count
        assert results["cost/macs_hand_per_sequence"] == pytest.approx(results["cost/macs_per_sequence"], rel=0.01)
    summary = json.loads(next(tmp_path.glob(f"{config}/version_*/fit_summary.json")).read_text())
    assert summary["global_step"] == 3


def test_a_sitting_stopped_by_a_signal_counts_into_its_runs_wall_time_and_sittings(tmp_path, monkeypatch, capsys):
    """A signal stops a sitting at its resume point without a test: the ledger keeps the entry's last tested figures
    and adds that sitting's wall time (``count_interrupted``), which the next recorded sitting folds into its totals."""
    runs, out = tmp_path / "runs", tmp_path / "R.md"
    summaries = iter([
        (75, {"status": "sitting_time_limit", "global_step": 99, "steps_this_sitting": 99, "seconds_this_sitting": 7.0}),
        (143, {"status": "interrupted", "global_step": 150, "steps_this_sitting": 51, "seconds_this_sitting": 30.0}),
        (0, {"status": "early_stopping", "global_step": 200, "steps_this_sitting": 50, "seconds_this_sitting": 20.0}),
    ])

    def sitting(config, runs_dir, extra, resume):
        code, summary = next(summaries)
        run = runs_dir / config / "version_0"
        if code != 143:  # a sitting that ends by itself tests its best checkpoint
            run.mkdir(parents=True, exist_ok=True)
            (run / "test_metrics.json").write_text(json.dumps({"test/recall@10": 0.05 + summary["global_step"] / 1e4}))
        (run / "fit_summary.json").write_text(json.dumps({"epochs": 3, **summary}))
        return ["py", "-m", "seqrec", "fit", "--config", config], 1.0, code

    monkeypatch.setattr(repro, "run_config", sitting)
    argv = ["--configs", "sasrec_beauty", "--runs_dir", str(runs), "--out", str(out), "--hardware", "CPU: test", "--resume"]
    for expected in (75, 143):  # the sitting's time, then SIGTERM's status (the fit's, passed on)
        with pytest.raises(SystemExit) as stop:
            repro.main(argv)
        assert stop.value.code == expected
    assert "sasrec_beauty stopped by a signal with a checkpoint" in capsys.readouterr().err
    ledger = out.parent / "reproduction.json"
    [kept] = read_ledger(ledger)["sasrec_beauty"]
    assert (kept["global_step"], kept["metrics"]["recall@10"]) == (99, 0.05 + 99 / 1e4)  # the last test's figures
    assert (kept["interrupted_sittings"], kept["interrupted_seconds"], kept["interrupted_at_step"]) == (1, 30.0, 150)
    assert repro.wall_time(kept) == "37 s (2 sittings)" and repro.run_totals(kept) == (37.0, 2, 150)
    assert repro.count_interrupted(ledger, "sasrec_beauty", "CPU: test", 0.0)["sasrec_beauty"] == [kept]  # never twice
    repro.main(argv)
    [final] = read_ledger(ledger)["sasrec_beauty"]
    assert (final["status"], final["global_step"], final["sittings"], final["seconds_total"]) == ("early_stopping", 200, 3, 57.0)
    assert "interrupted_seconds" not in final and repro.wall_time(final) == "57 s (3 sittings)"
