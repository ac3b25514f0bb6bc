"""``python -m seqrec <command> ...``: the one way in.

    python -m seqrec fit --config lru_ml1m.yaml [--section.key value ...]   train, then test the best checkpoint
    python -m seqrec test --config lru_ml1m.yaml --ckpt_path PATH              test a checkpoint under a config
    python -m seqrec predict RUN_DIR [--users all|test|FILE] [--k 10] [--out F] top-k items per user in the data's ids
    python -m seqrec serve RUN_DIR [--port 8000] [--store F | --redis URL]    serve a run over HTTP, one durable state per user
    python -m seqrec repro --configs lru_ml1m ...                               paper reproductions in resumable sittings
    python -m seqrec tune --config X.yaml --space S.yaml --trials N --study NAME  Optuna search (docs/TUNING.md)
    python -m seqrec summarize RUN_DIR                                          rebuild a run's report (PNG, summary.md)
    python -m seqrec lrd --config ...                                           long-range dependence of a dataset

Every command builds its run through ``seqrec.build``; ``python -m seqrec.fit`` stays as a synonym of ``fit``.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "fit": "seqrec.fit",
    "test": "seqrec.evaluate",
    "predict": "seqrec.predict",
    "serve": "seqrec.serve.cli",
    "repro": "seqrec.bench.repro",
    "tune": "seqrec.tune",
    "summarize": "seqrec.tools.summarize",
    "lrd": "seqrec.tools.lrd",
}


def usage() -> str:
    """The command list (this module's docstring)."""
    return (__doc__ or "").strip()


def main(argv: list[str] | None = None) -> object:
    """Dispatch ``argv[0]`` to its command's ``main(argv[1:])``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return None
    command, rest = argv[0], argv[1:]
    if command == "bench":  # the development benchmarks live outside the package (benchmarks/ in a checkout)
        print("error: the benchmarks moved out of the package: from a source checkout's root run "
              "python -m benchmarks.<pipeline|speed|xlong|lru_speed|compress|serve> ...", file=sys.stderr)
        raise SystemExit(2)
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        raise SystemExit(2)
    module = COMMANDS[command]
    return importlib.import_module(module).main(rest)


if __name__ == "__main__":
    main()
