"""kstorm's own client of a stateful stage's TWS map state (kstorm/_spark/speedups/state_map.py,
chosen by kstorm/_spark/tws_map.py).

The state server itself is exercised by the integration tests of stateful bolts on Spark
(test_state_kill.py, test_state_providers.py, ...); here: the bytes it is sent, the rows
it answers with, and the order of requests and answers when updates are pipelined.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

import pytest
from pyspark.sql.streaming.proto import StateMessage_pb2 as pb
from pyspark.sql.types import (
    BinaryType,
    StructField,
    StructType,
    _create_row_inbound_converter,
    _parse_datatype_json_string,
)

from kstorm._spark.speedups.state_map import PIPELINE, row_value
from kstorm._spark.stage import MapStateKeyValue
from kstorm._spark.tws_map import BinaryMap
from kstorm.errors import StateServerError

SCHEMA_JSON = StructType([StructField("v", BinaryType())]).json()


class _Schema:
    def __reduce__(self) -> Any:
        return _parse_datatype_json_string, (SCHEMA_JSON,)


class _Converter:
    def __call__(self, *a: Any) -> Any:  # pragma: no cover - pickling needs a callable
        raise AssertionError

    def __reduce__(self) -> Any:
        return _create_row_inbound_converter, (_Schema(),)


class _JvmRow:
    """Pickles as the JVM (Pyrolite) pickles a Row: converter(schema)(*values)."""

    def __init__(self, *values: Any) -> None:
        self.values = values

    def __reduce__(self) -> Any:
        return _Converter(), self.values


def jvm_row(*values: Any) -> bytes:
    return pickle.dumps(_JvmRow(*values), protocol=2)


def test_a_jvm_row_reads_as_its_value_and_pyspark_agrees() -> None:
    blob = jvm_row(b"\x00value")
    assert pickle.loads(blob)[0] == b"\x00value"  # pyspark's own reading: a Row
    assert row_value(blob) == b"\x00value"
    assert row_value(jvm_row(bytearray(b"ba"))) == b"ba"
    assert type(row_value(jvm_row(bytearray(b"ba")))) is bytes  # usable as a dict key


class SocketFile:
    """A buffered socket file: the state server sees what was flushed, nothing more."""

    def __init__(self) -> None:
        self.sent = io.BytesIO()
        self.buffer = bytearray()
        self.flushes = 0

    def write(self, data: bytes) -> int:
        self.buffer += data
        return len(data)

    def flush(self) -> None:
        self.sent.write(self.buffer)
        self.buffer.clear()
        self.flushes += 1

    def getvalue(self) -> bytes:
        return self.sent.getvalue()


class FakeStateServer:
    """pyspark's state-server client as BinaryMap uses it: a socket file and answers."""

    def __init__(self, store: dict[bytes, bytes], *, refuse: bytes | None = None,
                 chunk: int = 3) -> None:
        self.sockfile = SocketFile()
        self.store, self.refuse, self.chunk = store, refuse, chunk
        self.read = 0                # bytes of sockfile handled
        self.outstanding_max = 0     # requests sent and not yet answered, at most
        self.answers: list[Any] = []
        self.iterators: dict[str, list[tuple[bytes, bytes]]] = {}

    def _requests(self) -> None:
        """Handle every request written since the last look, queueing its answer."""
        data = self.sockfile.getvalue()
        while self.read < len(data):
            version, length = struct.unpack("!ii", data[self.read:self.read + 8])
            assert version == 0
            message = pb.StateRequest()
            message.ParseFromString(data[self.read + 8:self.read + 8 + length])
            self.read += 8 + length
            self.answers.append(self._handle(message.stateVariableRequest.mapStateCall))
        self.outstanding_max = max(self.outstanding_max, len(self.answers))

    def _handle(self, call: Any) -> Any:
        assert call.stateName == "kv"
        kind = call.WhichOneof("method")
        if kind == "getValue":
            key = pickle.loads(call.getValue.userKey)[0]
            value = self.store.get(key)
            return (0, "", jvm_row(value) if value is not None else b"")
        if kind == "updateValue":
            key = pickle.loads(call.updateValue.userKey)[0]
            if key == self.refuse:
                return (1, "refused", b"")
            self.store[key] = pickle.loads(call.updateValue.value)[0]
            return (0, "", b"")
        if kind == "iterator":
            left = self.iterators.setdefault(call.iterator.iteratorId,
                                             sorted(self.store.items()))
            pairs, self.iterators[call.iterator.iteratorId] = left[:self.chunk], left[self.chunk:]
            kv = [pb.KeyAndValuePair(key=jvm_row(k), value=jvm_row(v)) for k, v in pairs]
            return (0, "", kv, bool(left[self.chunk:]))
        raise AssertionError(kind)

    def _receive_proto_message(self) -> Any:
        self._requests()
        assert self.answers, "waiting for an answer to a request that was never flushed"
        return self.answers.pop(0)

    def _receive_proto_message_with_map_pairs(self) -> Any:
        return self._receive_proto_message()


