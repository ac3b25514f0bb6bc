"""The glibc allocator setting: freed tensors' memory stays in the process for the next step."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

from seqrec.allocator import ENV, keep_freed_memory


def _glibc_with_mallinfo2() -> bool:
    try:
        ctypes.CDLL("libc.so.6").mallinfo2  # noqa: B018
    except (OSError, AttributeError):
        return False
    return True


# after 8 tensors of 8 MiB are freed: the bytes free inside malloc's arena (mallinfo2's fordblks)
PROBE = """
import ctypes, sys
import torch
from seqrec.allocator import keep_freed_memory
class Info(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = Info
print(keep_freed_memory())
tensors = [torch.ones(2 << 20) for _ in range(8)]  # 8 x 8 MiB, touched
del tensors
print(libc.mallinfo2().fordblks)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or not _glibc_with_mallinfo2(),
                    reason="glibc's mallopt and mallinfo2 (Linux, glibc >= 2.33) are needed")
def test_freed_tensors_stay_in_the_heap_with_the_setting_and_are_returned_without_it(monkeypatch):
    def probe(setting: str) -> tuple[str, int]:
        env = {**__import__("os").environ, ENV: setting}
        out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
        flag, free = out.stdout.split()
        return flag, int(free)

    on, off = probe("1"), probe("0")
    assert on[0] == "True" and on[1] >= 48 << 20  # most of the 64 MiB kept for reuse
    assert off[0] == "False" and off[1] < 16 << 20  # glibc's defaults: mmapped, returned when freed


def test_it_can_be_turned_off(monkeypatch):
    monkeypatch.setenv(ENV, "off")
    assert keep_freed_memory() is False
