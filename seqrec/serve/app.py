"""The HTTP API (FastAPI) over ``seqrec.serve.service.Serving``: JSON endpoints, OpenAPI docs at /docs.

    GET    /health                          liveness and what is served
    GET    /v1/info                         the model, its adapter, the store, counters
    POST   /v1/users/{user}/events          {"item": ..., "timestamp"?: ..., "seq"?: n}  or  {"items": [...], ...}
    POST   /v1/events                       {"events": [{"user": ..., "item": ..., "timestamp"?, "seq"?}, ...]}
    GET    /v1/users/{user}/topk?k=10&exclude_seen=all|window|none
    POST   /v1/topk                         {"users": [...], "k": 10, "exclude_seen": "all"}
    POST   /v1/users/{user}/score           {"items": [...]}  (CTR models: logit and click probability)
    GET    /v1/users/{user}                 events, stored bytes, newest items
    DELETE /v1/users/{user}                 forget the user

An event is acknowledged (HTTP 200) only after its transaction committed. Errors are one JSON line
``{"error": "..."}``: 404 an unknown item (or recommendations for a user without events), 409 an event
number that leaves a gap, 413 a body over ``max_body_bytes``, 422 a malformed request (the first problem,
``where: what``; also an id over ``max_id_length`` and JSON nested too deeply), 503 a store that fails; an id a
client sent is shown cut to 40 characters (``seqrec.serve.limits``). Shutdown (SIGINT/SIGTERM to uvicorn)
finishes the requests in flight, then flushes and closes the store.

Nothing a request sends can hold the event loop: a body is read up to ``max_body_bytes`` (refused as soon as it
passes them), then parsed, validated, served and serialised in a request thread (the POST endpoints read their
body themselves for that; FastAPI would parse it on the event loop). ``/health`` runs on the event loop itself,
so it answers while every request thread is busy. A body of ``screen_bytes`` or more is first checked in a
process of its own (``seqrec.serve.screen``), so one the server would refuse never takes its GIL. The bodies and
their parsing: ``seqrec.serve.bodies``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from seqrec.serve.bodies import (
    BODIES,
    ERROR_CHARACTERS,
    Ack,
    BatchEventsIn,
    Body,
    EventsIn,
    ExcludeSeen,
    ScoreIn,
    TopKIn,
    TopKOut,
    one_line,
    parse,
)
from seqrec.serve.errors import BodyTooLarge, ServingError
from seqrec.serve.limits import Limits
from seqrec.serve.screen import Screen
from seqrec.serve.service import Event, Serving
from seqrec.serve.store import StoreError

log = logging.getLogger("seqrec.serve.app")


def _exclude(value: ExcludeSeen) -> str:
    """true/false as all/none."""
    if value is True or value == "true":
        return "all"
    if value is False or value == "false":
        return "none"
    return str(value)


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, at most ``limit`` bytes: a larger declared Content-Length is refused unread, an undeclared
    (chunked) body as soon as the bytes read pass the limit (``BodyTooLarge``)."""
    fix = f"more than the {limit:,} allowed (serve --max_body_bytes); send fewer events per request"
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(f"the request body has {int(declared):,} bytes, {fix}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the request body has at least {size:,} bytes, {fix}")
        chunks.append(chunk)
    return b"".join(chunks)


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of an endpoint that reads its body itself (the schema is in the components)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def create_app(serving: Serving, close_on_shutdown: bool = True, request_threads: int | None = None,
               max_body_bytes: int | None = None, max_id_length: int | None = None,
               screen_bytes: int | None = None) -> FastAPI:
    """The FastAPI app over a ``Serving``; the store is flushed and closed when the app shuts down.

    request_threads: requests served at once (each runs in anyio's thread pool; default 40). max_body_bytes and
    max_id_length: the request bounds (``seqrec.serve.limits``; default 256 KiB and ``serving.max_id_length``).
    screen_bytes: bodies of at least this many bytes are screened in a process of their own first
    (``seqrec.serve.screen``; default 64 KiB, 0: none).
    """
    limits = Limits(max_body_bytes or Limits.max_body_bytes, max_id_length or serving.max_id_length,
                    Limits.screen_bytes if screen_bytes is None else screen_bytes)
    serving.max_id_length = limits.max_id_length
    screen = Screen(serving.catalogue, limits.max_id_length, limits.screen_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if request_threads:
            import anyio.to_thread

            anyio.to_thread.current_default_thread_limiter().total_tokens = request_threads
        await screen.start()
        yield
        screen.close()
        if close_on_shutdown:
            log.info("shutting down: flushing the store %s", serving.store.location)
            serving.close()

    app = FastAPI(title="seqrec serve", version="1",
                  description="Per-user streaming state for a trained sequential recommender (seqrec.serve).",
                  lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": one_line(error.errors())}, status_code=422)

    @app.exception_handler(ServingError)
    async def refused(request: Request, error: ServingError) -> JSONResponse:
        return JSONResponse({"error": str(error)[:ERROR_CHARACTERS]}, status_code=error.status)

    @app.exception_handler(StoreError)
    async def store_failed(request: Request, error: StoreError) -> JSONResponse:
        log.error("%s", error)
        return JSONResponse({"error": str(error)[:ERROR_CHARACTERS]}, status_code=503)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException) -> JSONResponse:
        return JSONResponse({"error": str(error.detail)[:ERROR_CHARACTERS]}, status_code=error.status_code,
                            headers=getattr(error, "headers", None))

    async def answer(request: Request, model: type[Body], work: Callable[[Body], Any], user: str | None = None
                     ) -> JSONResponse:
        """Read the bounded body; screen it if large (``seqrec.serve.screen``); parse it, do the work and serialise
        the answer in a request thread."""
        body = await read_body(request, limits.max_body_bytes)
        await screen.check(model.__name__, body, user)
        return await run_in_threadpool(lambda: JSONResponse(work(parse(model, body))))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """Liveness: "ok" and what is served (on the event loop: it never waits for a request thread)."""
        return {"status": "ok", "model": serving.description.get("model"), "adapter": serving.adapter.name,
                "store": serving.store.backend}

    @app.get("/v1/info")
    def info() -> dict[str, Any]:
        """The model, its adapter, the store and the counters."""
        return serving.stats()

    @app.post("/v1/users/{user}/events", response_model=list[Ack], openapi_extra=request_body(EventsIn))
    async def post_events(user: str, request: Request) -> JSONResponse:
        """Append one event (``item``) or several (``items``, oldest first) to a user; an unknown user starts empty."""

        def work(body: EventsIn) -> list[dict[str, Any]]:
            items = [body.item] if body.items is None else body.items
            serving.check_length([user], "user")
            serving.item_ids(items)  # unknown or too long items refused before an event is built
            events = [Event(user, item, body.timestamp if i == len(items) - 1 else None,
                            None if body.seq is None else body.seq + i) for i, item in enumerate(items)]
            return [asdict(a) for a in serving.update(events)]

        return await answer(request, EventsIn, work, user)

    @app.post("/v1/events", response_model=list[Ack], openapi_extra=request_body(BatchEventsIn))
    async def post_batch(request: Request) -> JSONResponse:
        """Events of several users in one request: one batched state update, one transaction."""

        def work(body: BatchEventsIn) -> list[dict[str, Any]]:
            return [asdict(a) for a in serving.update([Event(e.user, e.item, e.timestamp, e.seq) for e in body.events])]

        return await answer(request, BatchEventsIn, work)

    @app.get("/v1/users/{user}/topk", response_model=TopKOut, response_model_exclude_none=True)
    def get_topk(user: str, k: int = Query(10, ge=1, le=10_000),
                 exclude_seen: Literal["all", "window", "none", "true", "false"] = "all") -> dict[str, Any]:
        """The user's best k items (the evaluation's ranking); exclude_seen: all, window (the newest max_len), none."""
        return {"user": user, "items": serving.topk([user], k, _exclude(exclude_seen))[0]}

    @app.post("/v1/topk", response_model=list[TopKOut], response_model_exclude_none=True,
              openapi_extra=request_body(TopKIn))
    async def post_topk(request: Request) -> JSONResponse:
        """Best k items for several users in one batch."""

        def work(body: TopKIn) -> list[dict[str, Any]]:
            lists = serving.topk(body.users, body.k, _exclude(body.exclude_seen))
            return [{"user": u, "items": row} for u, row in zip(body.users, lists)]

        return await answer(request, TopKIn, work)

    @app.post("/v1/users/{user}/score", openapi_extra=request_body(ScoreIn))
    async def post_score(user: str, request: Request) -> JSONResponse:
        """The model's score of given items (CTR models: logit and click probability)."""
        return await answer(request, ScoreIn, lambda body: {"user": user, "items": serving.score(user, body.items)})

    @app.get("/v1/users/{user}")
    def get_user(user: str) -> dict[str, Any]:
        """Events, stored bytes and newest items of a user."""
        return serving.user_info(user)

    @app.delete("/v1/users/{user}")
    def delete_user(user: str) -> dict[str, Any]:
        """Forget the user (state and items)."""
        return {"user": user, "forgotten": serving.forget(user)}

    def openapi() -> dict[str, Any]:
        """FastAPI's schema plus the request bodies the POST endpoints read themselves."""
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in BODIES:
                body = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(body.pop("$defs", {}))
                components[model.__name__] = body
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    app.state.serving = serving
    app.state.limits = limits
    app.state.screen = screen
    return app