class FakeMapState:
    def __init__(self, server: FakeStateServer) -> None:
        self._stateName = "kv"
        self._mapStateClient = type("C", (), {})()
        self._mapStateClient._stateful_processor_api_client = server


def binary_map(store: dict[bytes, bytes], **kw: Any) -> tuple[BinaryMap, FakeStateServer]:
    server = FakeStateServer(store, **kw)
    found = BinaryMap(FakeMapState(server))
    assert found.fast
    return found, server


def test_get_update_and_iterate_speak_pysparks_protocol() -> None:
    m, server = binary_map({b"a": b"1", b"b": b"2"})
    assert m.get(b"a") == b"1" and m.get(b"zz") is None
    m.update(b"c", b"3")
    assert server.store[b"c"] == b"3"
    assert dict(m.items()) == {b"a": b"1", b"b": b"2", b"c": b"3"}  # 3 per fetch: 1 more


def test_updates_are_pipelined_in_windows_and_all_answers_are_read() -> None:
    m, server = binary_map({})
    entries = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(PIPELINE * 2 + 5)]
    m.update_all(entries)
    assert server.store == dict(entries)
    assert server.outstanding_max == PIPELINE  # never more in flight than a window
    assert server.answers == []  # every answer read: the next request starts clean
    assert server.sockfile.flushes == 3  # one write per window, not one per request
    assert m.get(b"k0") == b"v0"


def test_a_refused_update_raises_after_its_window_is_read() -> None:
    m, server = binary_map({}, refuse=b"k3")
    with pytest.raises(StateServerError, match="update failed: refused"):
        m.update_all([(f"k{i}".encode(), b"v") for i in range(10)])
    assert server.answers == []
    assert m.get(b"k9") == b"v"  # the connection is still in step


def test_a_large_batch_reads_the_map_by_scanning_it() -> None:
    """After SCAN_AFTER point reads, misses are answered from one pass over the map."""
    store = {pickle.dumps(f"w{i}", protocol=5): pickle.dumps(i, protocol=5) for i in range(200)}
    _, server = binary_map(store, chunk=50)
    state = MapStateKeyValue(FakeMapState(server))
    gets = []
    real_get = state._ms.get
    state._ms.get = lambda key: gets.append(key) or real_get(key)  # type: ignore[method-assign]
    assert [state.get(f"w{i}") for i in range(200)] == list(range(200))
    assert state.get("absent", "none") == "none"
    assert len(gets) < 40  # the rest came from the scan (and "absent" needed no request)
    state.put("w0", -1)
    state.flush()
    assert pickle.loads(store[pickle.dumps("w0", protocol=5)]) == -1


