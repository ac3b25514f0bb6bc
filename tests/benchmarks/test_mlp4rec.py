"""benchmarks.mlp4rec: the grid of fits behind results/MLP4REC.md."""

from benchmarks import mlp4rec


def test_grid_holds_every_table_cell_once():
    fits = mlp4rec.grid(3, 1, [2022, 2023])
    names = [fit.name for fit in fits]
    assert len(names) == len(set(names)) == 4 + 2 + 4 + 2 + 1
    assert {"mlp4rec_3ep_s2022", "mlp4rec_nofeatures_3ep_s2023", "gru4rec_1ep_s2022", "mlp4rec_nofeatures_1ep_s2023",
            "popularity"} <= set(names)
    assert "sasrec_1ep_s2023" not in names and "sasrec_3ep_s2023" not in names  # further seeds: the MLP4Rec variants
    flags = dict(zip(*[iter(mlp4rec.model_fit("mlp4rec_nofeatures", 3, 2022).flags)] * 2, strict=True))
    assert flags["--data.init_args.features"] == "null" and flags["--model.net.d_model"] == "32"
    assert flags["--trainer.max_epochs"] == "3" and flags["--seed_everything"] == "2022"
    assert flags["--trainer.val_check_interval"] == "0.25" and flags["--threads"] == "1"
    same = mlp4rec.grid(3, 3, [2022])  # equal epochs: the short table reuses the main fits
    assert len(same) == 4 + 1


def test_features_table_pairs_each_seed_and_the_seeds(tmp_path):
    """Per seed: the paired difference; over seeds: the seed-averaged pairing and the spread of the seeds' differences."""
    import numpy as np

    from benchmarks.fit_grid import Outcome
    from seqrec.metrics.query_ranks import write_ranks_csv

    ranks = {("mlp4rec", 1): [1, 20, 3], ("mlp4rec_nofeatures", 1): [2, 20, 30],
             ("mlp4rec", 2): [1, 1, 3], ("mlp4rec_nofeatures", 2): [1, 5, 3]}
    done, dirs = {}, {}
    for (variant, seed), values in ranks.items():
        name = mlp4rec.model_fit(variant, 3, seed).name
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text("{}\n")
        write_ranks_csv(run / "test_ranks.csv", np.array([[q, r] for q, r in enumerate(values)]))
        hits = float(np.mean(np.array(values) <= 10))
        done[name] = Outcome(str(run), {"test/hr@10": hits, "test/ndcg@10": 0.0, "test/mrr@10": 0.0}, 0.0, 1, 3, 3,
                             "max_epochs", 1.0, 1.0)
        dirs[name] = run
    lines = mlp4rec.features_table(done, dirs, 3, [1, 2])
    seed1, seed2, mean = (line for line in lines if line.startswith(("| 1 ", "| 2 ", "| **mean")))
    assert seed1.split(" | ")[1:3] == ["0.6667 / 0.3333", "+0.3333 (0.3333)"]  # HR@10: query 2 hit only with features
    assert seed2.split(" | ")[1:3] == ["1.0000 / 1.0000", "+0.0000 (0.0000)"]
    # over seeds: d = (0, 0, 1/2) per query averaged over the seeds; per-seed differences 1/3 and 0 -> std/√2 = 1/6
    assert mean.split(" | ")[1:3] == ["0.8333 / 0.6667", "+0.1667 (0.1667; over seeds 0.1667)"]


def test_the_fixed_epoch_fits_keep_their_flags_in_their_order():
    """Runs made before CPU_SIZE moved out of MODELS are reused only if the flags are the same, in the same order."""
    assert mlp4rec.model_fit("mlp4rec_nofeatures", 3, 2022).flags == (
        *mlp4rec.COMMON, *mlp4rec.CPU_SIZE, "--data.init_args.features", "null", "--trainer.max_epochs", "3",
        "--seed_everything", "2022")
    assert mlp4rec.model_fit("sasrec", 3, 2022).flags == (*mlp4rec.COMMON, "--trainer.max_epochs", "3",
                                                          "--seed_everything", "2022")


def test_an_early_stopping_fit_is_the_config_as_shipped():
    """--epochs 0: no epoch cap, no quarter-epoch validation, MLP4Rec at the official size (no CPU_SIZE flag)."""
    fit = mlp4rec.early_stopping_fit("mlp4rec_nofeatures", 2023, threads=2)
    assert fit.name == "mlp4rec_nofeatures_early_stopping_s2023" and fit.config == "mlp4rec_ml100k.yaml"
    flags = dict(zip(*[iter(fit.flags)] * 2, strict=True))
    assert flags == {"--threads": "2", "--data.init_args.features": "null", "--seed_everything": "2023"}
    assert mlp4rec.early_stopping_fit("sasrec", 2022).flags == ("--threads", "1", "--seed_everything", "2022")


