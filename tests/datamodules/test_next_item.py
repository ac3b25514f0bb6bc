"""NextItemDataModule: frozen sampled candidates, the temporal split end to end (no future event in training),
item features reaching the model's tables, clear errors."""

import dataclasses
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from seqrec.data.examples import TrainExamples, left_pad, training_spans
from seqrec.data.features import SourceItemFeatures
from seqrec.data.preprocess import Preprocessing
from seqrec.data.sources.movielens import ML100K_GENRES, MovieLens100K
from seqrec.data.temporal import TemporalSplit
from seqrec.datamodules.next_item import DEFAULT_TEMPORAL, NextItemDataModule
from tests.data.test_features import decode

DAY = 86400.0


def test_missing_raw_files_name_what_to_do(tmp_path):
    data = NextItemDataModule(source=MovieLens100K(root=str(tmp_path / "nowhere"), allow_fallback=False))
    with pytest.raises((FileNotFoundError, OSError)) as error:
        data.prepare_data()
    assert "u.data" in str(error.value) or "ml-100k" in str(error.value)


def test_sampled_candidates_are_frozen_and_exclude_history(ml100k_root):
    def build():
        data = NextItemDataModule(source=MovieLens100K(root=str(ml100k_root)), max_len=10, eval_negatives=5,
                                  negative_sampler="popularity")
        data.setup("fit")
        return data

    a, b = build(), build()
    test_a, test_b = a.datasets["test"], b.datasets["test"]
    assert np.array_equal(test_a.negatives, test_b.negatives)
    seqs = a.sequences
    for j, user in enumerate(test_a.examples.user):
        assert not set(test_a.negatives[j]) & set(seqs.sequence(user).tolist())
    assert not np.array_equal(a.datasets["valid"].negatives, test_a.negatives)


# --- the temporal split through the datamodule -------------------------------------------------------


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


@pytest.mark.parametrize("train_mode", ["windows", "prefix", "cloze"])
def test_no_training_tensor_ever_holds_an_event_at_or_after_the_cut(tmp_path, train_mode):
    root, valid_cut = write_leak_fixture(tmp_path / "ml")
    data = NextItemDataModule(
        MovieLens100K(root=str(root)), max_len=8, split="temporal",
        temporal=TemporalSplit(test_days=2, valid_days=3), train_mode=train_mode, batch_size=16,
        mask_replacement="mask",  # cloze: no random replacement item (any catalogue item, the future ones too)
    )
    data.setup()
    raw = data.sequences.item_ids.astype(object)
    future = {i for i in range(1, len(raw)) if int(raw[i]) > 100}
    assert len(future) == 40
    seen = set()
    for batch in data.train_dataloader():
        for key in ("items", "labels"):
            seen |= set(batch[key].unique().tolist())
    seen -= {data.num_items + 1} if train_mode == "cloze" else set()  # the [mask] token
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


