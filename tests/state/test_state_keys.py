"""State keys are canonical, values keep their types, delete and iteration work (seed 000)."""

from __future__ import annotations

import pickle
from typing import Any

from kstorm._spark.stage import MapStateKeyValue
from kstorm.state import canonical_key, encode_key


class FakeMapState:
    """Spark's TWS ``MapState`` as the stage uses it: keys and values are 1-tuples of bytes."""

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}

    def getValue(self, key: tuple[bytes]) -> tuple[bytes] | None:  # noqa: N802 - Spark's name
        value = self.data.get(key[0])
        return None if value is None else (value,)

    def updateValue(self, key: tuple[bytes], value: tuple[bytes]) -> None:  # noqa: N802
        self.data[key[0]] = value[0]

    def removeKey(self, key: tuple[bytes]) -> None:  # noqa: N802
        self.data.pop(key[0], None)

    def iterator(self) -> Any:
        return (((k,), (v,)) for k, v in list(self.data.items()))


def test_equal_keys_are_one_entry_whatever_object_identity_pickle_sees() -> None:
    one, other = "word", "".join(["wo", "rd"])
    assert one is not other
    store = FakeMapState()
    state = MapStateKeyValue(store)
    state.put((one, one), 1)
    state.flush()
    again = MapStateKeyValue(store)  # the next batch: nothing cached
    assert again.get((one, other)) == 1
    again.put((other, one), 2)
    again.flush()
    assert len(store.data) == 1 and MapStateKeyValue(store).get((one, one)) == 2


def test_keys_without_repeated_parts_encode_as_before() -> None:
    """Existing checkpoints keep their entries: the encoding of ordinary keys is unchanged."""
    for key in ("w", 7, ("a", "b"), ("a", 1, None), b"raw", ("x", ("y", "z"))):
        assert encode_key(key) == pickle.dumps(key, protocol=5)


def test_one_and_true_stay_different_keys_in_a_tuple() -> None:
    assert canonical_key((1, True)) == (1, True)
    assert type(canonical_key((1, True))[1]) is bool


def test_values_round_trip_with_their_types_and_none_is_a_value() -> None:
    store = FakeMapState()
    state = MapStateKeyValue(store)
    values = {"int": 3, "float": 1.5, "none": None, "tuple": (1, "a"), "list": [1, 2],
              "bytes": b"\x00", "dict": {"k": {1, 2}}, "bool": False}
    for key, value in values.items():
        state.put(key, value)
    state.flush()
    fresh = MapStateKeyValue(store)
    for key, value in values.items():
        got = fresh.get(key, "DEFAULT")
        assert got == value and type(got) is type(value), key
    assert fresh.get("missing", "DEFAULT") == "DEFAULT"


def test_delete_returns_the_old_value_and_iteration_sees_the_store() -> None:
    store = FakeMapState()
    state = MapStateKeyValue(store)
    state.put(("a", 1), "x")
    state.put("b", 2)
    state.flush()
    fresh = MapStateKeyValue(store)
    assert fresh.delete(("a", 1)) == "x"
    assert fresh.delete("never") is None
    assert fresh.get(("a", 1)) is None
    assert dict(fresh) == {"b": 2}  # iteration flushes the pending delete first
