"""Benchmark reports: one ``## <title>`` section per benchmark in a shared markdown file, medians with spread.

The one home of the report helpers of the development benchmarks (``benchmarks/``, outside the package) and of
``python -m seqrec repro`` (its hardware line). Several benchmarks (the pipeline benchmark, the LRU speed
benchmark, ...) write into the same ``results/BENCHMARKS.md``; each owns one level-2 section and
``write_section`` replaces only that one.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import platform
import shlex
import stat
import statistics
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

DEFAULT_PREAMBLE = "# Benchmarks\n\nEach section is written by the benchmark named in it; rerun that command to refresh it.\n"


def split_sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """(preamble, [(title, full section text)]) split at level-2 headings outside fenced code blocks."""
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    in_fence = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        if not in_fence and line.startswith("## "):
            sections.append((line[3:].strip(), [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            preamble.append(line)
    return "".join(preamble), [(title, "".join(lines)) for title, lines in sections]


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """Exclusive flock on ``directory`` so two benchmarks finishing together cannot lose each other's update."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _umask() -> int:
    """The process umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_section(path: str | Path, title: str, markdown: str) -> Path:
    """Replace the ``## <title>`` section of ``path`` with ``markdown`` (or append it), keeping every other section.

    ``markdown`` is the section body, without its heading. The file is created (with a short ``# Benchmarks``
    preamble) when missing, and always written atomically (temporary file in the same folder, then
    ``os.replace``) under a lock on the folder, so a reader never sees half a file.
    """
    path = Path(path)
    title = title.strip()
    if not title or "\n" in title:
        raise ValueError(f"a section title must be one non-empty line, got {title!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    body = markdown.strip("\n")
    new_section = f"## {title}\n\n{body}\n" if body else f"## {title}\n"
    with _locked(path.parent):
        text = path.read_text(encoding="utf-8") if path.exists() else DEFAULT_PREAMBLE
        preamble, sections = split_sections(text)
        out: list[str] = []
        replaced = False
        for existing_title, section in sections:
            if existing_title == title:
                if not replaced:  # a duplicate of the same title (hand edits) is dropped
                    out.append(new_section)
                    replaced = True
                continue
            out.append(section)
        if not replaced:
            out.append(new_section)
        pieces = [preamble.rstrip("\n") + "\n"] if preamble.strip() else []
        pieces += [piece.rstrip("\n") + "\n" for piece in out]
        # mkstemp creates 0600: keep the existing file's mode, or give a new one the umask's default.
        mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write("\n".join(pieces))
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return path


def median_and_spread(values: Sequence[float]) -> tuple[float, float, float]:
    """(median, min, max) of the repeated measurements."""
    if len(values) == 0:
        raise ValueError("median_and_spread needs at least one measurement, got none")
    return float(statistics.median(values)), float(min(values)), float(max(values))


def format_spread(values: Sequence[float], digits: int = 0, scale: float = 1.0) -> str:
    """``"median (min–max)"`` of ``values × scale`` with thousands separators; just the median for one value."""
    median, low, high = (v * scale for v in median_and_spread(values))
    fmt = f"{{:,.{digits}f}}"
    if len(values) == 1:
        return fmt.format(median)
    return f"{fmt.format(median)} ({fmt.format(low)}–{fmt.format(high)})"


def median(values: Sequence[float]) -> float:
    """The median of repeated measurements."""
    return median_and_spread(values)[0]


def decimals(value: float, least: int = 1, significant: int = 3) -> int:
    """Decimals that show ``value`` with at least ``significant`` significant digits (and at least ``least``).

    ``max(least, significant - 1 - floor(log10(value)))``; ``least`` for a value that is not positive and finite.
    """
    if value <= 0 or not math.isfinite(value):
        return least
    return max(least, significant - 1 - math.floor(math.log10(value)))


def spread(values: Sequence[float], least: int = 1) -> str:
    """``format_spread`` with enough decimals for three significant digits of the median."""
    return format_spread(values, decimals(median(values), least))


def mib(kb: float) -> str:
    """KiB as whole MiB (``kb / 1024``) with thousands separators."""
    return f"{kb / 1024:,.0f}"


def rss_cell(result: Mapping[str, float]) -> str:
    """``peak (+increase over the child's post-import baseline)`` in MiB, from a forked phase's
    ``rss_peak_kb`` and ``rss_baseline_kb``."""
    return f"{mib(result['rss_peak_kb'])} (+{mib(result['rss_peak_kb'] - result['rss_baseline_kb'])})"


def cpuinfo_fields(cpuinfo: str | None = None) -> dict[str, str]:
    """The first processor's ``key: value`` lines of /proc/cpuinfo (``cpuinfo``: its text), keys lower-cased; {} where
    there is none (not Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return {}
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:
                break  # the first processor's block is enough
            continue
        fields.setdefault(key.strip().lower(), value.strip())
    return fields


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    return cpuinfo_fields().get("model name") or platform.processor() or platform.machine() or "unknown CPU"


def cpu_isa(cpuinfo: str | None = None) -> str:
    """The CPU's family, model and widest vector instructions from /proc/cpuinfo (``cpuinfo``: its text), e.g.
    ``family 25 model 1, AVX2`` or ``family 25 model 17, AVX-512 with bf16``; "" where there is none (not Linux).

    The model name alone does not tell hosts apart: two "AMD EPYC" hosts of this project, one AVX2-only, one with
    AVX-512 and native bf16, ran the same training step 1.7-2.1x apart; this names which one a figure came from.
    """
    from seqrec.models.kernels.build import BF16_FLAGS, cpuinfo_flags  # (imports torch: not at module level)

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return ""
    fields = cpuinfo_fields(cpuinfo)
    flags = set(cpuinfo_flags(cpuinfo) or ())
    if "avx512f" in flags:
        vector = "AVX-512" + (" with bf16" if flags.intersection(BF16_FLAGS) else "")
    else:
        vector = "AVX2" if "avx2" in flags else "no AVX2"
    where = " ".join(f"{k.removeprefix('cpu ')} {fields[k]}" for k in ("cpu family", "model") if k in fields)
    return ", ".join(part for part in (where, vector if flags else "") if part)


def usable_cores() -> int:
    """Cores this process may run on (affinity-aware)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine_description(threads: int | None = None, interop_threads: int | None = None) -> str:
    """One line: CPU model (with ``cpu_isa``), cores, load average, Python, torch version and torch intra/inter-op
    threads.

    ``threads`` / ``interop_threads``: the counts the measured process used (default: this process's).
    """
    import torch

    intra = threads if threads is not None else torch.get_num_threads()
    interop = interop_threads if interop_threads is not None else torch.get_num_interop_threads()
    parts = [
        f"{cpu_model()} [{cpu_isa()}] ({usable_cores()} usable of {os.cpu_count()} cores)",
        f"Python {platform.python_version()}",
        f"torch {torch.__version__}",
        f"{intra} intra-op / {interop} inter-op torch threads",
    ]
    with contextlib.suppress(OSError):
        load1, load5, _ = os.getloadavg()
        parts.append(f"load average {load1:.2f} (1 min), {load5:.2f} (5 min) at start")
    return "; ".join(parts)


SHARED_DATA_ENV = "SEQREC_SHARED_DATA"


def shown_command(module: str, argv: Sequence[str]) -> str:
    """``python -m <module> <argv>`` as a report shows it: shell-quoted, and every path under $SEQREC_SHARED_DATA
    written as ``$SEQREC_SHARED_DATA/...``, so a report never names one machine's copy of the data."""
    shared = os.environ.get(SHARED_DATA_ENV)
    root = str(Path(shared).resolve()) if shared else None

    def show(arg: str) -> str:
        key, sep, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        for prefix in (p for p in {shared.rstrip("/") if shared else None, root} if p):
            if value == prefix or value.startswith(prefix + "/"):
                head, rest = (key + sep if sep else ""), value[len(prefix):]
                return head + "$" + SHARED_DATA_ENV + (shlex.quote(rest) if rest else "")
        return shlex.quote(arg)

    return " ".join(["python", "-m", module, *(show(a) for a in argv)])


def load_average() -> str:
    """The 1, 5 and 15-minute load averages, e.g. '0.52 0.61 0.40' ('n/a' where the system has none)."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"
