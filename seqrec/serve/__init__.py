"""Serving what was trained: one streaming state per user in a durable store, behind an HTTP API.

- ``seqrec.serve.state``: per-model state adapters (recurrent O(1) state, KV cache, recompute over the window);
- ``seqrec.serve.store``: the store interface, SQLite (default), Redis, memory, and the in-memory LRU cache;
- ``seqrec.serve.service``: the operations (update, topk, score, forget), HTTP-free;
- ``seqrec.serve.app``: the FastAPI app; ``seqrec.serve.cli``: ``python -m seqrec serve RUN_DIR``;
- ``seqrec.serve.bodies``: the request bodies and their parsing; ``seqrec.serve.errors``: the client errors and
  their HTTP statuses; ``seqrec.serve.limits``: the bounds on one request; ``seqrec.serve.screen``: large bodies
  checked in a process of their own.

The app needs the ``serve`` extra (fastapi, uvicorn; redis for the Redis store); the rest needs torch only.
"""
