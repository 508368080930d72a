"""A third sink, written from the sink guide (docs/sinks.md) only: SQLite, exactly once.

docs/sinks.md shows this class; ``tests/sinks/test_docs_sink_guide.py`` checks that it still does.
"""

import json
import sqlite3

from kstorm import BaseSink, CommitRecord, SinkBatch, SinkContext


class SqliteSink(BaseSink):
    """Adds each tuple's ``value`` to its ``key``'s total in SQLite, one transaction a batch."""

    records_offsets = True  # commit() stores txid, offsets and state with the values

    def __init__(self, path: str, key: str, value: str) -> None:
        self.path, self.key, self.value = path, key, value  # settings only: picklable
        self.db = None

    def open(self, context: SinkContext) -> None:
        # commit() runs in another driver thread than open(): one call at a time
        self.db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self.db.execute("CREATE TABLE IF NOT EXISTS totals (k TEXT PRIMARY KEY, v INTEGER)")
        self.db.execute("CREATE TABLE IF NOT EXISTS record (id INTEGER PRIMARY KEY, "
                        "txid INTEGER, offsets TEXT, state BLOB)")

    def commit(self, batch: SinkBatch) -> None:
        if self.committed_txid() >= batch.txid:
            return  # a replay of a batch this sink already has
        with self.db:  # one transaction: the values and the record, or nothing
            self.db.execute("BEGIN")
            for t in batch.tuples:
                row = dict(zip(t.fields, t.values, strict=True))
                self.db.execute("INSERT INTO totals VALUES (?, ?) ON CONFLICT(k) "
                                "DO UPDATE SET v = v + excluded.v",
                                (str(row[self.key]), int(row[self.value])))
            self.db.execute("INSERT OR REPLACE INTO record VALUES (0, ?, ?, ?)",
                            (batch.txid, json.dumps(batch.offsets),
                             json.dumps({k: v.hex() for k, v in batch.state.items()})))

    def committed_txid(self) -> int:
        row = self.db.execute("SELECT txid FROM record WHERE id = 0").fetchone()
        return -1 if row is None else row[0]

    def committed_offsets(self) -> CommitRecord | None:
        row = self.db.execute("SELECT txid, offsets FROM record WHERE id = 0").fetchone()
        if row is None:
            return None
        offsets = {t: {int(p): o for p, o in parts.items()}
                   for t, parts in json.loads(row[1]).items()}
        return CommitRecord(row[0], offsets)

    def committed_state(self) -> dict[str, bytes]:
        row = self.db.execute("SELECT state FROM record WHERE id = 0").fetchone()
        return {} if row is None else {k: bytes.fromhex(v) for k, v in json.loads(row[0]).items()}

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "db": None}  # the connection never travels
