"""Building the C++ kernels: the cache key, SEQREC_KERNELS=0, and one warning line when no build is possible."""

from __future__ import annotations

import warnings

import pytest
import torch

from seqrec.models.kernels import build
from seqrec.models.kernels.linear_recurrence import compiled_recurrence
from seqrec.models.next_item.lru import LRURec, sequential_scan


@pytest.fixture
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty per-process cache of loaded kernels, so load_kernel decides again."""
    monkeypatch.setattr(build, "_loaded", {})


@pytest.mark.parametrize("value", ["0", "false", "OFF", "no"])
def test_seqrec_kernels_0_turns_the_kernel_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("SEQREC_KERNELS", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # turned off on purpose: no warning
        assert compiled_recurrence() is None


def test_the_eager_path_runs_when_kernels_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model = LRURec(30, d_model=8, scan="kernel").eval()
    items = torch.randint(0, 31, (3, 9))
    expected = model(items)
    monkeypatch.setenv("SEQREC_KERNELS", "0")
    torch.testing.assert_close(model(items), expected, rtol=1e-5, atol=1e-5)
    u = torch.randn(2, 5, 4, dtype=torch.complex64)
    log_lambda = torch.complex(-torch.rand(4), torch.rand(4))
    torch.testing.assert_close(sequential_scan(log_lambda, u, compiled=True), sequential_scan(log_lambda, u))


def _one_warning(record: list[warnings.WarningMessage]) -> str:
    assert len(record) == 1, [str(w.message) for w in record]
    message = str(record[0].message)
    assert "\n" not in message and "eager" in message
    return message


def test_no_ninja_falls_back_with_one_warning(monkeypatch: pytest.MonkeyPatch, fresh_cache: None) -> None:
    monkeypatch.setattr("torch.utils.cpp_extension.is_ninja_available", lambda: False)
    with pytest.warns(UserWarning) as record:
        assert build.load_kernel("linear_recurrence") is None
    assert "pip install ninja" in _one_warning(record)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # decided once per process: no second warning
        assert build.load_kernel("linear_recurrence") is None


def test_no_compiler_falls_back_with_one_warning(monkeypatch: pytest.MonkeyPatch, fresh_cache: None) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-t19")
    with pytest.warns(UserWarning) as record:
        assert build.load_kernel("linear_recurrence") is None
    assert "no-such-compiler-t19" in _one_warning(record)


def test_a_failed_build_falls_back_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, fresh_cache: None, tmp_path
) -> None:
    (tmp_path / "broken.cpp").write_text("this is not C++\n")
    monkeypatch.setattr(build, "KERNELS_DIR", tmp_path)
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "cache"))
    if build._missing_tool() is not None:
        pytest.skip("no toolchain: the build is never attempted")
    with pytest.warns(UserWarning) as record:
        assert build.load_kernel("broken") is None
    assert "the build failed" in _one_warning(record)


def test_the_cache_key_holds_the_cpu_flags_and_the_source(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """-march=native code is never reused on another CPU, nor after the source changed."""
    source = tmp_path / "k.cpp"
    source.write_text("// kernel\n")
    name = build.build_name("k", source)
    assert name.startswith("seqrec_k_") and name == build.build_name("k", source)
    monkeypatch.setattr(build, "cpu_flags", lambda: "sse2 only")
    other_cpu = build.build_name("k", source)
    source.write_text("// kernel, changed\n")
    assert len({name, other_cpu, build.build_name("k", source)}) == 3


def test_a_stale_build_lock_is_removed_and_a_fresh_one_kept(monkeypatch: pytest.MonkeyPatch, tmp_path, capsys) -> None:
    """torch's build lock left by a killed build would make every later load wait forever."""
    import os
    import time

    from seqrec.models.kernels.build import STALE_LOCK_SECONDS, build_directory

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    lock = tmp_path / "seqrec_x" / "lock"
    lock.parent.mkdir()
    lock.touch()
    assert build_directory("seqrec_x") == lock.parent and lock.exists()  # a build may be running: kept
    old = time.time() - STALE_LOCK_SECONDS - 5
    os.utime(lock, (old, old))
    build_directory("seqrec_x")
    assert not lock.exists() and "removed the stale build lock" in capsys.readouterr().err
