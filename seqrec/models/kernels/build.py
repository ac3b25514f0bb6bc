"""Build and load a C++ kernel from this folder with ``torch.utils.cpp_extension.load``, once per process.

The build lands in ``$TORCH_EXTENSIONS_DIR`` (torch's default, ``~/.cache/torch_extensions/...``, when unset)
under a name keyed by the source, the torch and Python versions and the CPU's instruction-set flags, because
it is compiled with ``-march=native``: a cache shared between machines never hands one CPU code built for
another. ``SEQREC_KERNELS=0`` (or ``false``/``off``/``no``) turns every kernel off; without a C++ compiler or
ninja, or when the build fails, ``load_kernel`` returns None after one warning line that says what to do.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import sys
import time
import warnings
from pathlib import Path
from types import ModuleType

import torch

KERNELS_DIR = Path(__file__).resolve().parent
OFF_VALUES = ("0", "false", "off", "no")

_loaded: dict[str, ModuleType | None] = {}


def kernels_enabled() -> bool:
    """False when the environment variable SEQREC_KERNELS is 0/false/off/no (the eager paths then run)."""
    return os.environ.get("SEQREC_KERNELS", "1").strip().lower() not in OFF_VALUES


BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # x86 flags of native bf16 products (/proc/cpuinfo)


def cpuinfo_flags(cpuinfo: str | None = None) -> list[str] | None:
    """The first ``flags`` (x86) or ``Features`` (Arm) line of /proc/cpuinfo (``cpuinfo``: its text), sorted; None
    without one (another OS)."""
    try:
        text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return sorted(line.split(":", 1)[1].split())
    return None


def cpu_flags() -> str:
    """The CPU's instruction-set description: the ``flags`` line of /proc/cpuinfo, else the platform names."""
    flags = cpuinfo_flags()
    return " ".join(flags) if flags is not None else f"{platform.machine()} {platform.processor()}"


def compiler_flags() -> list[str]:
    """-O3 with OpenMP and the host's vector units (-march=native on x86-64; MSVC: /O2 /openmp)."""
    if sys.platform == "win32":
        return ["/O2", "/openmp"]
    flags = ["-O3"]
    if sys.platform != "darwin":  # Apple clang has no -fopenmp without libomp: the kernel then runs on one thread
        flags.append("-fopenmp")
    if platform.machine().lower() in ("x86_64", "amd64"):
        flags.append("-march=native")
    return flags


def build_name(stem: str, source: Path) -> str:
    """Extension name ``seqrec_<stem>_<hash>``; the hash covers source, flags, torch, Python and CPU flags."""
    key = "\n".join([source.read_text(), " ".join(compiler_flags()), torch.__version__, sys.version, cpu_flags()])
    return f"seqrec_{stem}_{hashlib.sha256(key.encode()).hexdigest()[:12]}"


STALE_LOCK_SECONDS = 600.0  # a build takes 1-3 minutes; a lock this old was left by a killed build


def build_directory(name: str) -> Path:
    """``$TORCH_EXTENSIONS_DIR/<name>`` (else ``~/.cache/torch_extensions/<name>``), created, with a stale lock gone.

    torch's ``load`` serialises builds with a ``lock`` file that a process killed mid-build leaves behind, and
    every later ``load`` then waits for it forever: a lock older than any build is removed (with one line).
    """
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or str(Path.home() / ".cache" / "torch_extensions")
    directory = Path(root) / name
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / "lock"
    try:
        if time.time() - lock.stat().st_mtime > STALE_LOCK_SECONDS:
            lock.unlink()
            print(f"seqrec: removed the stale build lock {lock} (a build was interrupted)", file=sys.stderr)
    except FileNotFoundError:
        pass
    return directory


def _missing_tool() -> str | None:
    """What the build lacks (ninja, a C++ compiler), or None."""
    from torch.utils.cpp_extension import is_ninja_available

    if not is_ninja_available():
        return "ninja is not installed (pip install ninja)"
    compiler = os.environ.get("CXX", "cl" if sys.platform == "win32" else "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler {compiler!r} on PATH (install g++ or clang, or set CXX)"
    return None


def load_kernel(stem: str) -> ModuleType | None:
    """The compiled module of ``<stem>.cpp`` in this folder, or None (kernels off, or no build: one warning)."""
    if not kernels_enabled():
        return None
    if stem in _loaded:
        return _loaded[stem]
    module = None
    source = KERNELS_DIR / f"{stem}.cpp"
    missing = _missing_tool()
    if missing is not None:
        reason = missing
    else:
        try:
            from torch.utils.cpp_extension import load

            flags = compiler_flags()
            name = build_name(stem, source)
            directory = build_directory(name)
            if not (directory / f"{name}.so").is_file():
                print(f"seqrec: compiling the {stem} kernel for this CPU (first use only, about a minute)",
                      file=sys.stderr, flush=True)
            module = load(name=name, sources=[str(source)], extra_cflags=flags, build_directory=str(directory),
                          extra_ldflags=[f for f in flags if "openmp" in f], verbose=False)
        except Exception as error:  # noqa: BLE001 (any build or import failure means: use the eager path)
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            reason = f"the build failed ({first[:200]})"
    if module is None:
        warnings.warn(f"seqrec: the compiled {stem} kernel is unavailable, {reason}; running the eager torch "
                      "path (same results, slower; set SEQREC_KERNELS=0 to silence this)", stacklevel=2)
    _loaded[stem] = module
    return module
