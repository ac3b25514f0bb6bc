"""``python -m seqrec predict``: the evaluation's exact ranking (HR@10 / NDCG@10 of test_metrics.json from the file,
ties included), chunked top-k equal to a brute-force sort, user and candidate files, typed ids, one-line errors."""

from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from seqrec.__main__ import main
from seqrec.api import catalogue_topk, load_run
from seqrec.models.base import SequenceRecommender
from tests.conftest import write_ml100k
from tests.test_fit import tiny

pq = pytest.importorskip("pyarrow.parquet")
pa_csv = pytest.importorskip("pyarrow.csv")


# --- the chunked top-k against a brute-force sort -------------------------------------------------------
class FixedScores(SequenceRecommender):
    """Row r of ``table`` (B, N + 1) is the score vector of hidden state r (hidden = row index)."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table, self.num_items = table, table.shape[1] - 1

    def score_chunk(self, hidden: torch.Tensor, start: int, stop: int) -> torch.Tensor:
        return self.table[hidden.long().squeeze(1), start:stop].clone()


def brute_force(scores: np.ndarray, k: int, excluded: set, allowed: set | None, ties: str) -> list[tuple[int, float, int]]:
    """(item, score, rank) by sorting every allowed item (score desc, item asc); rank = 1 + #strictly higher."""
    items = [i for i in range(1, len(scores)) if i not in excluded and (allowed is None or i in allowed)
             and math.isfinite(scores[i])]
    items.sort(key=lambda i: (-scores[i], i))
    ranked = [(i, float(scores[i]), 1 + sum(scores[j] > scores[i] for j in items)) for i in items]
    return [r for r in ranked if r[2] <= k] if ties == "all" else ranked[:k]


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1000])
@pytest.mark.parametrize("ties", ["all", "cut"])
def test_chunked_topk_equals_a_full_sort_with_ties_exclusions_and_candidates(chunk_size, ties):
    rng = np.random.default_rng(chunk_size)
    batch, num_items, k = 6, 23, 5
    table = torch.from_numpy(rng.integers(0, 4, (batch, num_items + 1)).astype(np.float32))  # many ties
    model = FixedScores(table)
    hidden = torch.arange(batch, dtype=torch.float32).unsqueeze(1)
    ex_rows, ex_items = np.repeat(np.arange(batch), 3), rng.integers(1, num_items + 1, batch * 3)
    exclude = (torch.from_numpy(ex_rows), torch.from_numpy(ex_items))
    allowed = torch.zeros(num_items + 1, dtype=torch.bool)
    allowed[1:18] = True
    pair_rows, pair_items = np.repeat(np.arange(batch), 8), rng.integers(1, num_items + 1, batch * 8)
    for mode in ("none", "global", "pairs"):
        top = catalogue_topk(
            model, hidden, k, exclude,
            allowed if mode == "global" else None,
            (torch.from_numpy(pair_rows), torch.from_numpy(pair_items)) if mode == "pairs" else None,
            chunk_size=chunk_size, ties=ties,
        )
        for row in range(batch):
            allowed_set = (set(range(1, 18)) if mode == "global" else
                           set(pair_items[pair_rows == row].tolist()) if mode == "pairs" else None)
            expected = brute_force(table[row].numpy(), k, set(ex_items[ex_rows == row].tolist()), allowed_set, ties)
            valid = top.valid[row]
            got = list(zip(top.items[row][valid].tolist(), top.scores[row][valid].tolist(), top.ranks[row][valid].tolist()))
            assert got == expected, (mode, row)