def test_leave_last_out_stays_the_default_and_the_temporal_default_is_a_valid_frozen_split(tmp_path):
    parameters = inspect.signature(NextItemDataModule).parameters
    assert parameters["split"].default == "leave_last_out"
    assert parameters["temporal"].default is DEFAULT_TEMPORAL == TemporalSplit()
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULT_TEMPORAL.test_days = 9.0  # type: ignore[misc]  # a shared default that nobody can alter
    data = NextItemDataModule(MovieLens100K(root="/nonexistent"))
    assert data.split_kind == "leave_last_out"
    with pytest.raises(ValueError, match="split must be"):
        NextItemDataModule(MovieLens100K(root="/nonexistent"), split="random")  # type: ignore[arg-type]
    # split="temporal" with the default options: test = the final 2 days, validation the 2 before, train the rest
    root, _ = write_leak_fixture(tmp_path / "ml")
    data = NextItemDataModule(MovieLens100K(root=str(root)), max_len=8, split="temporal")
    split, times = data.split, data.sequences.times
    assert split.test_cut == times.max() - 2 * DAY and split.valid_cut == times.max() - 4 * DAY
    np.testing.assert_array_equal(split.train_mask(), times < split.valid_cut)
    assert len(split.valid) > 0 and len(split.test) > 0
    assert np.all(times[split.test.stop] >= split.test_cut) and np.all(times[split.valid.stop] < split.test_cut)


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
        "--model.net.d_model", "16", "--model.net.hidden_sizes", "[16]",
        "--model.init_args.lr", "0.01",
        "--trainer.max_epochs", "4", "--trainer.enable_progress_bar", "false",
        "--trainer.logger.init_args.save_dir", str(tmp_path / "runs"), "--trainer.default_root_dir", str(tmp_path / "runs"),
        "--macs.backend", "flop_counter", "--threads", "1",
    ])
    # the users mostly step to the next movie: the recurrent model must rank it near the top (60 movies, at most
    # 10 masked as history: the popularity baseline scores MAP@20 0.08 on this fixture, this run 0.37)
    assert results["test/map@20"] > 0.3 and results["test/hr@10"] > 0.6
    assert results["cost/macs_hand_per_sequence"] == results["cost/macs_per_sequence"]


# --- item features through the datamodule -----------------------------------------------------------


def ml100k_datamodule(root: Path, features=None, **kw) -> NextItemDataModule:
    return NextItemDataModule(
        MovieLens100K(root=str(root)),
        preprocessing=Preprocessing(min_item_interactions=5, min_user_interactions=5, kcore="iterative"),
        max_len=20, train_mode="prefix", eval_negatives=10, negative_sampler="popularity", features=features, **kw,
    )


def test_datamodule_tables_match_the_raw_u_item(ml100k_root, isolated_cache):
    dm = ml100k_datamodule(ml100k_root, SourceItemFeatures())
    f = dm.item_features
    assert f is not None and f.names == ["genres", "title", "year"]
    lines = (ml100k_root / "u.item").read_bytes().decode("latin-1").splitlines()
    by_id = {line.split("|")[0]: line.split("|") for line in lines}
    years = []
    for i in range(1, dm.num_items + 1):
        fields = by_id[dm.sequences.item_ids[i]]  # the raw u.item line of remapped item i
        flags = fields[5:]
        assert decode(f, "genres", i) == [g for g, flag in zip(ML100K_GENRES, flags) if flag == "1"]
        assert decode(f, "title", i) == fields[1].rsplit(" (", 1)[0].split()  # "Movie 7 (1997)" -> Movie, 7
        years.append(int(fields[1][-5:-1]))
    years = np.array(years, dtype=float)
    expected = (years - years.min()) / (years.max() - years.min())
    assert f.tables["year"][1:] == pytest.approx(expected)
    for name in f.names:
        assert not np.any(f.tables[name][0])
    assert dm.item_feature_spec == f.spec()
    tables = dm.item_feature_tables()
    assert tables["title"].dtype == torch.int64 and tables["year"].dtype == torch.float32
    assert tables["genres"].shape[0] == dm.num_items + 1
    # built once, cached on disk; a new datamodule reads the same tables back
    cached = list((isolated_cache / "features").iterdir())
    assert len(cached) == 1
    again = ml100k_datamodule(ml100k_root, SourceItemFeatures()).item_features
    assert again is not None and all(np.array_equal(again.tables[n], f.tables[n]) for n in f.names)


def test_features_are_opt_in(ml100k_root):
    dm = ml100k_datamodule(ml100k_root)
    assert dm.item_features is None and dm.item_feature_spec == [] and dm.item_feature_tables() == {}
    dm.setup("fit")
    assert set(dm.datasets["train"][0]) == {"items", "labels"}  # batches carry item ids only


