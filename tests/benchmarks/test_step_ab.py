"""benchmarks.step_ab: the switches it alternates parse strictly and set what they name."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import step_ab


def test_a_variant_is_plus_joined_switches_and_an_unknown_one_is_refused() -> None:
    assert step_ab.parse_variant("kernels=off+chunk=2048") == {"kernels": "off", "chunk": "2048"}
    for bad in ("kernels", "speed=fast", "kernels=on+"):
        with pytest.raises(SystemExit, match="a switch is one of"):
            step_ab.parse_variant(bad)


def test_switches_set_the_kernels_variable_and_the_tasks_chunk_rows(monkeypatch) -> None:
    monkeypatch.setenv("SEQREC_KERNELS", "1")
    task = SimpleNamespace(ce_chunk_rows="auto")
    step_ab.apply({"kernels": "off", "chunk": "512"}, task)
    import os

    assert os.environ["SEQREC_KERNELS"] == "0" and task.ce_chunk_rows == 512
    step_ab.apply({"kernels": "on", "chunk": "none", "malloc": "off"}, task)
    assert os.environ["SEQREC_KERNELS"] == "1" and task.ce_chunk_rows is None
    step_ab.apply({"chunk": "auto", "malloc": "on"}, task)
    assert task.ce_chunk_rows == "auto"
