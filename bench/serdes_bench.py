"""Serde throughput: kstorm's serde path against the libraries it wraps.

Run: ``python -m bench.serdes_bench``  (or ``python bench/serdes_bench.py``; ~25 s idle)

Avro (200k records, schema ``Event`` below): kstorm's ``AvroSerde.deserialize_batch``
(bytes -> one Arrow record batch, failures isolated) and ``AvroSerde.serialize`` (Arrow-
shaped row -> bytes) against a plain loop of fastavro's ``schemaless_reader`` (bytes ->
dicts, no Arrow) and ``schemaless_writer``; ``ConfluentAvroSerde`` (mock registry) decodes
the same bodies behind the 5-byte header. JSON (500k records like
``{"key": "k123", "ts": 1700000000000, "value": 42}``): ``JsonSerde.deserialize_batch``
with the schema ``{key: str, ts: int, value: int}`` against ``[json.loads(v) for v in
values]``. Each figure is the best of ``REPEATS`` runs (wall and CPU time), one thread
(pyarrow's JSON reader is run with ``use_threads=False``). Prints a table and writes
``bench/results/serdes.md``.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fastavro  # noqa: E402
import pyarrow as pa  # noqa: E402

from serdes import AvroSerde, ConfluentAvroSerde, JsonSerde  # noqa: E402

AVRO_RECORDS = 200_000
JSON_RECORDS = 500_000
REPEATS = 3
RESULTS = Path(__file__).resolve().parent / "results" / "serdes.md"
EVENT = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "key", "type": "string"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "value", "type": "long"},
        {"name": "score", "type": "double"},
        {"name": "tag", "type": ["null", "string"]},
    ],
}


def best_rate(n: int, run: Callable[[], object]) -> tuple[float, float]:
    """Records per second of wall time and of CPU time, best of ``REPEATS`` runs.

    On a busy shared machine the CPU-time rate is the fairer per-core figure.
    """
    wall = cpu = float("inf")
    for _ in range(REPEATS):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return n / wall, n / max(cpu, 1e-9)


def avro_rows() -> list[list[object]]:
    epoch = dt.datetime(2023, 11, 14, tzinfo=dt.UTC)
    return [
        [f"k{i}", epoch + dt.timedelta(milliseconds=i), i, i / 7, None if i % 3 else "t"]
        for i in range(AVRO_RECORDS)
    ]


def bench_avro() -> list[tuple[str, str, tuple[float, float]]]:
    serde = AvroSerde(EVENT)
    parsed = fastavro.parse_schema(EVENT)
    rows = avro_rows()
    dicts = [dict(zip(serde.fields(), row, strict=True)) for row in rows]
    bodies = [serde.serialize(row) for row in rows]
    confluent = ConfluentAvroSerde("mock://bench", subject="bench-value", reader_schema=EVENT)
    framed = [confluent.serialize(rows[0])[:5] + body for body in bodies]

    def fastavro_read() -> list[object]:
        return [fastavro.schemaless_reader(io.BytesIO(b), parsed) for b in bodies]

    def fastavro_write() -> list[bytes]:
        out = []
        for record in dicts:
            sink = io.BytesIO()
            fastavro.schemaless_writer(sink, parsed, record)
            out.append(sink.getvalue())
        return out

    assert serde.deserialize_batch(bodies).batch.num_rows == AVRO_RECORDS
    assert fastavro_write() == bodies  # same bytes both ways
    n = AVRO_RECORDS
    return [
        ("Avro decode", "fastavro schemaless_reader loop (dicts)", best_rate(n, fastavro_read)),
        (
            "Avro decode",
            "kstorm AvroSerde.deserialize_batch (Arrow)",
            best_rate(n, lambda: serde.deserialize_batch(bodies)),
        ),
        (
            "Avro decode",
            "kstorm ConfluentAvroSerde.deserialize_batch (Arrow)",
            best_rate(n, lambda: confluent.deserialize_batch(framed)),
        ),
        ("Avro encode", "fastavro schemaless_writer loop", best_rate(n, fastavro_write)),
        (
            "Avro encode",
            "kstorm AvroSerde.serialize loop",
            best_rate(n, lambda: [serde.serialize(row) for row in rows]),
        ),
    ]


def bench_json() -> list[tuple[str, str, tuple[float, float]]]:
    serde = JsonSerde({"key": str, "ts": int, "value": int})
    values = [
        b'{"key": "k%d", "ts": %d, "value": %d}' % (i, 1700000000000 + i, i % 1000)
        for i in range(JSON_RECORDS)
    ]
    result = serde.deserialize_batch(values)
    assert result.batch.num_rows == JSON_RECORDS and not result.failures
    n = JSON_RECORDS
    return [
        (
            "JSON decode",
            "json.loads loop (dicts)",
            best_rate(n, lambda: [json.loads(v) for v in values]),
        ),
        (
            "JSON decode",
            "kstorm JsonSerde.deserialize_batch (Arrow)",
            best_rate(n, lambda: serde.deserialize_batch(values)),
        ),
    ]


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": str(os.cpu_count()),
        "CPU": cpu,
        "Python": platform.python_version(),
        "pyarrow": pa.__version__,
        "fastavro": fastavro.__version__,
        "OS": platform.platform(),
        "load average (1 min) at the end": f"{os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    started = time.perf_counter()
    rows = bench_avro() + bench_json()
    table = ["| what | path | records/s (wall) | records/CPU-s |", "| --- | --- | ---: | ---: |"]
    table += [f"| {what} | {path} | {wall:,.0f} | {cpu:,.0f} |" for what, path, (wall, cpu) in rows]
    info = machine()
    elapsed = time.perf_counter() - started
    report = [
        "# Serde throughput",
        "",
        "Command: `python -m bench.serdes_bench` (from the repository root)",
        "",
        f"Records: Avro {AVRO_RECORDS:,} (`Event`: string, timestamp-millis, long, double,"
        f" [null, string]); JSON {JSON_RECORDS:,} (`{{key, ts, value}}`, schema"
        f" `{{key: str, ts: int, value: int}}`). Best of {REPEATS} runs, one thread.",
        "",
        *table,
        "",
        "Machine: " + "; ".join(f"{k} {v}" for k, v in info.items()),
        f"Run took {elapsed:.0f} s, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. The machine is"
        " shared with other work (see the load average), so figures vary between runs.",
        "",
    ]
    print("\n".join(table))
    print("\n" + report[-3])
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(report))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
