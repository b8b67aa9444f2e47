"""A batch's body, read and validated whole before anything of it is counted: a JSON array of
records or NDJSON (one record a line), optionally gzip-compressed. The first bad record fails
the batch with its index and field (:class:`BatchError`); nothing of it is written."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from operator import itemgetter

from pydantic import ValidationError

from envcheck.core.rollouts import MAX_BATCH_RECORDS, Rollout
from envcheck.rollouts.records import RECORD, RECORDS, RolloutRecord, to_rollout

__all__ = ["MAX_BODY_BYTES", "MAX_RECORDS", "MAX_SKEW", "BatchError", "read_batch"]

# Whichever comes first. 20,000 records of the wire format are ~6 MB; the byte bound holds
# what one request may make the server read and validate (sent, and once inflated).
MAX_BODY_BYTES = 16 * 1024 * 1024
MAX_RECORDS = MAX_BATCH_RECORDS
MAX_SKEW = timedelta(hours=1)  # how far in the future a record's time may be (clock skew)
_AT = itemgetter("at")


@dataclass(frozen=True, slots=True)
class BatchError(Exception):
    """Why a batch is refused: ``status`` 400 (a bad record: its ``index`` and ``field``,
    and the validator's error ``kind``), 413 (too large) or 415 (an encoding not
    understood)."""

    status: int
    error: str
    reason: str
    index: int | None = None
    field: str | None = None
    kind: str = ""

    def __str__(self) -> str:
        return self.reason


def _inflate(body: bytes) -> bytes:
    """The body gunzipped (each member, if several were concatenated), never more than
    :data:`MAX_BODY_BYTES` of it: a small body that inflates past it is refused part way."""
    out: list[bytes] = []
    size, rest = 0, body
    while rest:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            part = inflater.decompress(rest, MAX_BODY_BYTES + 1 - size)
        except zlib.error as exc:
            raise BatchError(400, "bad_encoding", f"the body is not valid gzip: {exc}") from None
        size += len(part)
        if size > MAX_BODY_BYTES or inflater.unconsumed_tail:
            raise BatchError(413, "too_large", f"the batch inflates past {MAX_BODY_BYTES} "
                             "bytes; send smaller batches")
        if not inflater.eof:
            raise BatchError(400, "bad_encoding", "the body is not valid gzip: it ends before "
                             "its gzip stream does")
        out.append(part)
        rest = inflater.unused_data
    return b"".join(out)


def _field_error(exc: ValidationError, index: int | None, skip: int) -> BatchError:
    first = exc.errors(include_url=False, include_input=False)[0]
    loc = list(first["loc"])
    if index is None and loc and isinstance(loc[0], int):
        index = loc[0]
    field = ".".join(str(p) for p in loc[skip:]) or None
    where = f"record {index}" if index is not None else "the body"
    what = f"{where}, field {field}" if field else where
    return BatchError(400, "invalid_record", f"{what}: {first['msg']}", index, field,
                      first["type"])


def read_batch(body: bytes, *, content_type: str = "application/json",
               content_encoding: str = "", now: datetime | None = None) -> list[Rollout]:
    """The records of one batch, or :class:`BatchError`."""
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        body = _inflate(body)
    elif encoding not in ("", "identity"):
        raise BatchError(415, "unsupported_encoding",
                         f"Content-Encoding {content_encoding!r}: send gzip or none")
    if len(body) > MAX_BODY_BYTES:
        raise BatchError(413, "too_large", f"the batch is over {MAX_BODY_BYTES} bytes")
    media = content_type.split(";", maxsplit=1)[0].strip().lower()
    if media in ("application/x-ndjson", "application/ndjson", "application/jsonl",
                 "application/jsonlines"):
        records = _ndjson(body)
    else:
        stripped = body.lstrip()
        if stripped[:1] != b"[":
            raise BatchError(400, "invalid_body", "the body must be a JSON array of records "
                             "(or NDJSON with Content-Type application/x-ndjson)")
        try:
            records = RECORDS.validate_json(body)
        except ValidationError as exc:
            raise _field_error(exc, None, 1) from None
    if len(records) > MAX_RECORDS:
        raise BatchError(413, "too_large", f"{len(records)} records: at most {MAX_RECORDS} "
                         "a batch")
    latest = (now or datetime.now(UTC)) + MAX_SKEW
    # the newest first (a loop in C), the index only of a batch refused: the hot path
    if records and max(map(_AT, records)) > latest:
        index = next(i for i, r in enumerate(records) if r["at"] > latest)
        raise BatchError(400, "invalid_record", f"record {index}, field at: "
                         f"{records[index]['at'].isoformat()} is in the future", index, "at",
                         "in_the_future")
    return list(map(to_rollout, records))


def _ndjson(body: bytes) -> list[RolloutRecord]:
    records: list[RolloutRecord] = []
    for line in body.splitlines():
        if not line.strip():
            continue
        if len(records) >= MAX_RECORDS:
            raise BatchError(413, "too_large", f"over {MAX_RECORDS} records a batch")
        try:
            records.append(RECORD.validate_json(line))
        except ValidationError as exc:
            raise _field_error(exc, len(records), 0) from None
    return records