def test_early_stopping_table_rows_and_the_pairs_the_models_allow(tmp_path):
    import numpy as np

    from benchmarks.fit_grid import Outcome
    from seqrec.metrics.query_ranks import write_ranks_csv

    ranks = {"sasrec": [1, 20, 3], "gru4rec": [2, 20, 30]}
    done, dirs = {}, {}
    for model, values in ranks.items():
        name = mlp4rec.early_stopping_fit(model, 2022).name
        run = tmp_path / name
        run.mkdir()
        (run / "config.yaml").write_text("{}\n")
        write_ranks_csv(run / "test_ranks.csv", np.array([[q, r] for q, r in enumerate(values)]))
        done[name] = Outcome(str(run), {"test/hr@10": float(np.mean(np.array(values) <= 10)), "test/ndcg@10": 0.0,
                                        "test/mrr@10": 0.0}, 0.2, 380, 38, 28, "early_stopping", 60.0, 65.0)
        dirs[name] = run
    done[mlp4rec.POPULARITY.name] = Outcome("p", {"test/hr@10": 0.1, "test/ndcg@10": 0.0, "test/mrr@10": 0.0}, 0.04,
                                            1, 1, None, "max_epochs", 2.0, 7.0)
    lines = mlp4rec.early_stopping_table(done, dirs, ["sasrec", "gru4rec"], [2022])
    sasrec = next(line for line in lines if line.startswith("| SASRec |"))
    assert sasrec.split(" | ")[1:6] == ["2022", "38 (28)", "380", "early_stopping", "0.6667"]
    pairs = [line for line in lines if " − " in line]
    assert len(pairs) == 1 and pairs[0].startswith("| SASRec − GRU4Rec | 2022 | +0.3333 (0.3333) |")  # query 2: 3 vs 30


def test_one_seed_models_are_fitted_tabled_and_paired_with_the_first_seed_only(tmp_path):
    """--one_seed mlp4rec: MLP4Rec with the first seed, the baselines with every seed; MLP4Rec − SASRec pairs
    seed 2022 alone, SASRec − GRU4Rec both seeds (the same ranks each seed here, so the same pair)."""
    import numpy as np

    from benchmarks.fit_grid import Outcome
    from seqrec.metrics.query_ranks import write_ranks_csv

    models, seeds = ["mlp4rec", "sasrec", "gru4rec"], [2022, 2023]
    fits = mlp4rec.early_stopping_fits(models, seeds, 2, one_seed=["mlp4rec"])
    assert [f.name for f in fits] == ["mlp4rec_early_stopping_s2022", "sasrec_early_stopping_s2022",
                                      "gru4rec_early_stopping_s2022", "sasrec_early_stopping_s2023",
                                      "gru4rec_early_stopping_s2023"]
    assert len(mlp4rec.early_stopping_fits(models, seeds, 2)) == 6
    ranks = {"mlp4rec": [1, 1, 1], "sasrec": [1, 20, 3], "gru4rec": [2, 20, 30]}
    done, dirs = {}, {}
    for fit in fits:
        run = tmp_path / fit.name
        run.mkdir()
        (run / "config.yaml").write_text("{}\n")
        values = ranks[fit.name.split("_")[0]]
        write_ranks_csv(run / "test_ranks.csv", np.array([[q, r] for q, r in enumerate(values)]))
        done[fit.name] = Outcome(str(run), {"test/hr@10": float(np.mean(np.array(values) <= 10)), "test/ndcg@10": 0.0,
                                            "test/mrr@10": 0.0}, 0.2, 380, 38, 28, "early_stopping", 60.0, 65.0)
        dirs[fit.name] = run
    done[mlp4rec.POPULARITY.name] = Outcome("p", {"test/hr@10": 0.1, "test/ndcg@10": 0.0, "test/mrr@10": 0.0}, 0.04,
                                            1, 1, None, "max_epochs", 2.0, 7.0)
    lines = mlp4rec.early_stopping_table(done, dirs, models, seeds, one_seed=["mlp4rec"])
    rows = [line.split(" | ")[:2] for line in lines if " | early_stopping | " in line]
    assert [seed for _, seed in rows] == ["2022", "2022", "2022", "2023", "2023"]
    pairs = {line.split(" | ")[0]: line.split(" | ")[1:3] for line in lines if " − " in line}
    assert pairs == {"| **MLP4Rec + features** (genres, title, year) − SASRec": ["2022", "+0.3333 (0.3333)"],
                     "| SASRec − GRU4Rec": ["2022, 2023", "+0.3333 (0.3333)"]}
