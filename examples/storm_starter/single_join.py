"""storm-starter's ``SingleJoinExample.java`` and ``bolt/SingleJoinBolt.java``.

Two ``FeederSpout`` spouts, ``gender`` ``(id, gender)`` and ``age`` ``(id, age)``, both
fields grouped on ``id`` into ``SingleJoinBolt(Fields("gender", "age"))``: the bolt finds the id
fields (those every input has), holds each id's tuples in a ``RotatingMap`` until one came
from every input, then emits the selected fields anchored to all of them and acks them;
an id still incomplete when its bucket rotates out fails its tuples.

Changes beyond syntax:

- The pending map expires entries: the bolt asks for a tick tuple every second
  (``get_component_configuration``) and each tick rotates the ``RotatingMap`` of
  ``topology.message.timeout.secs`` buckets, so an incomplete id fails after
  (timeout - 1, timeout] seconds, as the ``TimeCacheMap`` of Storm's earlier version of this
  bolt did with its own timer thread. The current Java builds a ``RotatingMap`` and never
  rotates it (nothing expires); a kstorm bolt cannot run a timer thread (its tasks run
  inside Spark's), ticks are how it sees time.
- The join key ``tuple.select(_idFields)`` (a Java ``List``, hashed by value) is a Python
  ``tuple`` (a ``list`` cannot be a dict key).
- ``RotatingMap`` is ported beside the bolt (:mod:`.tools`): kstorm has none.
- ``main`` runs on kstorm's in-process ``TopologyTestDriver`` for ``LocalCluster`` (the
  feeding and the 2 s sleep become ``feed`` calls and ``run()``), and prints the joined rows.

Run: ``python -m examples.storm_starter.single_join``.
"""

from __future__ import annotations

import sys
from typing import Any

from examples.storm_starter.tools import RotatingMap
from kstorm import BaseRichBolt, Config, Fields, TopologyBuilder, Tuple, TupleUtils, Values
from kstorm.component import GlobalStreamId
from kstorm.testing import FeederSpout, TopologyTestDriver


class SingleJoinBolt(BaseRichBolt):
    """Joins one tuple of each input by their common fields; emits ``out_fields``."""

    def __init__(self, out_fields: Fields) -> None:
        self._out_fields = out_fields

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        """Find the id fields and where each output field comes from."""
        self._field_locations: dict[str, GlobalStreamId] = {}
        self._collector = collector
        timeout = int(conf.get(Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS))
        self._pending: RotatingMap[tuple[Any, ...], dict[GlobalStreamId, Tuple]] = \
            RotatingMap(timeout, self._expire)
        self._num_sources = len(context.get_this_sources())
        id_fields: set[str] | None = None
        for source in context.get_this_sources():
            fields = context.get_component_output_fields(source.component_id,
                                                         source.stream_id)
            set_fields = set(fields.to_list())
            if id_fields is None:
                id_fields = set_fields
            else:
                id_fields &= set_fields

            for outfield in self._out_fields:
                for sourcefield in fields:
                    if outfield == sourcefield:
                        self._field_locations[outfield] = source
        self._id_fields = Fields(*sorted(id_fields or ()))

        if len(self._field_locations) != len(self._out_fields):
            raise RuntimeError("Cannot find all outfields among sources")  # noqa: EM101

    def execute(self, tuple: Tuple) -> None:  # noqa: A002 - Storm's parameter name
        """Hold the tuple under its id; once every input has one, emit the join and ack."""
        if TupleUtils.is_tick(tuple):  # the expiry (module docstring)
            self._pending.rotate()
            return
        id = (*tuple.select(self._id_fields),)  # noqa: A001 - Storm's name
        stream_id = GlobalStreamId(tuple.get_source_component(), tuple.get_source_stream_id())
        if not self._pending.contains_key(id):
            self._pending.put(id, {})
        parts: dict[GlobalStreamId, Tuple] = self._pending.get(id)  # type: ignore[assignment]
        if stream_id in parts:
            raise RuntimeError("Received same side of single join twice")  # noqa: EM101
        parts[stream_id] = tuple
        if len(parts) == self._num_sources:
            self._pending.remove(id)
            join_result = []
            for out_field in self._out_fields:
                loc = self._field_locations[out_field]
                join_result.append(parts[loc].get_value_by_field(out_field))
            self._collector.emit(list(parts.values()), join_result)

            for part in parts.values():
                self._collector.ack(part)

    def declare_output_fields(self, declarer: Any) -> None:
        """The output fields given to the constructor."""
        declarer.declare(self._out_fields)

    def get_component_configuration(self) -> dict[str, Any]:
        """A tick every second: it rotates the pending map (module docstring)."""
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 1}

    def _expire(self, id: tuple[Any, ...],  # noqa: A002 - Storm's parameter name
                tuples: dict[GlobalStreamId, Tuple]) -> None:
        """``ExpireCallback``: fail the tuples of an id that never completed."""
        for tuple in tuples.values():  # noqa: A001 - Storm's name
            self._collector.fail(tuple)


def build(gender_spout: FeederSpout, age_spout: FeederSpout) -> TopologyBuilder:
    """``main``'s topology over the two feeders."""
    builder = TopologyBuilder()
    builder.set_spout("gender", gender_spout)
    builder.set_spout("age", age_spout)
    builder.set_bolt("join", SingleJoinBolt(Fields("gender", "age"))).fields_grouping(
        "gender", Fields("id")).fields_grouping("age", Fields("id"))
    return builder


def feed(gender_spout: FeederSpout, age_spout: FeederSpout) -> None:
    """What ``main`` feeds: ten genders by id, then their ages in reverse order."""
    for i in range(10):
        if i % 2 == 0:
            gender = "male"
        else:
            gender = "female"
        gender_spout.feed(Values(i, gender))

    for i in range(9, -1, -1):
        age_spout.feed(Values(i, i + 20))


def main(args: list[str] | None = None) -> int:
    """Feed both spouts, run to completion, print the joined rows."""
    gender_spout = FeederSpout(Fields("id", "gender"))
    age_spout = FeederSpout(Fields("id", "age"))

    conf = Config()
    conf.set_debug(True)

    with TopologyTestDriver(build(gender_spout, age_spout).create_topology(), conf,
                            name="join-example") as cluster:
        feed(gender_spout, age_spout)
        cluster.run()
        for gender, age in cluster.output("join"):
            print(gender, age)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
