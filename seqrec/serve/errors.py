"""The errors a client causes, each with the HTTP status the app answers with (``{"error": message}``).

Their own module, importing nothing heavy: the serving operations (``seqrec.serve.service``), the request bodies
(``seqrec.serve.bodies``) and the screening process (``seqrec.serve.screen``, which must not import torch) raise them.
"""

from __future__ import annotations


class ServingError(Exception):
    """An error a client caused; ``status`` is the HTTP status the app answers with."""

    status = 400


class UnknownItem(ServingError):
    """An item the catalogue does not have."""

    status = 404


class NoEvents(ServingError):
    """Recommendations asked for a user without events."""

    status = 404


class SequenceGap(ServingError):
    """An event numbered past the user's next event (``seq`` > events)."""

    status = 409


class IdTooLong(ServingError):
    """A user or item id longer than the server's ``max_id_length`` (refused before any lookup)."""

    status = 422


class Contended(ServingError):
    """The compare-and-set lost CAS_RETRIES times in a row (a user hammered by several workers)."""

    status = 503


class BodyTooLarge(ServingError):
    """A request body over ``max_body_bytes``."""

    status = 413


class InvalidBody(ServingError):
    """A body that is not the endpoint's JSON (``one_line`` of its first problem)."""

    status = 422
