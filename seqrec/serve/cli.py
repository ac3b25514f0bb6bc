"""``seqrec serve RUN_DIR [--port 8000] [--store PATH | --redis URL] [--compress METHOD --budget R]``.

Loads a trained run (``seqrec.load_run``: its config, data ids and best checkpoint) and serves it over HTTP
(``seqrec.serve.app``; OpenAPI docs at ``/docs``) with one state per user in a durable store:

- ``--store PATH``: the SQLite file (default ``RUN_DIR/serving/state.sqlite``, one per compression setting);
  ``--sync full`` (default: fsync per acknowledged update, survives a power cut) or ``normal`` (survives a
  killed server, not a power cut); ``--redis URL`` instead: a Redis server shared by several workers
  (``--redis_prefix`` separates models; ``--cache_size 0`` unless each user is routed to one worker);
- ``--compress METHOD --budget R``: wrap a CTR transformer run with a ``seqrec.compress`` method keeping a
  fraction R of each layer's entries (the compression benchmark's methods: uncompressed, prune, tome,
  streaming, h2o, snapkv, ...);
- ``--reset_store`` discards the stored states (the store must match the model: a store written for another
  checkpoint or compression is refused with a one-line error, as is a corrupt file);
- ``--max_body_bytes`` (default 256 KiB) and ``--max_id_length`` (default 512 characters) bound what one request
  may send (``seqrec.serve.limits``): a larger body is a 413, a longer id a 422, both before any lookup;
  ``--screen_bytes`` (default 64 KiB) bodies are checked in a process of their own first (``seqrec.serve.screen``).

SIGINT/SIGTERM finish the requests in flight, then flush and close the store (uvicorn then re-raises the signal, so
the exit status is the signal's). A bad run, store or option is one line ``error: ...``, exit 2 (``SEQREC_DEBUG=1``
shows the traceback).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from seqrec.cli import command_parser
from seqrec.cli import main as cli_main
from seqrec.errors import one_line
from seqrec.serve.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_ID_LENGTH, DEFAULT_SCREEN_BYTES, Limits
from seqrec.serve.store import StoreError, open_store

log = logging.getLogger("seqrec.serve")
SWITCH_INTERVAL_S = 0.001


def command(
    run: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    ckpt_path: str = "best",
    store: str | None = None,
    sync: Literal["full", "normal"] = "full",
    redis: str | None = None,
    redis_prefix: str = "seqrec",
    cache_size: int | None = None,
    compress: str | None = None,
    budget: float = 1.0,
    reset_store: bool = False,
    no_check: bool = False,
    device: str = "cpu",
    threads: int = 1,
    request_threads: int | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_id_length: int = DEFAULT_MAX_ID_LENGTH,
    screen_bytes: int = DEFAULT_SCREEN_BYTES,
    log_level: str = "info",
) -> None:
    """Serve a trained run over HTTP (OpenAPI docs at /docs), one durable state per user, until SIGINT/SIGTERM.

    A bad run, store or option is one line, exit 2; SIGINT/SIGTERM finish the requests in flight, then flush and
    close the store.

    Args:
        run: run directory (runs/<experiment>/version_N), its experiment folder, or a checkpoint
        host: address to listen on
        port: port to listen on
        ckpt_path: best, last, or a .ckpt path
        store: SQLite state file (default RUN_DIR/serving/state[-METHOD-BUDGET].sqlite; :memory: keeps nothing)
        sync: SQLite durability per update: full (fsync, survives a power cut) or normal (survives a killed server)
        redis: a shared Redis store instead, e.g. redis://127.0.0.1:6379/0
        redis_prefix: key prefix of this model's states in Redis
        cache_size: users whose decoded state stays in memory (default 100000; 0 with --redis)
        compress: serve a CTR transformer through this seqrec.compress method (prune, tome, snapkv, ...)
        budget: fraction of entries kept per layer with --compress
        reset_store: discard the stored states first
        no_check: skip SQLite's quick_check when opening the store
        device: cpu, cuda or auto
        threads: torch threads per request (1: requests run in parallel)
        request_threads: requests served at once (default: anyio's 40)
        max_body_bytes: largest request body (256 KiB); larger is HTTP 413
        max_id_length: longest user or item id in characters; longer is HTTP 422
        screen_bytes: bodies this large or larger are checked in a process of their own first, so one the server
            refuses never takes its GIL (64 KiB; 0: none)
        log_level: uvicorn's log level (debug, info, warning, error)
    """
    args = SimpleNamespace(
        run=run, host=host, port=port, ckpt_path=ckpt_path, store=store, sync=sync, redis=redis,
        redis_prefix=redis_prefix, cache_size=cache_size, compress=compress, budget=budget, reset_store=reset_store,
        no_check=no_check, device=device, threads=threads, request_threads=request_threads,
        max_body_bytes=max_body_bytes, max_id_length=max_id_length, screen_bytes=screen_bytes, log_level=log_level,
    )
    serve(args)


def parser() -> Any:  # noqa: ANN401 (a jsonargparse parser)
    """The command's parser (``seqrec.cli.command_parser`` of ``command``): ``parse_args`` gives ``build_serving``'s input."""
    return command_parser("serve", command)


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


def build_serving(args: Any):  # noqa: ANN201 (Serving; imported lazily)
    """Load the run and open the store -> a ``Serving``."""
    import seqrec
    from seqrec.serve.service import Serving

    Limits(args.max_body_bytes, args.max_id_length, args.screen_bytes)  # bad bounds fail before the run is loaded
    run = seqrec.load_run(args.run, checkpoint=args.ckpt_path, device=args.device, threads=args.threads)
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


def serve(args: Any) -> None:  # noqa: ANN401 (command's options, by name)
    """Serve until SIGINT/SIGTERM; a missing run or a bad or foreign store is one line, exit 2."""
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    try:
        import uvicorn

        from seqrec.serve.app import create_app
    except ImportError as error:
        raise ValueError(f"serving needs its extra ({error}); pip install 'seqrec[serve]'") from None
    try:
        serving = build_serving(args)
    except (StoreError, OSError, ValueError, TypeError) as error:  # a bad store, run, checkpoint or option: one line
        raise ValueError(one_line(error)) from error
    info = serving.description
    print(f"serving {info.get('model')} ({info.get('adapter')} state, {serving.store.backend} store "
          f"{serving.store.location}) on http://{args.host}:{args.port} (OpenAPI docs: /docs)", flush=True)
    # a request thread running Python hands the GIL to the event loop (/health, reading bodies) within 1 ms, not 5
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    app = create_app(serving, request_threads=args.request_threads, max_body_bytes=args.max_body_bytes,
                     max_id_length=args.max_id_length, screen_bytes=args.screen_bytes)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level.lower(),
                            timeout_graceful_shutdown=30, access_log=False)
    uvicorn.Server(config).run()


def main(argv: list[str] | None = None) -> None:
    """``seqrec serve`` (``seqrec.cli``): parse, then serve until SIGINT/SIGTERM; failures are one line."""
    cli_main(["serve", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
