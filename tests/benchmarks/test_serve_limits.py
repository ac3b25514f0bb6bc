"""Part 3 of the serving benchmark (``benchmarks/serve_limits.py``): the hostile bodies it sends, and its report."""

from __future__ import annotations

import json

from benchmarks.serve_limits import CONTROL, HostileResult, report_lines, shapes

LONG = 1 << 20  # the fault probe's item id: 1 Mi characters (as tests/serve/test_limits.py)


def test_the_benchmarks_hostile_bodies_are_the_largest_the_limits_accept():
    (long_label, long_body, n_long), (short_label, short_body, n_short), (_, probe, _) = shapes(256 * 1024, 512)
    for body, count, length in ((long_body, n_long, 512), (short_body, n_short, 8)):
        items = json.loads(body)["items"]
        assert len(body) <= 256 * 1024 < len(body) + length + 4  # one id more would not fit
        assert len(items) == count and {len(i) for i in items} == {length} and len(set(items)) == count
    assert len(probe) > 256 * 1024 and len(json.loads(probe)["item"]) == LONG


def row(request: str, status: int | None, ratio: float) -> HostileResult:
    return HostileResult(request, 0, 0, status, 1.0, 1.0, 2.0, 1.5, 2.0 * ratio, ratio, None, None)


def test_the_goal_is_judged_on_the_hostile_rows_and_the_control_is_reported_beside_them():
    text = "\n".join(report_lines([row("a", 404, 1.5), row(CONTROL, None, 3.0)], "cmd", "0.1", 256 * 1024, 512))
    assert "**Goal (/health p99 within 2x its idle p99 while the largest request is in flight): met** (worst 1.50x)" in text
    assert "its 3.00x is what a busy CPU alone does" in text and "| – |" in text  # the control has no status
    text = "\n".join(report_lines([row("a", 404, 2.5)], "cmd", "0.1", 256 * 1024, 512))
    assert "NOT met** (worst 2.50x)" in text and "The control row" not in text
