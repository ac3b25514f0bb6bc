"""The global temporal split: nothing at or after the cut reaches training; queries see only their past."""

from pathlib import Path

import numpy as np
import pytest

from seqrec.data.examples import EvalQueries, TrainExamples, training_spans
from seqrec.data.sequences import Sequences
from seqrec.data.sources.movielens import MovieLens100K
from seqrec.data.temporal import TemporalSplit, temporal_split
from seqrec.datamodules.next_item import NextItemDataModule

DAY = 86400.0


def make(seqs: list[list[tuple[int, float]]]) -> Sequences:
    """Sequences from per-user lists of (item, time) already in time order."""
    lengths = [len(s) for s in seqs]
    items = np.array([i for s in seqs for i, _ in s], dtype=np.int64)
    return Sequences(
        indptr=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        items=items,
        times=np.array([t for s in seqs for _, t in s], dtype=np.float64),
        user_ids=np.array([str(u) for u in range(len(seqs))]),
        item_ids=np.array([""] + [str(i) for i in range(1, items.max() + 1)]),
    )


def random_sequences(seed: int = 0, users: int = 50, days: float = 30.0) -> Sequences:
    rng = np.random.default_rng(seed)
    seqs = []
    for _ in range(users):
        n = int(rng.integers(1, 40))
        times = np.sort(np.round(rng.uniform(0, days, n) * 4) / 4 * DAY)  # quarter-day grid: many ties
        seqs.append([(int(rng.integers(1, 60)), float(t)) for t in times])
    return make(seqs)


@pytest.mark.parametrize("train_days", [None, 10.0])
def test_training_spans_are_exactly_the_events_before_the_cut(train_days):
    seqs = random_sequences()
    split = temporal_split(seqs, test_days=3, valid_days=4, train_days=train_days)
    assert split.test_cut == seqs.times.max() - 3 * DAY and split.valid_cut == split.test_cut - 4 * DAY
    in_train = split.train_mask()
    lower = -np.inf if train_days is None else split.valid_cut - train_days * DAY
    expected = (seqs.times < split.valid_cut) & (seqs.times >= lower)
    np.testing.assert_array_equal(in_train, expected)  # nothing at/after the cut, nothing lost before it


def test_queries_fall_in_their_windows_and_see_only_strictly_earlier_events():
    seqs = random_sequences(seed=1)
    split = temporal_split(seqs, test_days=3, valid_days=4)
    users = np.repeat(np.arange(seqs.num_users), seqs.lengths())
    has_past = seqs.times > seqs.times[seqs.indptr[:-1]][users]  # some event of the user strictly earlier
    for examples, low, high in ((split.valid, split.valid_cut, split.test_cut), (split.test, split.test_cut, np.inf)):
        assert len(examples) > 0
        np.testing.assert_array_equal(examples.start, seqs.indptr[examples.user])
        for j in range(len(examples)):
            query_time = seqs.times[examples.stop[j]]  # the history stops at the first event of the query's time
            assert low <= query_time < high
            assert np.all(seqs.times[examples.start[j] : examples.stop[j]] < query_time)
        # every event of the window with some earlier event is a query (no cap), each once
        assert len(examples) == int(np.sum((seqs.times >= low) & (seqs.times < high) & has_past))


def test_history_includes_earlier_window_events_and_excludes_same_time_ties():
    # user 0: two training events, one validation event, then two test events at the same second and one later
    seqs = make([[(1, 0.0), (2, 1 * DAY), (3, 5.5 * DAY), (4, 8.5 * DAY), (5, 8.5 * DAY), (6, 9 * DAY)],
                 [(7, 0.0), (8, 0.5 * DAY), (9, 2 * DAY)]])
    split = temporal_split(seqs, test_days=1, valid_days=3)  # test >= 8 days, valid in [5, 8)
    assert split.train_stop.tolist() == [2, 9] and split.train_start.tolist() == [0, 6]
    assert split.valid.target.tolist() == [3]
    test = EvalQueries(seqs.items, split.test, max_len=5)
    got = [(int(q["target"]), [i for i in q["items"].tolist() if i]) for q in test]
    assert got == [(4, [1, 2, 3]), (5, [1, 2, 3]), (6, [1, 2, 3, 4, 5])]
    by_event = temporal_split(seqs, test_days=1, valid_days=3, history="before_event")
    assert [int(q["target"]) for q in EvalQueries(seqs.items, by_event.test, 5)] == [4, 5, 6]
    assert by_event.test.stop.tolist() == [3, 4, 5]  # item 5 now sees item 4 (same second, earlier in order)


