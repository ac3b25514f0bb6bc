"""``python -m seqrec serve RUN_DIR [--port 8000] [--store PATH | --redis URL] [--compress METHOD --budget R]``.

Loads a trained run (``seqrec.load_run``: its config, data ids and best checkpoint) and serves it over HTTP
(``seqrec.serve.app``; OpenAPI docs at ``/docs``) with one state per user in a durable store:

- ``--store PATH``: the SQLite file (default ``RUN_DIR/serving/state.sqlite``, one per compression setting);
  ``--sync full`` (default: fsync per acknowledged update, survives a power cut) or ``normal`` (survives a
  killed server, not a power cut); ``--redis URL`` instead: a Redis server shared by several workers
  (``--redis-prefix`` separates models; ``--cache-size 0`` unless each user is routed to one worker);
- ``--compress METHOD --budget R``: wrap a CTR transformer run with a ``seqrec.compress`` method keeping a
  fraction R of each layer's entries (the compression benchmark's methods: uncompressed, prune, tome,
  streaming, h2o, snapkv, ...);
- ``--reset-store`` discards the stored states (the store must match the model: a store written for another
  checkpoint or compression is refused with a one-line error, as is a corrupt file);
- ``--max-body-bytes`` (default 256 KiB) and ``--max-id-length`` (default 512 characters) bound what one request
  may send (``seqrec.serve.limits``): a larger body is a 413, a longer id a 422, both before any lookup.

SIGINT/SIGTERM finish the requests in flight, then flush and close the store (uvicorn then re-raises the signal, so
the exit status is the signal's). A bad run, store or option is one line ``error: ...``, exit 2 (``SEQREC_DEBUG=1``
shows the traceback).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from seqrec.serve.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_ID_LENGTH, Limits
from seqrec.serve.store import SYNC_MODES, StoreError, open_store

log = logging.getLogger("seqrec.serve")
SWITCH_INTERVAL_S = 0.001


def parser() -> argparse.ArgumentParser:
    """The command's options."""
    p = argparse.ArgumentParser(prog="python -m seqrec serve", description=__doc__.split("\n\n")[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", help="run directory (runs/<experiment>/version_N), its experiment folder, or a checkpoint")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--checkpoint", default="best", help="best, last, or a .ckpt path")
    p.add_argument("--store", default=None, help="SQLite state file (default RUN_DIR/serving/state[-METHOD-BUDGET].sqlite; "
                                                 ":memory: keeps nothing)")
    p.add_argument("--sync", choices=SYNC_MODES, default="full", help="SQLite durability per update (default full)")
    p.add_argument("--redis", default=None, metavar="URL", help="a shared Redis store instead, e.g. redis://127.0.0.1:6379/0")
    p.add_argument("--redis-prefix", default="seqrec", help="key prefix of this model's states in Redis")
    p.add_argument("--cache-size", type=int, default=None,
                   help="users whose decoded state stays in memory (default 100000; 0 with --redis)")
    p.add_argument("--compress", default=None, metavar="METHOD", help="serve a CTR transformer through a seqrec.compress method")
    p.add_argument("--budget", type=float, default=1.0, help="fraction of entries kept per layer with --compress (default 1.0)")
    p.add_argument("--reset-store", action="store_true", help="discard the stored states first")
    p.add_argument("--no-check", action="store_true", help="skip SQLite's quick_check when opening the store")
    p.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    p.add_argument("--threads", type=int, default=1, help="torch threads per request (default 1: requests run in parallel)")
    p.add_argument("--request-threads", type=int, default=None, help="requests served at once (default: anyio's 40)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help=f"largest request body (default {DEFAULT_MAX_BODY_BYTES:,}: 256 KiB); larger is HTTP 413")
    p.add_argument("--max-id-length", type=int, default=DEFAULT_MAX_ID_LENGTH,
                   help=f"longest user or item id in characters (default {DEFAULT_MAX_ID_LENGTH}); longer is HTTP 422")
    p.add_argument("--log-level", default="info")
    return p


def default_store_path(run_dir: Path, compress: str | None, budget: float) -> Path:
    """RUN_DIR/serving/state.sqlite, or state-METHOD-BUDGET.sqlite for a compressed model."""
    name = "state.sqlite" if compress is None else f"state-{compress}-{budget:g}.sqlite"
    return run_dir / "serving" / name


def reset_store(store_path: Path | None, redis_url: str | None, prefix: str) -> None:
    """Delete the SQLite file (and its WAL) or the prefix's Redis keys."""
    if redis_url:
        import redis

        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
        return
    if store_path is not None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{store_path}{suffix}").unlink(missing_ok=True)


def build_serving(args: argparse.Namespace):  # noqa: ANN201 (Serving; imported lazily)
    """Load the run and open the store -> a ``Serving``."""
    import seqrec
    from seqrec.serve.service import Serving

    Limits(args.max_body_bytes, args.max_id_length)  # bad bounds fail before the run is loaded
    run = seqrec.load_run(args.run, checkpoint=args.checkpoint, device=args.device, threads=args.threads)
    store_path = None
    if not args.redis:
        store_path = Path(args.store) if args.store else default_store_path(run.run_dir, args.compress, args.budget)
    if args.reset_store:
        reset_store(None if store_path is None or str(store_path) == ":memory:" else store_path, args.redis, args.redis_prefix)
    store = open_store(store_path, args.redis, args.redis_prefix, args.sync, check=not args.no_check)
    cache = args.cache_size if args.cache_size is not None else (0 if args.redis else 100_000)
    try:
        return Serving.from_run(run, store, cache, compress=args.compress, budget=args.budget, threads=args.threads,
                                max_id_length=args.max_id_length)
    except BaseException:
        store.close()
        raise


def main(argv: list[str] | None = None) -> None:
    """Serve until SIGINT/SIGTERM; one-line errors (exit 2) for a missing run, a bad or foreign store."""
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        import uvicorn

        from seqrec.serve.app import create_app
    except ImportError as error:
        print(f"error: serving needs its extra ({error}); pip install 'seqrec[serve]'", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        serving = build_serving(args)
    except (StoreError, OSError, ValueError, TypeError) as error:  # a bad store, run, checkpoint or option: one line
        if os.environ.get("SEQREC_DEBUG", "").strip().lower() not in ("", "0", "false"):
            raise
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    info = serving.description
    print(f"serving {info.get('model')} ({info.get('adapter')} state, {serving.store.backend} store "
          f"{serving.store.location}) on http://{args.host}:{args.port} (OpenAPI docs: /docs)", flush=True)
    # a request thread running Python hands the GIL to the event loop (/health, reading bodies) within 1 ms, not 5
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(serving, request_threads=args.request_threads, max_body_bytes=args.max_body_bytes,
                     max_id_length=args.max_id_length)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                            timeout_graceful_shutdown=30, access_log=False)
    uvicorn.Server(config).run()


if __name__ == "__main__":
    main()
