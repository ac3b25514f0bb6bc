import numpy as np
import pytest

from seqrec.data.sequences import Sequences


def small() -> Sequences:
    return Sequences(
        indptr=np.array([0, 2, 5]),
        items=np.array([1, 2, 3, 1, 2]),
        times=np.arange(5, dtype=np.float64),
        user_ids=np.array(["a", "b"]),
        item_ids=np.array(["", "x", "y", "z"]),
    )


def test_roundtrip_and_no_temporary_left(tmp_path):
    seqs = small()
    seqs.save(tmp_path / "entry")
    back = Sequences.load(tmp_path / "entry")
    assert np.array_equal(back.items, seqs.items) and list(back.item_ids) == list(seqs.item_ids)
    assert [p.name for p in tmp_path.iterdir()] == ["entry"]


def test_corruption_is_detected(tmp_path):
    small().save(tmp_path / "entry")
    path = tmp_path / "entry" / "items.npy"
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match its manifest"):
        Sequences.load(tmp_path / "entry")


def test_validate_rejects_out_of_range_items():
    seqs = small()
    seqs.items[0] = 9
    with pytest.raises(ValueError, match="item ids must lie in 1..3"):
        seqs.validate()


def test_raw_id_lookup_compares_at_the_catalogues_width_never_the_keys():
    """A long key is unknown without widening the sorted ids to its width (10k characters x 3,000 ids: 120 MB)."""
    import tracemalloc

    from seqrec.data.sequences import RawIdIndex

    index = RawIdIndex(np.array([""] + [f"item{i}" for i in range(1, 3001)] + ["17"]))
    assert index.lookup(["item7", 17, "17", "item3000", "nope", "item30000"]).tolist() == [7, 3001, 3001, 3000, -1, -1]
    assert index.lookup(np.array(["item300", "item3000x"])).tolist() == [300, -1]
    assert index.lookup(np.array([17, 5])).tolist() == [3001, -1]
    tracemalloc.start()
    try:
        assert index.lookup(np.array(["x" * 10_000, "item5"], dtype=object)).tolist() == [-1, 5]
        assert index.lookup(np.array(["y" * 10_000, "item6"])).tolist() == [-1, 6]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, f"a 10k-character key allocated {peak:,} bytes"