# --- a trained fixture run ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> dict[str, Path]:
    """Tiny SASRec, LRURec, NARM and FMLP-Rec runs and a most-popular run (counts, no tie-break: many ties) on a
    MovieLens-100k fixture."""
    root = write_ml100k(tmp_path_factory.mktemp("data") / "ml-100k")
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEQREC_CACHE", str(tmp_path_factory.mktemp("cache")))
        main(["fit", *tiny(root, runs / "sasrec", "--trainer.max_epochs", "2")])
        main(["fit", *tiny(root, runs / "lru", "--trainer.max_epochs", "2", "--model.net",
                           "seqrec.models.next_item.lru.LRURec", "--model.net.d_model", "16")])
        main(["fit", *tiny(root, runs / "narm", "--trainer.max_epochs", "1", "--model.net",
                           "seqrec.models.next_item.narm.NARM", "--model.net.d_model", "16")])
        main(["fit", *tiny(root, runs / "fmlprec", "--trainer.max_epochs", "1", "--data.init_args.train_mode", "prefix",
                           "--model.net", "seqrec.models.next_item.fmlprec.FMLPRec",
                           "--model.net.d_model", "16")])
        main(["fit", "--config", "sasrec_ml100k.yaml", "--data.init_args.source.init_args.root", str(root),
              "--data.max_len", "10", "--model.net", "seqrec.models.next_item.popularity.Popularity",
              "--model.net.tie_break", "false",
              "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--threads", "1",
              "--trainer.logger.init_args.save_dir", str(runs / "pop"), "--trainer.logger.init_args.loggers", "[csv]"])
    return {name: runs / name / "sasrec_ml100k" / "version_0" for name in ("sasrec", "lru", "narm", "fmlprec", "pop")}


def metrics_from_file(run_dir: Path, table: dict, k: int = 10) -> dict[str, float]:
    """HR@k and NDCG@k of the run's test targets, computed from a predictions table's rank column."""
    run = load_run(run_dir, threads=1)
    sequences, test = run.sequences, run.datamodule.split.test
    target = dict(zip(sequences.raw_user_ids(test.user).tolist(), sequences.raw_item_ids(test.target).tolist()))
    rank_of = {u: r for u, r, i in zip(table["user"], table["rank"], table["item"]) if target[u] == i}
    ranks = np.array([rank_of.get(u, 10**9) for u in target], dtype=np.float64)
    return {f"test/hr@{k}": float(np.mean(ranks <= k)), f"test/ndcg@{k}": float(np.mean((ranks <= k) / np.log2(ranks + 1)))}


@pytest.mark.parametrize("name", ["sasrec", "lru", "narm", "fmlprec", "pop"])
def test_predicted_top10_of_the_test_users_reproduces_the_test_metrics(fitted, tmp_path, name):
    out = tmp_path / "top10.parquet"
    summary = main(["predict", str(fitted[name]), "--users", "test", "--k", "10", "--out", str(out), "--threads", "1"])
    assert summary["exclude_seen"] == "window"  # the evaluation's masking, by default for --users test
    table = pq.read_table(out).to_pydict()
    expected = json.loads((fitted[name] / "test_metrics.json").read_text())
    got = metrics_from_file(fitted[name], table)
    assert got == pytest.approx({key: expected[key] for key in got}, abs=1e-6)
    counts = np.bincount(np.unique(table["user"], return_inverse=True)[1])
    if name == "pop":  # counts tie: the lists keep every item ranked <= 10, so some exceed 10 rows
        assert counts.max() > 10
        cut = pq.read_table(_predict(fitted[name], tmp_path / "cut.parquet", "--users", "test", "--ties", "cut"))
        assert set(np.bincount(np.unique(cut.column("user").to_numpy(), return_inverse=True)[1])) == {10}
    else:
        assert set(counts) == {10}


def _predict(run_dir: Path, out: Path, *extra: str) -> Path:
    main(["predict", str(run_dir), "--out", str(out), "--threads", "1", *extra])
    return out


