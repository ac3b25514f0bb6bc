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
so it answers while every request thread is busy.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict
from typing import Any, Literal, TypeVar

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import from_json
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from seqrec.serve.limits import CHUNK, Limits, chunks
from seqrec.serve.service import Event, Serving, ServingError
from seqrec.serve.store import StoreError

log = logging.getLogger("seqrec.serve.app")
Body = TypeVar("Body", bound=BaseModel)
ERROR_CHARACTERS = 500  # an error line is cut here (the messages themselves show ids cut to 40 characters)
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


def json_problem(detail: str) -> str:
    """``body: ...`` for a body that does not parse as JSON (too deeply nested, cut short, not JSON)."""
    detail = " ".join(detail.split())
    if "recursion limit" in detail:
        return f"body: JSON nested too deeply ({detail}); a request is 3 levels deep"
    return f"body: invalid JSON ({detail})"


def one_line(problems: Sequence[dict[str, Any]]) -> str:
    """The first validation problem as ``where: what`` (plus how many more)."""
    if not problems:
        return "invalid request"
    first = problems[0]
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return " ".join(f"{where}: {first.get('msg', 'invalid')}{more}".split())[:ERROR_CHARACTERS]


class BodyTooLarge(ServingError):
    """A request body over ``max_body_bytes``."""

    status = 413


class InvalidBody(ServingError):
    """A body that is not the endpoint's JSON (``one_line`` of its first problem)."""

    status = 422


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


def parse(model: type[Body], body: bytes) -> Body:
    """``body`` as ``model``, else ``InvalidBody``: parsed (pydantic-core's JSON parser, whose recursion limit bounds
    the nesting), then validated (``validate``): separate calls, each holding the GIL for less than parsing and
    validating in one does (JSON-mode validation of an ``int | str`` list is 2-3x slower)."""
    try:
        document = from_json(body, cache_strings=False)  # caching short strings costs more than it saves here
    except ValueError as error:
        raise InvalidBody(json_problem(str(error))[:ERROR_CHARACTERS]) from None
    return validate(model, document)


@functools.cache
def list_field(model: type[BaseModel], name: str) -> tuple[TypeAdapter, int | None]:
    """The validator of a list field's values, and the field's ``max_length`` (None: unbounded)."""
    field = model.model_fields[name]
    return TypeAdapter(field.annotation), next((m.max_length for m in field.metadata if hasattr(m, "max_length")), None)


def validate(model: type[Body], document: Any) -> Body:  # noqa: ANN401 (parsed JSON)
    """``document`` as ``model``, else ``InvalidBody`` naming the first problem.

    A list field longer than ``CHUNK`` entries is validated in slices of ``CHUNK``, one C call each, as ids are
    length-checked and looked up (``seqrec.serve.limits``): validating 21,844 ids in one call holds the GIL for
    ~1.6 ms, and the event loop answering /health waits behind it; a slice holds it ~0.4 ms. The model itself is
    validated with each long list cut to its first slice (the other fields, the list's type and ``min_length``), then
    ``max_length`` is checked and the rest validated slice by slice; an error's place is the entry's index in the list.
    """
    long = {}
    if isinstance(document, dict):
        long = {name: value for name, value in document.items()
                if isinstance(value, list) and len(value) > CHUNK and name in model.model_fields}
    try:
        head = model.model_validate({**document, **{name: value[:CHUNK] for name, value in long.items()}}
                                    if long else document)
    except ValidationError as error:
        raise InvalidBody(one_line(error.errors(include_url=False, include_input=False))) from None
    if not long:
        return head
    whole = {}
    for name, value in long.items():
        adapter, max_length = list_field(model, name)
        if max_length is not None and len(value) > max_length:
            raise InvalidBody(f"{name}: List should have at most {max_length:,} items, not {len(value):,}")
        values = list(getattr(head, name))
        for index, part in enumerate(chunks(value)):
            if index == 0:
                continue  # validated with the model
            start = index * CHUNK
            try:
                values += adapter.validate_python(part)
            except ValidationError as error:
                problems = error.errors(include_url=False, include_input=False)
                for problem in problems:  # (index in the slice, ...) -> (name, index in the list, ...)
                    loc = problem.get("loc", ())
                    problem["loc"] = (name, loc[0] + start, *loc[1:]) if loc and isinstance(loc[0], int) else (name, *loc)
                raise InvalidBody(one_line(problems)) from None
        whole[name] = values
    return head.model_copy(update=whole)


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI ``requestBody`` of an endpoint that reads its body itself (the schema is in the components)."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


BODIES: tuple[type[BaseModel], ...] = (EventsIn, BatchEventsIn, TopKIn, ScoreIn)


def create_app(serving: Serving, close_on_shutdown: bool = True, request_threads: int | None = None,
               max_body_bytes: int | None = None, max_id_length: int | None = None) -> FastAPI:
    """The FastAPI app over a ``Serving``; the store is flushed and closed when the app shuts down.

    request_threads: requests served at once (each runs in anyio's thread pool; default 40). max_body_bytes and
    max_id_length: the request bounds (``seqrec.serve.limits``; default 256 KiB and ``serving.max_id_length``).
    """
    limits = Limits(max_body_bytes or Limits.max_body_bytes, max_id_length or serving.max_id_length)
    serving.max_id_length = limits.max_id_length

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

    async def answer(request: Request, model: type[Body], work: Callable[[Body], Any]) -> JSONResponse:
        """Read the bounded body; parse it, do the work and serialise the answer in a request thread."""
        body = await read_body(request, limits.max_body_bytes)
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

        return await answer(request, EventsIn, work)

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
    return app
