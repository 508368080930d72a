r"""Vectorized parsing of many JSON objects with ``pyarrow.json``, isolating the bad ones.

Arrow is the judge of every record: a record is good when, parsed alone, Arrow reads it as
exactly one row of the explicit schema. Parsing a range of records is the same as parsing
each alone, so a record's fate never depends on its neighbours:

1. Screen cheaply: a record must be valid UTF-8 (Arrow does not check) and its first
   non-whitespace byte must be ``{`` (this also rules out empty records, which Arrow
   would silently skip, so "rows read == records given" proves the rows line up).
2. Join the records with ``\n`` (a newline inside a record is whitespace between tokens
   or an error, so it becomes a tab: same verdict, one line per record) and read them all.
3. If the read fails or yields the wrong number of rows, split the range and read the
   parts. A parse error names its row (``... in row r``): the rows before it are read
   together, the suspect alone, the rest in two halves; otherwise the range is bisected.
   A small failed range is first screened record by record with the stdlib parser
   (``suspect``): suspects are read alone and the runs between them together. A range of
   one record that still fails is a bad record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json

_ROW_HINT = re.compile(r" in row (\d+)")
_WHITESPACE = b" \t\r\n"
_MAX_BLOCK = 2**31 - 1
_SCREEN_BELOW = 256  # failed ranges this small are screened in Python instead of bisected


@dataclass(slots=True)
class ReadOutcome:
    """``table`` holds the rows of the records at positions ``good`` (ascending)."""

    table: pa.Table
    good: np.ndarray  # int64 positions into the records given
    bad: dict[int, str]  # position -> Arrow's (or the screen's) reason


def read_objects(
    records: Sequence[bytes], schema: pa.Schema, suspect: Callable[[bytes], bool]
) -> ReadOutcome:
    """Parse ``records`` (bytes, no ``None``) as JSON objects into ``schema``.

    ``suspect(record)`` is a cheap per-record guess that a record is bad; it only steers
    the search (Arrow still decides), so a wrong guess costs time, never correctness.
    """
    bad: dict[int, str] = {}
    joined = b"\n".join(records)
    lengths = np.fromiter(map(len, records), dtype=np.int64, count=len(records))
    positions = _screen(records, joined, lengths, bad)  # Step 1
    lines = records
    if positions is not None:
        lines = [records[p] for p in positions.tolist()]
        joined = b"\n".join(lines)
        lengths = lengths[positions]
    if joined.count(b"\n") != max(len(lines) - 1, 0):  # Step 2
        lines = [line.replace(b"\n", b"\t") for line in lines]
        joined = b"\n".join(lines)
    starts = np.zeros(len(lines) + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=starts[1:])
    view = memoryview(joined)
    pieces: list[tuple[int, pa.Table]] = []
    bad_lines: dict[int, str] = {}
    pending = [(0, len(lines), False)] if lines else []
    while pending:  # Step 3
        lo, hi, screened = pending.pop()
        table, error = _read(view[starts[lo] : starts[hi] - 1], schema)
        if table is not None and table.num_rows == hi - lo:
            pieces.append((lo, table))
        elif hi - lo == 1:
            rows = "no" if table is None else table.num_rows
            bad_lines[lo] = error or f"expected one JSON object, read {rows} rows"
        elif hi - lo < _SCREEN_BELOW and not screened:
            pending.extend(reversed(_by_suspicion(lo, hi, lines, suspect)))
        else:
            pending.extend((a, b, False) for a, b in reversed(_split(lo, hi, error)))
    pieces.sort(key=lambda piece: piece[0])
    ranges = [np.arange(lo, lo + t.num_rows, dtype=np.int64) for lo, t in pieces]
    good = np.concatenate(ranges) if ranges else np.empty(0, dtype=np.int64)
    tables = [table for _, table in pieces] or [schema.empty_table()]
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if positions is None:
        return ReadOutcome(table, good, bad_lines)
    bad.update((int(positions[line]), reason) for line, reason in bad_lines.items())
    return ReadOutcome(table, positions[good], bad)


def _screen(
    records: Sequence[bytes], joined: bytes, lengths: np.ndarray, bad: dict[int, str]
) -> np.ndarray | None:
    """Positions of records that may be JSON objects (None: all); the others go to ``bad``."""
    check: set[int] | range = range(len(records))
    if joined and (joined.isascii() or _is_utf8(joined)):
        starts = np.cumsum(lengths + 1) - (lengths + 1)
        head = np.frombuffer(joined, dtype=np.uint8)[np.minimum(starts, len(joined) - 1)]
        suspects = np.flatnonzero((lengths == 0) | (head != ord("{")))
        if len(suspects) == 0:
            return None
        check = set(suspects.tolist())
    keep: list[int] = []
    for position, record in enumerate(records):
        if position not in check:
            keep.append(position)
        elif not _is_utf8(record):
            bad[position] = "not valid UTF-8"
        elif record.lstrip(_WHITESPACE)[:1] == b"{":
            keep.append(position)
        else:
            bad[position] = "not a JSON object"
    return np.asarray(keep, dtype=np.int64)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _read(buffer: memoryview, schema: pa.Schema) -> tuple[pa.Table | None, str | None]:
    read_options = pa_json.ReadOptions(
        use_threads=False, block_size=min(max(len(buffer) + 1, 1 << 16), _MAX_BLOCK)
    )
    parse_options = pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    try:
        source = pa.BufferReader(pa.py_buffer(buffer))
        table = pa_json.read_json(source, read_options=read_options, parse_options=parse_options)
    except Exception as exc:  # whatever Arrow raised, this range holds a bad record
        return None, str(exc) or type(exc).__name__
    return table, None


def _by_suspicion(
    lo: int, hi: int, lines: Sequence[bytes], suspect: Callable[[bytes], bool]
) -> list[tuple[int, int, bool]]:
    """Sub-ranges of ``[lo, hi)``: each suspect alone, the runs between them together."""
    parts: list[tuple[int, int, bool]] = []
    run_start = lo
    for i in range(lo, hi):
        if suspect(lines[i]):
            if run_start < i:
                parts.append((run_start, i, True))
            parts.append((i, i + 1, True))
            run_start = i + 1
    if run_start < hi:
        parts.append((run_start, hi, True))
    return parts


def _split(lo: int, hi: int, error: str | None) -> list[tuple[int, int]]:
    """Sub-ranges of a failed range, in order; each strictly smaller than ``[lo, hi)``."""
    hint = _ROW_HINT.search(error or "")
    row = int(hint.group(1)) if hint else -1
    if not 0 <= row < hi - lo:
        mid = (lo + hi) // 2
        return [(lo, mid), (mid, hi)]
    suspect = lo + row
    parts = [(lo, suspect)] if row else []
    parts.append((suspect, suspect + 1))
    rest = suspect + 1
    if hi - rest == 1:
        parts.append((rest, hi))
    elif hi - rest > 1:
        mid = (rest + hi) // 2
        parts.extend([(rest, mid), (mid, hi)])
    return parts
