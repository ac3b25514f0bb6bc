"""benchmarks.mlp4rec: the grid of fits behind results/MLP4REC.md."""

from benchmarks import mlp4rec


def test_grid_holds_every_table_cell_once():
    fits = mlp4rec.grid(3, 1, [2022, 2023])
    names = [fit.name for fit in fits]
    assert len(names) == len(set(names)) == 4 + 4 + 2 + 1
    assert {"mlp4rec_3ep_s2022", "gru4rec_1ep_s2022", "mlp4rec_nofeatures_1ep_s2023", "popularity"} <= set(names)
    assert "sasrec_1ep_s2023" not in names  # further seeds only for the two MLP4Rec variants
    flags = dict(zip(*[iter(mlp4rec.model_fit("mlp4rec_nofeatures", 3, 2022).flags)] * 2, strict=True))
    assert flags["--data.init_args.features"] == "null" and flags["--model.net.d_model"] == "32"
    assert flags["--trainer.max_epochs"] == "3" and flags["--seed_everything"] == "2022"
    assert flags["--trainer.val_check_interval"] == "0.25" and flags["--threads"] == "1"
    same = mlp4rec.grid(3, 3, [2022])  # equal epochs: the short table reuses the main fits
    assert len(same) == 4 + 1