class PublicMapState:
    """pyspark's public MapState methods over a dict (the route without the state server)."""

    def __init__(self, store: dict[bytes, bytes]) -> None:
        self.store = store

    def getValue(self, key: tuple[bytes]) -> tuple[bytes] | None:  # noqa: N802 - pyspark's
        return (self.store[key[0]],) if key[0] in self.store else None

    def updateValue(self, key: tuple[bytes], value: tuple[bytes]) -> None:  # noqa: N802
        self.store[key[0]] = value[0]

    def removeKey(self, key: tuple[bytes]) -> None:  # noqa: N802
        self.store.pop(key[0], None)

    def iterator(self) -> Any:
        return iter([((k,), (v,)) for k, v in sorted(self.store.items())])


def test_the_private_and_public_routes_give_the_same_answers() -> None:
    """One script of reads and writes on each route: the same answers, the same map."""
    direct, server = binary_map({b"a": b"1"})
    public = BinaryMap(PublicMapState({b"a": b"1"}), fast=False)
    assert not public.fast
    seen = []
    for m in (direct, public):
        m.update_all([(f"k{i}".encode(), f"v{i}".encode()) for i in range(PIPELINE + 3)])
        m.update(b"a", b"\x00two")
        seen.append((m.get(b"a"), m.get(b"k7"), m.get(b"nope"), sorted(m.items())))
    assert seen[0] == seen[1]
    assert server.store == public._ms.store


def test_a_client_without_the_private_members_takes_the_public_route_and_says_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from kstorm._spark import speedups

    monkeypatch.delenv(speedups.ENV, raising=False)
    monkeypatch.setattr(speedups, "_said", set())
    class OlderServer(FakeStateServer):  # a pyspark whose client changed
        _receive_proto_message_with_map_pairs = None

    state = FakeMapState(OlderServer({b"a": b"1"}))
    state.getValue = lambda key: (b"public",)  # type: ignore[attr-defined]
    with caplog.at_level("INFO", logger="kstorm"):
        m = BinaryMap(state)
    assert not m.fast and m.get(b"a") == b"public"
    assert "speed-up state-map off: pyspark's state server client has no " \
           "_receive_proto_message_with_map_pairs" in caplog.text
    monkeypatch.setenv(speedups.ENV, "state-map")
    assert not BinaryMap(FakeMapState(FakeStateServer({}))).fast  # the switch


def _tagging(store: dict[bytes, bytes]) -> MapStateKeyValue:
    state = MapStateKeyValue(PublicMapState(store))
    state._ms = BinaryMap(state._ms._ms, fast=False)
    state.tagging = True
    return state


def test_a_keyed_bolt_s_values_carry_their_key_group_and_reads_hide_it() -> None:
    """The spark provider's key groups (kstorm/state/rescale.py): in the value, one write."""
    from kstorm.state.rescale import MIXED, split_value

    store: dict[bytes, bytes] = {}
    state = _tagging(store)
    state.key_group = 7
    state.put("a", state.get("a", 0) + 1)
    state.key_group = None
    state.put("hook", 1)  # written outside execute: no key group
    state.flush()
    assert split_value(store[pickle.dumps("a", protocol=5)]) == (b"7", pickle.dumps(1, 5))
    assert split_value(store[pickle.dumps("hook", protocol=5)])[0] == b"?"
    again = _tagging(store)
    assert again.get("a") == 1 and dict(again) == {"a": 1, "hook": 1}
    again.key_group = 7
    again.put("a", again.get("a") + 1)  # the same key group: stays 7
    again.flush()
    assert split_value(store[pickle.dumps("a", protocol=5)])[0] == b"7"
    third = _tagging(store)
    third.key_group = 5  # another grouping value read and wrote "a": not one key group
    third.put("a", third.get("a") + 1)
    third.flush()
    assert split_value(store[pickle.dumps("a", protocol=5)]) == (MIXED, pickle.dumps(3, 5))
    plain = MapStateKeyValue(PublicMapState(store))  # a bolt that is not keyed: no tag
    plain._ms = BinaryMap(plain._ms._ms, fast=False)
    plain.put("b", 1)
    plain.flush()
    assert store[pickle.dumps("b", protocol=5)] == pickle.dumps(1, protocol=5)
    assert plain.get("a") == 3