def test_query_cap_keeps_the_first_events_after_the_cut():
    seqs = make([[(i, float(i) * DAY) for i in range(1, 11)]])
    split = temporal_split(seqs, test_days=3.5, valid_days=2, max_queries_per_user=2)
    assert split.test.target.tolist() == [7, 8]
    assert split.valid.target.tolist() == [5, 6]


def test_drop_unseen_targets_and_clear_errors():
    seqs = make([[(1, 0.0), (2, DAY), (3, 2 * DAY), (9, 9 * DAY)], [(1, 0.5 * DAY), (2, 9.5 * DAY)]])
    kept = temporal_split(seqs, test_days=1, valid_days=1)
    assert sorted(kept.test.target.tolist()) == [2, 9]
    dropped = temporal_split(seqs, test_days=1, valid_days=1, drop_unseen_targets=True)
    assert dropped.test.target.tolist() == [2]  # item 9 never occurs before the cut
    with pytest.raises(ValueError, match="no test query"):
        temporal_split(make([[(1, 0.0), (2, DAY)], [(3, 5 * DAY)]]), test_days=0.5, valid_days=1)
    with pytest.raises(ValueError, match="widen"):
        temporal_split(seqs, test_days=9, valid_days=1)
    unsorted = make([[(1, 2 * DAY), (2, DAY), (3, 3 * DAY)]])
    with pytest.raises(ValueError, match="out of time order"):
        temporal_split(unsorted, test_days=1, valid_days=0.5)


def write_leak_fixture(root: Path, users: int = 40, seed: int = 0) -> tuple[Path, float]:
    """ML-100k ``u.data`` where every event at or after the validation cut rates a "future" movie (ids 101..140).

    Returns the folder and the cut time. Some events sit exactly on the cut.
    """
    rng = np.random.default_rng(seed)
    end = 900_000_000.0
    valid_cut = end - 5 * DAY  # test_days=2 + valid_days=3
    lines = []
    for user in range(1, users + 1):
        past = np.sort(rng.uniform(end - 40 * DAY, valid_cut, 25))
        future = np.sort(rng.uniform(valid_cut, end, 6))
        if user % 5 == 0:
            future[0] = valid_cut  # exactly on the cut: must count as after it
        items_past = rng.permutation(100)[:25] + 1
        items_future = rng.permutation(40)[:6] + 101
        for t, i in zip(past, items_past):
            lines.append(f"{user}\t{i}\t4\t{int(t)}")
        for t, i in zip(future, items_future):
            lines.append(f"{user}\t{i}\t4\t{int(t)}")
    lines.append(f"1\t140\t4\t{int(end)}")  # the log's last event fixes max(time)
    root.mkdir(parents=True, exist_ok=True)
    (root / "u.data").write_text("\n".join(lines) + "\n")
    items = [f"{i}|Movie {i} (1995)|01-Jan-1995||http://x/{i}|" + "|".join(["0"] * 19) for i in range(1, 141)]
    (root / "u.item").write_bytes(("\n".join(items) + "\n").encode("latin-1"))
    return root, valid_cut