def test_all_users_typed_ids_formats_and_chunking_do_not_change_the_lists(fitted, tmp_path):
    run_dir = fitted["sasrec"]
    whole = pq.read_table(_predict(run_dir, tmp_path / "a.parquet", "--k", "5"))
    assert whole.schema.names == ["user", "rank", "item", "score"]
    assert str(whole.schema.field("user").type) == "int64" and str(whole.schema.field("item").type) == "int64"
    small = pq.read_table(_predict(run_dir, tmp_path / "b.parquet", "--k", "5", "--batch_size", "7"))
    assert whole.equals(small)
    text = pa_csv.read_csv(_predict(run_dir, tmp_path / "c.csv.gz", "--k", "5"))
    assert text.column("item").to_pylist() == whole.column("item").to_pylist()
    # --exclude_seen all (the default for all users): nothing of the user's history comes back
    run = load_run(run_dir, threads=1)
    seqs = run.sequences
    history = {int(u): set(seqs.raw_item_ids(seqs.sequence(r)).tolist()) for r, u in enumerate(seqs.raw_user_ids())}
    assert not any(i in history[u] for u, i in zip(whole.column("user").to_pylist(), whole.column("item").to_pylist()))


def test_user_and_candidate_files(fitted, tmp_path):
    run_dir = fitted["sasrec"]
    (tmp_path / "users.txt").write_text("3\n1\n")
    (tmp_path / "items.csv").write_text("item\n5\n6\n7\n8\n")
    out = pq.read_table(_predict(run_dir, tmp_path / "o.parquet", "--users", str(tmp_path / "users.txt"),
                                 "--candidates", str(tmp_path / "items.csv"), "--k", "3",
                                 "--exclude_seen", "none")).to_pydict()
    assert out["user"] == [3, 3, 3, 1, 1, 1] and set(out["item"]) <= {5, 6, 7, 8}
    (tmp_path / "pairs.csv").write_text("user,item\n1,9\n1,10\n3,11\n")
    out = pq.read_table(_predict(run_dir, tmp_path / "p.parquet", "--users", str(tmp_path / "users.txt"),
                                 "--candidates", str(tmp_path / "pairs.csv"), "--exclude_seen", "none")).to_pydict()
    assert sorted(zip(out["user"], out["item"])) == [(1, 9), (1, 10), (3, 11)]


def test_unknown_users_are_a_one_line_error_naming_file_column_and_row(fitted, tmp_path, capsys):
    (tmp_path / "users.csv").write_text("user\n1\n99999\n")
    with pytest.raises(SystemExit) as exit_info:
        _predict(fitted["sasrec"], tmp_path / "o.parquet", "--users", str(tmp_path / "users.csv"))
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.count("\n") == 0
    assert f"{tmp_path / 'users.csv'}, column 'user', row 2 (line 3): unknown user '99999'" in err
    out = pq.read_table(_predict(fitted["sasrec"], tmp_path / "o.parquet", "--users", str(tmp_path / "users.csv"),
                                 "--skip_unknown", "--k", "2")).to_pydict()
    assert out["user"] == [1, 1]
    with pytest.raises(SystemExit):
        _predict(tmp_path / "no-such-run", tmp_path / "o.parquet")
    assert "no such run directory" in capsys.readouterr().err


def test_predict_is_a_command_of_python_m_seqrec(capsys):
    main(["--help"])
    assert "\n  predict " in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["predict", "--help"])
    assert "--exclude_seen" in capsys.readouterr().out


def test_float64_scores_are_ranked_without_rounding_to_float32():
    """The popularity model scores counts + a tie-break below float32's resolution; the order must survive."""
    scores = torch.full((1, 9), 1000.0, dtype=torch.float64) + torch.arange(9, dtype=torch.float64) * 1e-9
    top = catalogue_topk(FixedScores(scores), torch.zeros(1, 1), 3, chunk_size=4)
    assert top.items[0].tolist() == [8, 7, 6] and top.ranks[0].tolist() == [1, 2, 3]


def test_id_files_are_stripped_as_the_data_is_and_a_truncated_gzip_is_named(tmp_path):
    from seqrec.predict import read_id_columns

    (tmp_path / "users.csv").write_text("user\n alice\nbob \n")
    assert read_id_columns(tmp_path / "users.csv", ["user"])[0]["user"].tolist() == ["alice", "bob"]
    whole = gzip.compress(("user\n" + "\n".join(f"u{i}" for i in range(20_000)) + "\n").encode())
    (tmp_path / "users.csv.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'users.csv.gz'}: cannot be read (")):
        read_id_columns(tmp_path / "users.csv.gz", ["user"])
