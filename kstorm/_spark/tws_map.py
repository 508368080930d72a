"""A stateful stage's TWS map state, bytes in, bytes out: the public route, or the switch's.

A stateful bolt's :class:`~kstorm.KeyValueState` lives in one TWS ``MapState`` per task
(``k binary``, ``v binary``; ``kstorm/_spark/stage.py``). The public route is pyspark's
``MapState`` methods, which turn every key and value into a one-field Row and back. The
private one (``speedups/state_map.py``, the ``state-map`` speed-up) sends the same requests
on the state server's socket without the Rows; it is taken only on a pyspark release it was
tested on and where its private members are there. Otherwise, or where
``KSTORM_SPEEDUPS_OFF`` names ``state-map``, the public route does the work (same results,
slower; the kill tests run both).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from kstorm._spark import speedups
from kstorm._spark.speedups import state_map


class BinaryMap:
    """get / update / remove / iterate a ``MapState`` whose key and value are one binary field.

    Example:
        >>> m = BinaryMap(map_state)               # doctest: +SKIP
        >>> m.update(b"k", b"v"); m.get(b"k")      # doctest: +SKIP
        b'v'
    """

    def __init__(self, map_state: Any, *, fast: bool | None = None) -> None:
        """The map state ``map_state``, spoken to directly or through its methods.

        ``fast``: None takes the direct route where ``speedups`` (``state-map``) and the
        client's members allow it; False is the public ``MapState`` methods. The route is
        chosen here, once.
        """
        self._ms = map_state
        self._direct: Any = None
        if fast is False or (fast is None and not speedups.enabled("state-map",
                                                                   private_pyspark=True)):
            return
        self._direct, why = state_map.connect(map_state)
        if self._direct is None:
            speedups.say_off("state-map", why)

    @property
    def fast(self) -> bool:
        """Whether this map takes the private route."""
        return self._direct is not None

    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or None."""
        if self._direct is not None:
            return self._direct.get(key)
        row = self._ms.getValue((key,))
        return None if row is None else row[0]

    def update(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``."""
        self.update_all([(key, value)])

    def update_all(self, entries: Iterable[tuple[bytes, bytes]]) -> None:
        """:meth:`update` each ``(key, value)`` (the private route: many per round trip)."""
        if self._direct is not None:
            self._direct.update_all(entries)
            return
        for key, value in entries:
            self._ms.updateValue((key,), (value,))

    def remove(self, key: bytes) -> None:
        """Remove ``key`` (nothing happens when it is absent); both routes: ``removeKey``."""
        self._ms.removeKey((key,))

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of the map, in one pass."""
        if self._direct is not None:
            yield from self._direct.items()
            return
        for k, v in self._ms.iterator():
            yield k[0], v[0]