@pytest.mark.parametrize("train_mode", ["windows", "prefix"])
def test_no_training_tensor_ever_holds_an_event_at_or_after_the_cut(tmp_path, train_mode):
    root, valid_cut = write_leak_fixture(tmp_path / "ml")
    data = NextItemDataModule(
        MovieLens100K(root=str(root)), max_len=8, split="temporal",
        temporal=TemporalSplit(test_days=2, valid_days=3), train_mode=train_mode, batch_size=16,
    )
    data.setup()
    raw = data.sequences.item_ids.astype(object)
    future = {i for i in range(1, len(raw)) if int(raw[i]) > 100}
    assert len(future) == 40
    seen = set()
    for batch in data.train_dataloader():
        for key in ("items", "labels"):
            seen |= set(batch[key].unique().tolist())
    assert seen & future == set()
    assert len(seen - {0}) == 100  # every past movie is used
    # and the evaluation targets are exactly the future events, each query's history ends before it
    split = data.split
    assert split.valid_cut == valid_cut
    targets = set(split.valid.target.tolist()) | set(split.test.target.tolist())
    assert targets <= future
    for examples in (split.valid, split.test):
        times = data.sequences.times
        assert np.all(times[examples.stop - 1] < times[examples.stop])
    start, stop = training_spans(split, 8, train_mode, 8)
    assert np.all(data.sequences.times[stop - 1] < valid_cut)
    assert len(TrainExamples(data.sequences.items, start, stop, 8, train_mode)) == len(data.datasets["train"])


def test_leave_last_out_stays_the_default():
    assert NextItemDataModule.__init__.__defaults__ is not None
    data = NextItemDataModule(MovieLens100K(root="/nonexistent"))
    assert data.split_kind == "leave_last_out"
    with pytest.raises(ValueError, match="split must be"):
        NextItemDataModule(MovieLens100K(root="/nonexistent"), split="random")  # type: ignore[arg-type]


def write_ratings_dat(root: Path, users: int = 50, num_items: int = 60, length: int = 40, seed: int = 0) -> Path:
    """GroupLens ML-1M ``ratings.dat`` / ``movies.dat`` (``::``-separated) where users walk a ring of movies."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    lines = []
    for user in range(1, users + 1):
        item, t = int(rng.integers(num_items)), 970_000_000 + int(rng.integers(20 * DAY))
        for _ in range(length):
            t += int(rng.integers(1, DAY // 2))
            lines.append(f"{user}::{item + 1}::{int(rng.integers(1, 6))}::{t}")
            item = (item + 1) % num_items if rng.random() < 0.9 else int(rng.integers(num_items))
    (root / "ratings.dat").write_text("\n".join(lines) + "\n")
    movies = [f"{i}::Movie {i} (1999)::Drama|Comedy" for i in range(1, num_items + 1)]
    (root / "movies.dat").write_bytes(("\n".join(movies) + "\n").encode("latin-1"))
    return root


def test_shipped_ml1m_config_runs_end_to_end_on_a_ratings_dat_fixture(tmp_path):
    from seqrec.fit import main

    root = write_ratings_dat(tmp_path / "ml-1m")
    results = main([
        "--config", "evornn_ml1m.yaml",
        "--data.init_args.source.init_args.root", str(root),
        "--data.init_args.max_len", "10",
        "--data.init_args.temporal.test_days", "4", "--data.init_args.temporal.valid_days", "2",
        "--model.init_args.model.init_args.d_model", "16", "--model.init_args.model.init_args.hidden_sizes", "[16]",
        "--model.init_args.lr", "0.01",
        "--trainer.max_epochs", "4", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.default_root_dir", str(tmp_path / "runs"),
        "--macs.backend", "flop_counter", "--threads", "1",
    ])
    # the users mostly step to the next movie: the recurrent model must rank it near the top (60 movies, at most
    # 10 masked as history: the popularity baseline scores MAP@20 0.08 on this fixture, this run 0.37)
    assert results["test/map@20"] > 0.3 and results["test/hr@10"] > 0.6
    assert results["cost/macs_hand_per_sequence"] == results["cost/macs_per_sequence"]
