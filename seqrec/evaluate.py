"""``python -m seqrec test --config X.yaml --ckpt_path PATH``: test a checkpoint under a config.

The run is built exactly as ``fit`` builds it (same data, split, frozen negatives and metrics), the
checkpoint's weights are loaded by ``Trainer.test`` and the metrics are written to ``test_metrics.json`` in
the new run directory.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from seqrec.atomic import write_json
from seqrec.build import build

log = logging.getLogger("seqrec.evaluate")


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Build the run, test ``--ckpt_path`` (required for trained models), write and return the metrics."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    run = build(list(sys.argv[1:] if argv is None else argv))
    ckpt_path = run.config.ckpt_path
    trainable = any(p.requires_grad for p in run.task.parameters())
    if ckpt_path is None and trainable:
        print("error: python -m seqrec test needs --ckpt_path PATH (a checkpoint of a run of this config)", file=sys.stderr)
        raise SystemExit(2)
    if ckpt_path is not None and not Path(ckpt_path).is_file():
        print(f"error: checkpoint {ckpt_path} does not exist; pass a file from runs/<config>/version_N/checkpoints/",
              file=sys.stderr)
        raise SystemExit(2)
    [results] = run.trainer.test(run.task, datamodule=run.datamodule, ckpt_path=ckpt_path)
    out_dir = Path(run.trainer.log_dir or run.trainer.default_root_dir)
    if run.trainer.is_global_zero:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_json(out_dir / "test_metrics.json", results)
        log.info("test metrics written to %s", out_dir / "test_metrics.json")
    for logger in run.trainer.loggers:
        if callable(getattr(logger, "close", None)):
            logger.close()
    return results


if __name__ == "__main__":
    main()
