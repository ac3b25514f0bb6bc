"""What every benchmark shares: each phase in a forked child (its own peak RSS), and a timed training step.

Why a forked child per phase: ``ru_maxrss`` is a process-lifetime high-water mark, so in one process a phase's
peak would hide every later, smaller one. A child forked from the parent (which has imported torch, Lightning
and seqrec and holds nothing else) starts at the parent's RSS and ends at the phase's own peak, without paying
the imports again.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch


def peak_rss_kb() -> int:
    """Peak resident set size of this process so far, KiB (``ru_maxrss`` is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak


def run_forked(phase: Callable[[dict[str, Any]], dict[str, Any]], spec: dict[str, Any]) -> dict[str, Any]:
    """``phase(spec)`` in a forked child; its JSON result plus ``peak_rss_mib``, or RuntimeError with its traceback.

    The child sets torch's intra-op threads to ``spec["threads"]`` when given; ``spec.get("label")`` names the
    phase in the error.
    """
    if not hasattr(os, "fork"):
        raise RuntimeError("the benchmarks run each phase in a forked process; this platform has no os.fork")
    with tempfile.TemporaryDirectory(prefix="seqrec-bench-") as tmp:
        out_path, error_path = Path(tmp) / "out.json", Path(tmp) / "error.txt"
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the caller (nor into pytest)
            code = 1
            try:
                if spec.get("threads"):
                    torch.set_num_threads(int(spec["threads"]))
                result = phase(spec)
                result.setdefault("peak_rss_mib", peak_rss_kb() / 1024)
                out_path.write_text(json.dumps(result))
                code = 0
            except BaseException:
                error_path.write_text(traceback.format_exc())
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if status != 0 or not out_path.exists():
            detail = error_path.read_text() if error_path.exists() else f"no traceback (wait status {status}: killed?)"
            raise RuntimeError(f"benchmark phase {phase.__name__} ({spec.get('label', '')}) failed:\n{detail}")
        return json.loads(out_path.read_text())


def single_optimizer(task: Any) -> torch.optim.Optimizer:
    """The one optimiser of ``task.configure_optimizers()`` (plain, list or dict form)."""
    configured = task.configure_optimizers()
    if isinstance(configured, dict):
        configured = configured["optimizer"]
    if isinstance(configured, (list, tuple)):
        configured = configured[0]
        if isinstance(configured, (list, tuple)):
            configured = configured[0]
    if configured is None:
        raise ValueError("the task's configure_optimizers returned None: a parameter-free model has no training step to time")
    return configured


def training_step(
    task: Any,
    optimizer: torch.optim.Optimizer,
    clip: float | None = None,
    clip_by_value: bool = False,
    context: Callable[[], AbstractContextManager] = nullcontext,
) -> Callable[[dict[str, Any]], None]:
    """One optimiser step on a batch as the Trainer runs it: zero grads, ``training_step`` inside ``context``
    (e.g. the precision plugin's autocast), backward, the config's gradient clipping, ``optimizer.step()``."""
    params = [p for p in task.parameters() if p.requires_grad]

    def step(batch: dict[str, Any]) -> None:
        optimizer.zero_grad(set_to_none=True)
        with context():
            loss = task.training_step(batch, 0)
        loss.backward()
        if clip:
            if clip_by_value:
                torch.nn.utils.clip_grad_value_(params, clip)
            else:
                torch.nn.utils.clip_grad_norm_(params, clip)
        optimizer.step()

    return step
