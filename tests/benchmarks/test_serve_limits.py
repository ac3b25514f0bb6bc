"""Part 3 of the serving benchmark (``benchmarks/serve_limits.py``): the hostile bodies it sends."""

from __future__ import annotations

import json

from benchmarks.serve_limits import shapes

LONG = 1 << 20  # the fault probe's item id: 1 Mi characters (as tests/serve/test_limits.py)


def test_the_benchmarks_hostile_bodies_are_the_largest_the_limits_accept():
    (long_label, long_body, n_long), (short_label, short_body, n_short), (_, probe, _) = shapes(256 * 1024, 512)
    for body, count, length in ((long_body, n_long, 512), (short_body, n_short, 8)):
        items = json.loads(body)["items"]
        assert len(body) <= 256 * 1024 < len(body) + length + 4  # one id more would not fit
        assert len(items) == count and {len(i) for i in items} == {length} and len(set(items)) == count
    assert len(probe) > 256 * 1024 and len(json.loads(probe)["item"]) == LONG
