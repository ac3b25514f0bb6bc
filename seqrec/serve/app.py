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
number that leaves a gap, 422 a malformed request (the first problem, ``where: what``), 503 a store that fails.
Shutdown (SIGINT/SIGTERM to uvicorn) finishes the requests in flight, then flushes and closes the store.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, model_validator

from seqrec.serve.service import Event, Serving, ServingError
from seqrec.serve.store import StoreError

log = logging.getLogger("seqrec.serve.app")
RawId = int | str
ExcludeSeen = Literal["all", "window", "none", "true", "false"] | bool


class EventsIn(BaseModel):
    """One event (``item``) or several of one user, oldest first (``items``)."""

    item: RawId | None = Field(None, description="raw item id of one event")
    items: list[RawId] | None = Field(None, description="raw item ids of several events, oldest first", min_length=1,
                                      max_length=100_000)
    timestamp: float | None = Field(None, description="time of the (newest) event, stored with the user")
    seq: int | None = Field(None, ge=0, description="0-based number of this (the first) event in the user's history: "
                                                    "a retry of an applied event is acknowledged, not applied twice")

    @model_validator(mode="after")
    def one_of(self) -> EventsIn:
        """Exactly one of item and items."""
        if (self.item is None) == (self.items is None):
            raise ValueError("give exactly one of item and items")
        return self


class UserEvent(BaseModel):
    """One event of a batch."""

    user: str = Field(min_length=1, max_length=512)
    item: RawId
    timestamp: float | None = None
    seq: int | None = Field(None, ge=0)


class BatchEventsIn(BaseModel):
    """Events of several users, applied in order, written in one transaction."""

    events: list[UserEvent] = Field(min_length=1, max_length=100_000)


class TopKIn(BaseModel):
    """Recommendations for several users."""

    users: list[str] = Field(min_length=1, max_length=10_000)
    k: int = Field(10, ge=1, le=10_000)
    exclude_seen: ExcludeSeen = "all"


class ScoreIn(BaseModel):
    """Items to score for one user."""

    items: list[RawId] = Field(min_length=1, max_length=100_000)


class Ack(BaseModel):
    """An event's acknowledgement."""

    user: str
    events: int = Field(description="the user's event count after the request")
    applied: bool = Field(description="False: this event was already applied (a retry)")


class Recommendation(BaseModel):
    """One recommended item."""

    item: RawId
    score: float
    rank: int = Field(description="1 + the number of items scored strictly higher (ties share a rank)")
    probability: float | None = Field(None, description="CTR models: sigmoid(score)")


class TopKOut(BaseModel):
    """One user's list."""

    user: str
    items: list[Recommendation]


def _exclude(value: ExcludeSeen) -> str:
    """true/false as all/none."""
    if value is True or value == "true":
        return "all"
    if value is False or value == "false":
        return "none"
    return str(value)


def one_line(error: RequestValidationError) -> str:
    """The first validation problem as ``where: what`` (plus how many more)."""
    problems = error.errors()
    if not problems:
        return "invalid request"
    first = problems[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}".replace("\n", " ")


def create_app(serving: Serving, close_on_shutdown: bool = True, request_threads: int | None = None) -> FastAPI:
    """The FastAPI app over a ``Serving``; the store is flushed and closed when the app shuts down.

    request_threads: requests served at once (the endpoints are sync and run in anyio's thread pool; default 40).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if request_threads:
            import anyio.to_thread

            anyio.to_thread.current_default_thread_limiter().total_tokens = request_threads
        yield
        if close_on_shutdown:
            log.info("shutting down: flushing the store %s", serving.store.location)
            serving.close()

    app = FastAPI(title="seqrec serve", version="1",
                  description="Per-user streaming state for a trained sequential recommender (seqrec.serve).",
                  lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"error": one_line(error)}, status_code=422)

    @app.exception_handler(ServingError)
    async def refused(request: Request, error: ServingError) -> JSONResponse:
        return JSONResponse({"error": str(error)}, status_code=error.status)

    @app.exception_handler(StoreError)
    async def store_failed(request: Request, error: StoreError) -> JSONResponse:
        log.error("%s", error)
        return JSONResponse({"error": str(error)}, status_code=503)

    @app.get("/health")
    def health() -> dict[str, Any]:
        """Liveness: "ok" and what is served."""
        return {"status": "ok", "model": serving.description.get("model"), "adapter": serving.adapter.name,
                "store": serving.store.backend}

    @app.get("/v1/info")
    def info() -> dict[str, Any]:
        """The model, its adapter, the store and the counters."""
        return serving.stats()

    @app.post("/v1/users/{user}/events", response_model=list[Ack])
    def post_events(user: str, body: EventsIn) -> list[Any]:
        """Append one event (``item``) or several (``items``, oldest first) to a user; an unknown user starts empty."""
        items = [body.item] if body.items is None else body.items
        events = [Event(user, item, body.timestamp if i == len(items) - 1 else None,
                        None if body.seq is None else body.seq + i) for i, item in enumerate(items)]
        return serving.update(events)

    @app.post("/v1/events", response_model=list[Ack])
    def post_batch(body: BatchEventsIn) -> list[Any]:
        """Events of several users in one request: one batched state update, one transaction."""
        return serving.update([Event(e.user, e.item, e.timestamp, e.seq) for e in body.events])

    @app.get("/v1/users/{user}/topk", response_model=TopKOut, response_model_exclude_none=True)
    def get_topk(user: str, k: int = Query(10, ge=1, le=10_000),
                 exclude_seen: Literal["all", "window", "none", "true", "false"] = "all") -> dict[str, Any]:
        """The user's best k items (the evaluation's ranking); exclude_seen: all, window (the newest max_len), none."""
        return {"user": user, "items": serving.topk([user], k, _exclude(exclude_seen))[0]}

    @app.post("/v1/topk", response_model=list[TopKOut], response_model_exclude_none=True)
    def post_topk(body: TopKIn) -> list[dict[str, Any]]:
        """Best k items for several users in one batch."""
        lists = serving.topk(body.users, body.k, _exclude(body.exclude_seen))
        return [{"user": u, "items": row} for u, row in zip(body.users, lists)]

    @app.post("/v1/users/{user}/score")
    def post_score(user: str, body: ScoreIn) -> dict[str, Any]:
        """The model's score of given items (CTR models: logit and click probability)."""
        return {"user": user, "items": serving.score(user, body.items)}

    @app.get("/v1/users/{user}")
    def get_user(user: str) -> dict[str, Any]:
        """Events, stored bytes and newest items of a user."""
        return serving.user_info(user)

    @app.delete("/v1/users/{user}")
    def delete_user(user: str) -> dict[str, Any]:
        """Forget the user (state and items)."""
        return {"user": user, "forgotten": serving.forget(user)}

    app.state.serving = serving
    return app
