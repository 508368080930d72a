"""Storm's data model: :class:`Fields`, :class:`Values` and :class:`Tuple`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kstorm.errors import FieldError, TopologyError

DEFAULT_STREAM = "default"
_new = object.__new__


class Fields(Sequence[str]):
    """An ordered list of unique field names.

    Example:
        >>> Fields("word", "count").index("count")
        1
    """

    __slots__ = ("_names", "_index")

    def __init__(self, *names: str | Iterable[str]) -> None:
        flat: list[str] = []
        for name in names:
            if isinstance(name, str):
                flat.append(name)
            else:
                flat.extend(name)
        for name in flat:
            if not isinstance(name, str) or not name:
                msg = f"field names must be non-empty strings, got {name!r}"
                raise TopologyError(msg)
        dupes = sorted({n for n in flat if flat.count(n) > 1})
        if dupes:
            msg = f"duplicate field name(s) {dupes} in Fields{tuple(flat)}"
            raise TopologyError(msg)
        self._names = tuple(flat)
        self._index = {n: i for i, n in enumerate(flat)}

    def __getitem__(self, i):  # type: ignore[override]
        return self._names[i]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fields):
            return self._names == other._names
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields{self._names!r}"

    def index(self, name: str, *args: Any) -> int:  # type: ignore[override]
        """Position of ``name``; raises :class:`FieldError` if absent."""
        try:
            return self._index[name]
        except KeyError:
            msg = f"no field {name!r}; the fields are {list(self._names)}"
            raise FieldError(msg) from None

    @property
    def names(self) -> tuple[str, ...]:
        """The names as a tuple (what iterating gives, without a call per use)."""
        return self._names

    def to_list(self) -> list[str]:
        """The names as a list."""
        return list(self._names)

    # Storm's ``Fields`` methods, by their snake_case names.

    def size(self) -> int:
        """How many fields (Storm ``size``)."""
        return len(self._names)

    def get(self, i: int) -> str:
        """Name of the field at position ``i`` (Storm ``get``)."""
        return self._names[i]

    def field_index(self, name: str) -> int:
        """Position of ``name``; raises :class:`FieldError` if absent (Storm ``fieldIndex``)."""
        return self.index(name)

    def contains(self, name: str) -> bool:
        """Whether ``name`` is one of the fields (Storm ``contains``)."""
        return name in self._index

    def select(self, selector: Iterable[str], values: Sequence[Any]) -> list[Any]:
        """The ``values`` (in this order of fields) of the fields in ``selector``.

        Example:
            >>> Fields("word", "count").select(Fields("count"), ["cat", 2])
            [2]
        """
        return [values[self.index(name)] for name in selector]


class Values(list):
    """The values of one emitted tuple, in declared field order (Storm ``Values``).

    Example:
        >>> Values("hello", 1)
        ['hello', 1]
    """

    def __init__(self, *values: Any) -> None:
        super().__init__(values)


class Tuple:
    """A tuple received by a bolt: values, their field names and where it came from.

    Example:
        >>> t = Tuple(["cat", 2], Fields("word", "count"), "split", "default")
        >>> t.get_value_by_field("count")
        2
    """

    __slots__ = ("values", "fields", "source_component", "source_stream", "message_id",
                 "source_task", "_ids", "_seq")

    def __init__(self, values: Sequence[Any], fields: Fields, source_component: str,
                 source_stream: str = DEFAULT_STREAM, message_id: Any = None,
                 source_task: int = 0) -> None:
        self.values = list(values)
        self.fields = fields
        self.source_component = source_component
        self.source_stream = source_stream
        self.message_id = message_id
        self.source_task = source_task
        self._ids: Any = None  # reliability bookkeeping (anchors), owned by the runtime
        self._seq: int | None = None  # emit position (kstorm._runtime.envelope.emit_seq)

    @classmethod
    def _received(cls, values: list[Any], fields: Fields, source_component: str,
                  source_stream: str) -> Tuple:
        """A tuple the runtime received: ``values`` is its own new list, used as is (no copy)."""
        t = _new(cls)
        t.values = values
        t.fields = fields
        t.source_component = source_component
        t.source_stream = source_stream
        t.message_id = None
        t.source_task = 0
        t._ids = None
        t._seq = None
        return t

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        pairs = ", ".join(f"{n}={v!r}" for n, v in zip(self.fields, self.values, strict=False))
        return f"Tuple({self.source_component}:{self.source_stream}, {pairs})"

    def get_fields(self) -> Fields:
        """The tuple's field names."""
        return self.fields

    def get_value(self, i: int) -> Any:
        """Value at position ``i``."""
        return self.values[i]

    def get_value_by_field(self, name: str) -> Any:
        """Value of field ``name``; raises :class:`FieldError` naming the source component."""
        try:
            return self.values[self.fields._index[name]]
        except KeyError:
            msg = (
                f"tuple from {self.source_component!r} stream {self.source_stream!r} has no "
                f"field {name!r}; its fields are {self.fields.to_list()}"
            )
            raise FieldError(
                msg
            ) from None

    def contains(self, name: str) -> bool:
        """Whether the tuple has field ``name``."""
        return name in self.fields

    def size(self) -> int:
        """How many values the tuple has (Storm ``size``)."""
        return len(self.values)

    def field_index(self, name: str) -> int:
        """Position of field ``name`` (Storm ``fieldIndex``); :class:`FieldError` if absent."""
        return self.fields.index(name)

    def get_values(self) -> list[Any]:
        """The tuple's values, in field order (Storm ``getValues``)."""
        return self.values

    # Typed getters (Storm ``ITuple``): the value at ``i`` if it has the type, None for a
    # null value (as Storm's casts return null), else a TypeError naming field and source.

    def get_string(self, i: int) -> str | None:
        """Value at ``i`` as ``str``; None for a null value."""
        return _typed(self, i, str)

    def get_integer(self, i: int) -> int | None:
        """Value at ``i`` as ``int``; None for a null value."""
        return _typed(self, i, int)

    def get_long(self, i: int) -> int | None:
        """Alias of :meth:`get_integer` (Python ints are unbounded)."""
        return _typed(self, i, int)

    def get_short(self, i: int) -> int | None:
        """Alias of :meth:`get_integer`."""
        return _typed(self, i, int)

    def get_byte(self, i: int) -> int | None:
        """Alias of :meth:`get_integer`."""
        return _typed(self, i, int)

    def get_double(self, i: int) -> float | None:
        """Value at ``i`` as ``float`` (an int is converted); None for a null value."""
        value = _typed(self, i, (int, float))
        return None if value is None else float(value)

    def get_float(self, i: int) -> float | None:
        """Alias of :meth:`get_double`."""
        return self.get_double(i)

    def get_boolean(self, i: int) -> bool | None:
        """Value at ``i`` as ``bool``; None for a null value."""
        return _typed(self, i, bool)

    def get_binary(self, i: int) -> bytes | None:
        """Value at ``i`` as ``bytes``; None for a null value."""
        return _typed(self, i, (bytes, bytearray))

    def get_string_by_field(self, name: str) -> str | None:
        """Field ``name`` as ``str``; None for a null value."""
        return self.get_string(self.fields.index(name))

    def get_integer_by_field(self, name: str) -> int | None:
        """Field ``name`` as ``int``; None for a null value."""
        return self.get_integer(self.fields.index(name))

    def get_long_by_field(self, name: str) -> int | None:
        """Field ``name`` as ``int``; None for a null value."""
        return self.get_long(self.fields.index(name))

    def get_double_by_field(self, name: str) -> float | None:
        """Field ``name`` as ``float``; None for a null value."""
        return self.get_double(self.fields.index(name))

    def get_boolean_by_field(self, name: str) -> bool | None:
        """Field ``name`` as ``bool``; None for a null value."""
        return self.get_boolean(self.fields.index(name))

    def get_binary_by_field(self, name: str) -> bytes | None:
        """Field ``name`` as ``bytes``; None for a null value."""
        return self.get_binary(self.fields.index(name))

    def get_short_by_field(self, name: str) -> int | None:
        """Alias of :meth:`get_integer_by_field`."""
        return self.get_short(self.fields.index(name))

    def get_byte_by_field(self, name: str) -> int | None:
        """Alias of :meth:`get_integer_by_field`."""
        return self.get_byte(self.fields.index(name))

    def get_float_by_field(self, name: str) -> float | None:
        """Alias of :meth:`get_double_by_field`."""
        return self.get_float(self.fields.index(name))

    def select(self, fields: Fields) -> list[Any]:
        """Values of ``fields``, in that order."""
        return [self.get_value_by_field(n) for n in fields]

    def get_source_component(self) -> str:
        """Id of the component that emitted the tuple."""
        return self.source_component

    def get_source_stream_id(self) -> str:
        """Stream the tuple was emitted on."""
        return self.source_stream

    def get_message_id(self) -> Any:
        """The spout message id (for Kafka: ``(topic, partition, offset)``)."""
        return self.message_id


TICK_FIELDS = Fields("rate_secs")  # a tick tuple's values: its bolt's period in seconds


class TupleUtils:
    """Storm's ``TupleUtils``: what a received tuple is."""

    @staticmethod
    def is_tick(tuple_: Tuple) -> bool:
        """Whether ``tuple_`` is a tick tuple (``topology.tick.tuple.freq.secs``).

        Example:
            >>> TupleUtils.is_tick(Tuple([5], TICK_FIELDS, "__system", "__tick"))
            True
            >>> TupleUtils.is_tick(Tuple(["cat"], Fields("word"), "split", "default"))
            False
        """
        return tuple_.source_component == "__system" and tuple_.source_stream == "__tick"


def _typed(t: Tuple, i: int, kind: type | tuple[type, ...]) -> Any:
    value = t.values[i]
    if value is None:
        return None
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        name = t.fields[i] if i < len(t.fields) else i
        msg = (
            f"field {name!r} of tuple from {t.source_component!r} is "
            f"{type(value).__name__} {value!r}, not {getattr(kind, '__name__', kind)}"
        )
        raise TypeError(
            msg
        )
    return value
