"""The ``state-map`` speed-up's private route: a TWS map state on its socket, bytes in and out.

A stateful bolt's :class:`~kstorm.KeyValueState` lives in one TWS ``MapState`` per task
(``k binary``, ``v binary``; ``kstorm/_spark/stage.py``). pyspark's ``MapState`` client
(4.x) turns every key and value into a one-field Row and back: each value the JVM sends is a
pickled Row whose unpickling parses the schema's JSON again (``_parse_datatype_json_string``)
and builds a ``Row``; each key sent goes through ``StructType.toInternal`` and a numpy check.
For a word count that was ~20 µs of Python per state entry read or written, as much as the
bolt's own work on a tuple (py-spy, ``bench/results/topology.md``).

:class:`DirectMap` sends the same requests on the same socket (the protocol of pyspark
4.3.0's ``MapStateClient``: a ``StateRequest`` protobuf, then a response) with the key and
value pickled as pyspark pickles a one-field row, and reads the JVM's pickled rows with an
unpickler that maps pyspark's two row-building functions to a plain tuple
(:func:`row_value`). Its private members: ``MapState._mapStateClient``, ``._stateName``,
the client's ``_stateful_processor_api_client`` and its ``_receive_proto_message*``.

The public route (the ``MapState`` methods), and the choice between the two, stay in
``kstorm/_spark/tws_map.py``.
"""

from __future__ import annotations

import io
import pickle
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

from kstorm.errors import StateServerError

_TYPES = "pyspark.sql.types"
PIPELINE = 64  # update requests in flight on the state server's socket
_RECEIVE = ("_receive_proto_message", "_receive_proto_message_with_map_pairs")


def _schema_json(text: str) -> str:
    """Stands for pyspark's ``_parse_datatype_json_string``: the schema is known (bytes)."""
    return text


def _row(*values: Any) -> tuple[Any, ...]:
    return values


def _row_converter(_schema: Any) -> Any:
    """Stands for pyspark's ``_create_row_inbound_converter``: a row is a plain tuple."""
    return _row


class _RowUnpickler(pickle.Unpickler):
    """Unpickles a Row the JVM pickled (Pyrolite) as a tuple of its internal values."""

    def find_class(self, module: str, name: str) -> Any:
        if module == _TYPES and name == "_parse_datatype_json_string":
            return _schema_json
        if module == _TYPES and name == "_create_row_inbound_converter":
            return _row_converter
        return super().find_class(module, name)


def row_value(blob: bytes) -> Any:
    """The single field of a one-field row the JVM pickled.

    Example:
        >>> row_value(pickle.dumps((b"v",)))
        b'v'
    """
    value = _RowUnpickler(io.BytesIO(blob)).load()[0]
    return bytes(value) if type(value) is bytearray else value


def connect(map_state: Any) -> tuple[DirectMap | None, str]:
    """``map_state`` spoken to on its state server's socket, or None and why it cannot be.

    ``(DirectMap, "")`` where pyspark's client has every member this route uses;
    ``(None, why)`` where one is missing (the caller takes the public route).
    """
    try:
        from pyspark.serializers import pickle_protocol, write_int
        from pyspark.sql.streaming.proto import StateMessage_pb2

        client = map_state._mapStateClient._stateful_processor_api_client
        name = map_state._stateName
    except (ImportError, AttributeError) as exc:
        return None, f"pyspark's MapState client has no {getattr(exc, 'name', None) or exc}"
    missing = [m for m in _RECEIVE if not callable(getattr(client, m, None))]
    if not hasattr(client, "sockfile"):
        missing.insert(0, "sockfile")
    if missing:
        return None, f"pyspark's state server client has no {', '.join(missing)}"
    return DirectMap(client, name, StateMessage_pb2, pickle_protocol, write_int), ""


class DirectMap:
    """get / update / iterate a ``MapState`` of one binary key and value field, on its socket.

    Example:
        >>> m, _ = connect(map_state)                  # doctest: +SKIP
        >>> m.update_all([(b"k", b"v")]); m.get(b"k")  # doctest: +SKIP
        b'v'
    """

    def __init__(self, client: Any, name: str, pb: Any, protocol: int, write_int: Any) -> None:
        self._client = client
        self._name = name
        self._pb = pb
        self._protocol = protocol
        self._write_int = write_int

    # -- the wire -------------------------------------------------------------------------
    def _call(self, **call: Any) -> Any:
        """Send one ``MapStateCall`` and read the plain response (status, error, value)."""
        self._send(**call)
        return self._client._receive_proto_message()

    def _send(self, *, flush: bool = True, **call: Any) -> None:
        pb = self._pb
        message = pb.StateRequest(stateVariableRequest=pb.StateVariableRequest(
            mapStateCall=pb.MapStateCall(stateName=self._name, **call)))
        data = message.SerializeToString()
        out = self._client.sockfile
        self._write_int(0, out)  # the message version
        self._write_int(len(data), out)
        out.write(data)
        if flush:
            out.flush()

    def _row(self, field: bytes) -> bytes:
        """A one-field row as pyspark sends it (``StructType.toInternal``, then pickled)."""
        return pickle.dumps((field,), self._protocol)

    # -- the map --------------------------------------------------------------------------
    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or None."""
        status, error, value = self._call(getValue=self._pb.GetValue(userKey=self._row(key)))
        if status != 0:
            msg = f"TWS map state {self._name!r}: get failed: {error}"
            raise StateServerError(msg)
        return row_value(value) if value else None

    def update_all(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        """Store each ``(key, value)``, :data:`PIPELINE` requests per round trip.

        The state server answers a connection's requests in order, one after the other: a
        window of requests is sent, then its answers are read (small enough for the
        socket buffers, so neither side waits on the other).
        """
        window: list[bytes] = []
        for key, value in entries:
            window.append(key)
            self._send(updateValue=self._pb.UpdateValue(userKey=self._row(key),
                                                        value=self._row(value)), flush=False)
            if len(window) >= PIPELINE:
                self._answers(window)
        self._answers(window)

    def _answers(self, window: list[bytes]) -> None:
        """Read one answer per request of ``window`` (then empty it); raise on a refusal.

        The window's requests are flushed first, in one write: the socket has no Nagle
        delay (``TCP_NODELAY``), so a flush per request would be a TCP segment each.
        """
        self._client.sockfile.flush()
        errors = [error for status, error, _ in
                  (self._client._receive_proto_message() for _ in window) if status != 0]
        window.clear()
        if errors:
            msg = f"TWS map state {self._name!r}: update failed: {errors[0]}"
            raise StateServerError(msg)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of the map, fetched many per round trip (one pass)."""
        pb, client = self._pb, self._client
        iterator_id = str(uuid.uuid4())
        while True:
            self._send(iterator=pb.Iterator(iteratorId=iterator_id))
            status, _, pairs, more = client._receive_proto_message_with_map_pairs()
            if status != 0:  # pyspark's client ends the iteration on any other status too
                return
            for pair in pairs:
                yield row_value(pair.key), row_value(pair.value)
            if not more:
                return
