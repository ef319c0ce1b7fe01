"""The request contract: what a backfill request may hold, checked at enqueue and at claim.

A request holds identifiers only (an asset name, partition keys, a reason, a correlation
id), never data: the backfill reads its input itself, so a request stays small and a
stale request still launches today's input. `request_backfill` checks the arguments; the
sensor checks stored rows again with the same functions, because anything with write
access to the table can put a row there.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

# Version of the request payload. The sensor refuses versions it does not know instead of
# guessing what a newer producer meant.
OUTBOX_SCHEMA_VERSION = 1
KNOWN_SCHEMA_VERSIONS = frozenset({OUTBOX_SCHEMA_VERSION})

# Bounds that keep a request an identifier list rather than a payload. 500 partitions
# is more than a year of days; a larger backfill is several requests (or the UI's backfill).
MAX_PARTITIONS_PER_REQUEST = 500
MAX_IDENTIFIER_CHARS = 255  # the width of the asset, partition and correlation columns
MAX_REASON_CHARS = 1000
MAX_ERROR_CHARS = 2000
# The largest JSON `request_backfill` can write (each key at most doubled by escapes):
# a stored value above it was not written by us and is refused before parsing.
MAX_PARTITIONS_JSON_CHARS = MAX_PARTITIONS_PER_REQUEST * (2 * MAX_IDENTIFIER_CHARS + 4) + 2


class InvalidRequest(ValueError):
    """A backfill request (an argument, or a stored row) breaks the request contract."""


def checked_partitions(partitions: Sequence[str]) -> list[str]:
    """The partition keys as a list without repeats, or `InvalidRequest` saying what is wrong."""
    # A bare string is a sequence too: "2024-01-03" would become ten one-character keys.
    if isinstance(partitions, str | bytes) or not isinstance(partitions, list | tuple):
        raise InvalidRequest(
            f"partitions must be a list of partition keys, got {type(partitions).__name__}"
        )
    if not partitions:
        raise InvalidRequest("partitions must name at least one partition")
    if len(partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(
            f"a request names at most {MAX_PARTITIONS_PER_REQUEST} partitions, got "
            f"{len(partitions)}; split the backfill into several requests"
        )
    keys = [checked_identifier(key, f"partitions[{index}]") for index, key in enumerate(partitions)]
    return list(dict.fromkeys(keys))


def parse_partitions(text: str) -> list[str]:
    """The partition keys of a stored request, checked as untrusted input."""
    if not isinstance(text, str) or len(text) > MAX_PARTITIONS_JSON_CHARS:
        raise InvalidRequest("partitions is not a JSON array of a size request_backfill writes")
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise InvalidRequest("partitions is not valid JSON") from None
    return checked_partitions(value)


def checked_identifier(value: object, what: str) -> str:
    text = checked_text(value, what, MAX_IDENTIFIER_CHARS)
    if text != text.strip():
        raise InvalidRequest(f"{what} must not start or end with whitespace, got {text!r}")
    return text


def checked_text(value: object, what: str, max_chars: int, *, printable: bool = True) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(f"{what} must be a non-empty string, got {_shown(value)}")
    if len(value) > max_chars:
        raise InvalidRequest(f"{what} must be at most {max_chars} characters, got {len(value)}")
    # Identifiers end up in run keys, tags and partition names: no control characters.
    if printable and not value.isprintable():
        raise InvalidRequest(f"{what} must not contain control characters, got {_shown(value)}")
    return value


def _shown(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
