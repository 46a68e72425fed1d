"""The one checked JSON Lines reader: every data read of a `.jsonl` file in the project goes through it.

A damaged file stops the read with a message naming the file, the line and (when the record has one)
its id, instead of a bare `JSONDecodeError` or a library error naming no file:

    file mathdata/benchmarks/aime24.jsonl is empty
    mathdata/benchmarks/amc23.jsonl:4: not valid JSON, truncated or damaged (Unterminated string ...)
    data/prepared/tiny/train.jsonl:12: record q17 has no answer

Blank lines are skipped. Files we append to (logs) may pass `drop_partial_tail=True`: a last line
without its newline that does not parse is what a writer killed mid-line leaves, and is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

__all__ = ["JsonlError", "read_jsonl"]


class JsonlError(ValueError):
    """A missing, empty or malformed JSON Lines file; the message names file, line and record id."""


def _record_id(record: Any, id_key: str) -> str:
    rid = record.get(id_key) if isinstance(record, dict) else None
    return str(rid) if rid is not None else "<no id>"


def read_jsonl(path: str | Path, required: Iterable[str] = (), id_key: str = "id", allow_empty: bool = False,
               drop_partial_tail: bool = False, nonempty_strings: bool = False) -> list[dict]:
    """The records (JSON objects) of `path`, in file order.

    required: keys every record must have (with `nonempty_strings`, as non-blank strings).
    allow_empty: an empty file (no records) gives [] instead of an error.
    drop_partial_tail: drop an unparsable last line that has no newline (a killed appender's).
    Raises JsonlError naming `path`, the 1-based line number and the record id.
    """
    path = Path(path)
    required = tuple(required)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        raise JsonlError(f"file {path} does not exist") from None
    except OSError as exc:
        raise JsonlError(f"file {path} cannot be read: {exc.strerror or exc}") from None
    lines = blob.split(b"\n")
    records: list[dict] = []
    for line_no, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonlError(f"{path}:{line_no}: not UTF-8 text (byte {exc.start} of the line)") from None
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            if drop_partial_tail and line_no == len(lines):  # no newline after it: a torn last write
                break
            raise JsonlError(f"{path}:{line_no}: not valid JSON, truncated or damaged "
                             f"({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise JsonlError(f"{path}:{line_no}: expected a JSON object, got {type(record).__name__}")
        for key in required:
            value = record.get(key)
            if value is None or (nonempty_strings and (not isinstance(value, str) or not value.strip())):
                raise JsonlError(f"{path}:{line_no}: record {_record_id(record, id_key)} has no {key}")
        records.append(record)
    if not records and not allow_empty:
        raise JsonlError(f"file {path} is empty (no JSON records)")
    return records
