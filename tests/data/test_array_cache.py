import json

import numpy as np
import pytest

from seqrec.data.array_cache import load_arrays, save_arrays


def test_roundtrip_with_meta_and_strings(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(5), "s": np.array(["", "x"], dtype=object)}, {"seed": 3})
    arrays, meta = load_arrays(tmp_path / "c")
    assert arrays["a"].tolist() == [0, 1, 2, 3, 4] and arrays["s"].tolist() == ["", "x"] and meta == {"seed": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["c"]  # no temporary directory left behind


def test_other_format_version_is_rejected(tmp_path):
    save_arrays(tmp_path / "c", {"a": np.arange(3)})
    manifest = tmp_path / "c" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "version": 99}))
    with pytest.raises(ValueError, match="format 99"):
        load_arrays(tmp_path / "c")
