"""The recurrence microbenchmark runs and times every evaluation it names (tiny sizes, no timing asserted)."""

from __future__ import annotations

import pytest

from benchmarks.lru_recurrence import main, recurrence_medians
from seqrec.models.kernels.linear_recurrence import compiled_recurrence


def test_every_case_is_timed(capsys: pytest.CaptureFixture[str]) -> None:
    medians = recurrence_medians(batch=2, length=5, width=3, repeats=2)
    expected = {"torch loop (sequential)", "parallel scan"} | ({"compiled kernel"} if compiled_recurrence() else set())
    assert set(medians) == expected
    assert all(wall > 0 and cpu >= 0 for wall, cpu in medians.values())
    main(["--batch", "2", "--length", "5", "--width", "3", "--repeats", "1"])
    out = capsys.readouterr().out
    assert "load average" in out and all(name in out for name in expected)
