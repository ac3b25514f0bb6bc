"""The JSON bodies of the HTTP API (``seqrec.serve.app``), and how a body is parsed and validated.

Their own module, importing pydantic and nothing heavy: the app parses bodies with them, and so does the screening
process (``seqrec.serve.screen``), which must start without torch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator
from pydantic_core import from_json

from seqrec.serve.errors import InvalidBody
from seqrec.serve.limits import CHUNK, chunks

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


BODIES: tuple[type[BaseModel], ...] = (EventsIn, BatchEventsIn, TopKIn, ScoreIn)
