"""The compiled dropout: its Philox4x32-10 stream, its mask mapping, and y = x · keep · scale in one pass."""

from __future__ import annotations

import pytest
import torch

from seqrec.models.kernels.dropout import LEVELS, compiled_dropout, threshold_and_scale

pytestmark = pytest.mark.skipif(compiled_dropout() is None, reason="the C++ kernel does not build here")

MASK32 = 0xFFFFFFFF


def philox4x32_10(counter: tuple[int, int, int, int], key: tuple[int, int]) -> tuple[int, int, int, int]:
    """Philox4x32-10 written from its definition (Salmon et al., SC 2011), as the reference for the kernel."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & MASK32, p1 & MASK32, ((p0 >> 32) ^ c3 ^ k1) & MASK32, p0 & MASK32
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c0, c1, c2, c3


def reference_mask(numel: int, threshold: int, seed: int) -> torch.Tensor:
    """The kernel's documented layout: element j·64 + g of block b reads half (j & 1) of word (j >> 1) of
    Philox((b·64 + g, 0, 0, 0), seed split into two 32-bit keys)."""
    key = (seed & MASK32, seed >> 32)
    keep = []
    for block in range((numel + 511) // 512):
        words = [philox4x32_10((block * 64 + g, 0, 0, 0), key) for g in range(64)]
        keep += [((words[g][j >> 1] >> (16 * (j & 1))) & 0xFFFF) >= threshold for j in range(8) for g in range(64)]
    return torch.tensor(keep[:numel])


@pytest.mark.parametrize(
    ("counter", "key", "expected"),
    [  # the known-answer vectors published with Random123 (kat_vectors: philox4x32 10)
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((MASK32,) * 4, (MASK32, MASK32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ],
)
def test_the_reference_philox_gives_the_published_known_answers(counter, key, expected) -> None:
    assert philox4x32_10(counter, key) == expected


@pytest.mark.parametrize("numel", [1, 511, 512, 1100])
def test_the_kernels_mask_is_the_philox_stream_in_its_documented_layout(numel) -> None:
    seed = 0x0123456789ABCDEF
    threshold, _ = threshold_and_scale(0.3)
    assert torch.equal(compiled_dropout().mask([numel], threshold, seed), reference_mask(numel, threshold, seed))


def test_forward_applies_the_same_mask_and_the_scale_in_float32_and_float64() -> None:
    kernel = compiled_dropout()
    threshold, scale = threshold_and_scale(0.25)
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(3, 7, 129, dtype=dtype)
        y, keep = kernel.forward(x, threshold, scale, 99)
        assert keep.dtype == torch.bool and keep.shape == x.shape
        assert torch.equal(keep, kernel.mask(list(x.shape), threshold, 99))
        assert torch.equal(y, x * keep * torch.tensor(scale, dtype=dtype))
        assert torch.equal(kernel.apply(x, keep, scale), y)
        inplace = x.clone()
        assert kernel.apply_(inplace, keep, scale) is inplace and torch.equal(inplace, y)


def test_the_rate_is_threshold_over_two_to_the_sixteen_and_masks_differ_by_seed() -> None:
    kernel = compiled_dropout()
    threshold, scale = threshold_and_scale(0.2)
    assert threshold == 13107 and scale == pytest.approx(LEVELS / (LEVELS - 13107))
    a, b = kernel.mask([1_000_000], threshold, 1), kernel.mask([1_000_000], threshold, 2)
    # 1e6 draws: the kept share's standard deviation is 4e-4; 5 sigma
    assert a.float().mean().item() == pytest.approx(1 - threshold / LEVELS, abs=2e-3)
    assert (a != b).float().mean().item() == pytest.approx(2 * 0.2 * 0.8, abs=3e-3)  # independent masks
    assert bool(kernel.mask([10], 0, 3).all())  # p = 0 keeps everything


def test_the_mask_does_not_depend_on_the_thread_count() -> None:
    kernel = compiled_dropout()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = kernel.mask([300_001], 20000, 7)
        torch.set_num_threads(2)
        two = kernel.mask([300_001], 20000, 7)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_bad_arguments_are_refused() -> None:
    kernel = compiled_dropout()
    with pytest.raises(RuntimeError, match="threshold"):
        kernel.mask([4], LEVELS, 0)
    with pytest.raises(RuntimeError, match="contiguous"):
        kernel.forward(torch.randn(4, 6).t(), 100, 1.0, 0)
    with pytest.raises(RuntimeError, match="keep"):
        kernel.apply(torch.randn(4), torch.ones(5, dtype=torch.bool), 1.0)