def test_memory_mapped_sequences_give_the_same_batches(ml100k_root):
    from seqrec.data.sources.movielens import MovieLens100K

    plain = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10)
    mapped = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, mmap_sequences=True)
    for data in (plain, mapped):
        data.prepare_data()
        data.setup("fit")
    import numpy as np

    assert isinstance(mapped.sequences.items, np.memmap) and not mapped.sequences.items.flags.writeable
    for name in ("train", "valid", "test"):
        a, b = plain.datasets[name], mapped.datasets[name]
        assert len(a) == len(b)
        for i in (0, len(a) // 2, len(a) - 1):
            for key, value in a[i].items():
                assert (value == b[i][key]).all(), (name, i, key)


def test_cloze_mode_masks_whole_windows_and_queries_leave_a_slot_for_the_mask(ml100k_root):
    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, train_mode="cloze", mask_prob=0.3,
                              batch_size=16)
    data.setup()
    assert data.history_len == 9
    split, items = data.split, data.sequences.items
    start, stop = training_spans(split, 10, "cloze", 10)
    train = data.datasets["train"]
    assert len(train) == len(start) >= len(training_spans(split, 10, "windows", 10)[0])  # one-event spans kept
    example = train[(7, 0)]
    window = items[start[0]:stop[0]][-10:]  # the span itself, not shifted: the masked positions are the targets
    labelled = example["labels"].numpy() > 0
    padded = left_pad(window, 10)
    assert labelled.any() and (example["labels"].numpy()[labelled] == padded[labelled]).all()
    query = data.datasets["test"][0]
    assert query["items"].shape == (9,)  # max_len - 1 events; the model appends [mask]
    index = int(query["index"])
    assert query["items"].tolist() == left_pad(items[split.test.start[index]:split.test.stop[index]], 9).tolist()


def test_cloze_batches_resume_mid_epoch_exactly(ml100k_root, monkeypatch):
    """Masks and order come from (seed + epoch, example): a resumed epoch yields exactly the remaining batches."""
    monkeypatch.setenv("PL_GLOBAL_SEED", "3")
    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, train_mode="cloze", batch_size=8)
    data.setup()
    loader = data.train_dataloader()
    loader.sampler.set_epoch(2)
    whole = list(loader)
    resumed = data.train_dataloader()
    resumed.load_state_dict({"epoch": 2, "batches": 3})
    rest = list(resumed)
    assert len(rest) == len(whole) - 3
    for a, b in zip(whole[3:], rest, strict=True):
        assert torch.equal(a["items"], b["items"]) and torch.equal(a["labels"], b["labels"])
    loader.sampler.set_epoch(3)
    assert not torch.equal(next(iter(loader))["labels"], whole[0]["labels"])  # each epoch masks afresh
    with pytest.raises(ValueError, match="mask_prob"):
        NextItemDataModule(MovieLens100K(root=str(ml100k_root)), train_mode="cloze", mask_prob=0.0)


def test_cloze_mode_passes_the_last_item_share_to_its_examples(ml100k_root):
    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, train_mode="cloze",
                              mask_last_prob=1.0)
    data.setup()
    example = data.datasets["train"][(3, 5)]
    labels = example["labels"].numpy()
    assert (labels[:-1] == 0).all() and labels[-1] > 0 and int(example["items"][-1]) == data.num_items + 1
    with pytest.raises(ValueError, match="mask_last_prob"):
        NextItemDataModule(MovieLens100K(root=str(ml100k_root)), train_mode="cloze", mask_last_prob=2.0)


def test_cloze_mode_passes_the_fixed_mask_count_to_its_examples(ml100k_root):
    data = NextItemDataModule(MovieLens100K(root=str(ml100k_root)), max_len=10, train_mode="cloze", mask_prob=0.2,
                              mask_count="fixed")
    data.setup()
    train = data.datasets["train"]
    for index in range(0, len(train), max(1, len(train) // 50)):
        example = train[(3, index)]
        n = int((example["items"] > 0).sum())
        assert int((example["labels"] > 0).sum()) == max(1, int(np.floor(n * 0.2 + 0.5)))
    with pytest.raises(ValueError, match="mask_count"):
        NextItemDataModule(MovieLens100K(root=str(ml100k_root)), train_mode="cloze", mask_count="all")
