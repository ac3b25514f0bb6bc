"""BARS/FuxiCTR csv fixtures in the real formats parse; wrong columns are named; real samples; DIN text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from seqrec.data.sources.bars import BARS, DINText

AMAZON_TRAIN = """label,user_id,item_id,cate_id,item_history,cate_history
1,7,A11,c1,A1^A2^A3,c1^c1^c2
0,7,A40,c3,A1^A2^A3,c1^c1^c2
1,7,A3,c2,A1^A2,c1^c1
1,9,A2,c1,A5,c4
0,9,A12,c1,A5,c4
1,9,A6,c4,,
"""
AMAZON_TEST = """label,user_id,item_id,cate_id,item_history,cate_history
1,7,A99,c9,A1^A2^A3^A11,c1^c1^c2^c1
0,9,A2,c1,A5^A2^A777,c4^c1^c9
"""
MICRO_TRAIN = """user_id,item_id,cate_id,clicked_items,clicked_categories,timestamp,is_click
u1,v1,3,v9^v8,1^2,1500,1
u1,v2,3,v9^v8^v1,1^2^3,1400,0
u1,v3,2,v9,1,1300,1
u2,v1,3,v2,3,1700,0
u2,v5,1,v2^v1,3^3,1800,1
"""
MICRO_TEST = """user_id,item_id,cate_id,clicked_items,clicked_categories,timestamp,is_click
u1,v100,3,v9^v8^v1^v3,1^2^3^2,1900,1
u2,v101,3,v2^v1^v5,3^3^1,2000,0
"""


def write(folder: Path, **files: str) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for split, text in files.items():
        (folder / f"{split}.csv").write_text(text)
        out[split] = str(folder / f"{split}.csv")
    return out


def test_amazon_electronics_fixture_parses(tmp_path):
    write(tmp_path / "amz", train=AMAZON_TRAIN, test=AMAZON_TEST)
    source = BARS("AmazonElectronics_x1", root=str(tmp_path / "amz"))
    rows = source.load_rows()
    train, test = rows["train"], rows["test"]
    assert len(train) == 6 and len(test) == 2
    # train vocabulary in first-seen order: A11=1, A1=2, A2=3, A3=4, A40=5, A5=6, A12=7, A6=8; OOV = 9
    assert source.num_items == 9
    assert train.target.tolist() == [1, 5, 4, 3, 7, 8]
    assert train.hist_items[train.hist_indptr[0] : train.hist_indptr[1]].tolist() == [2, 3, 4]
    assert train.hist_indptr[-1] - train.hist_indptr[-2] == 0  # an empty history
    assert test.target.tolist() == [9, 3]  # A99 unseen in train -> OOV
    assert test.hist_items[test.hist_indptr[1] : test.hist_indptr[2]].tolist() == [6, 3, 9]
    assert train.label.tolist() == [1, 0, 1, 1, 0, 1]
    assert train.user.tolist() == [0, 0, 0, 1, 1, 1] and test.user.tolist() == [0, 1]
    # parsed rows come back from the cache identical
    again = BARS("AmazonElectronics_x1", root=str(tmp_path / "amz")).load_rows()
    assert np.array_equal(again["test"].hist_items, test.hist_items)


def test_wrong_columns_are_named(tmp_path):
    write(tmp_path / "kv", train=AMAZON_TRAIN, test=AMAZON_TEST)
    with pytest.raises(ValueError, match="is_click"):
        BARS("KuaiVideo_x1", root=str(tmp_path / "kv")).load_rows()


def test_kuaivideo_fixture_uses_positive_history(tmp_path):
    text = "user_id,item_id,is_click,pos_items,neg_items\n5,10,1,1^2,7^8\n5,11,0,1^2^10,7^8\n"
    write(tmp_path / "kv2", train=text, test=text)
    rows = BARS("KuaiVideo_x1", root=str(tmp_path / "kv2")).load_rows()["train"]
    # first-seen order: 10 -> 1, 1 -> 2, 2 -> 3, 11 -> 4; the neg_items column is not a history
    assert rows.hist_items.tolist() == [2, 3, 2, 3, 1]


def test_real_fuxictr_taobao_samples(shared_data):
    folder = shared_data / "ctr_samples"
    files = {s: str(folder / f"fuxictr_taobao_{s}_sample.csv") for s in ("train", "valid", "test")}
    source = BARS("TaobaoAd_x1", files=files)
    rows = source.load_rows()
    assert {k: len(v) for k, v in rows.items()} == {"train": 100, "valid": 100, "test": 100}
    train = rows["train"]
    # data row 9: clk=1, userid 227368, adgroup 680144, click_sequence 170301^573514^54756
    assert train.label[8] == 1
    assert train.user[8] == train.user[1]  # 227368 again
    history = train.hist_items[train.hist_indptr[8] : train.hist_indptr[9]]
    assert len(history) == 3 and history[0] == train.hist_items[train.hist_indptr[0]]  # 170301 first in row 1 too
    assert train.time[0] == train.time[1] and np.all(np.diff(train.time) >= 0)


def test_real_din_text_sample(shared_data):
    path = str(shared_data / "ctr_samples" / "din_amazon_electronics_sample.txt")
    source = DINText({"train": path, "test": path})
    rows = source.load_rows()["train"]
    assert len(rows) == 100 and int(rows.label.sum()) == 48
    assert rows.hist_indptr[1] == 2 and rows.hist_indptr[5] - rows.hist_indptr[4] == 1  # "3737 19450", "13150"


@pytest.mark.parametrize(("row", "found"), [("1", 1), ("1,7,A11,c1,A1^A2,c1^c1,extra", 7)])
def test_a_short_or_long_row_names_the_file_and_row(tmp_path, row, found):
    write(tmp_path / "amz", train=AMAZON_TRAIN + row + "\n", test=AMAZON_TEST)
    with pytest.raises(ValueError, match=rf"train.csv, row 8: expected 6 comma-separated fields, found {found}"):
        BARS("AmazonElectronics_x1", root=str(tmp_path / "amz")).load_rows()


def test_a_corrupt_downloaded_zip_names_the_archive(tmp_path, monkeypatch):
    import zipfile

    import seqrec.data.sources.bars as bars

    archive = tmp_path / "AmazonElectronics_x1.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("AmazonElectronics_x1/train.csv", AMAZON_TRAIN * 50)
    data = bytearray(archive.read_bytes())
    data[100] ^= 0xFF
    archive.write_bytes(bytes(data))
    monkeypatch.setattr(bars, "fetch", lambda url, dest, **kwargs: archive)
    with pytest.raises(ValueError, match=r"AmazonElectronics_x1.zip is corrupt .*fetch it again"):
        BARS("AmazonElectronics_x1", cache_dir=str(tmp_path / "cache")).load_rows()
