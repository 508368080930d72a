"""User windowed bolts on Spark: one ``transformWithStateInPandas`` task per bolt task.

A windowed bolt's stage is grouped by ``__task``; for each task and micro-batch the processor

1. loads the task's :class:`~kstorm.windowing._task.WindowedTask` snapshot from a TWS value state
   (versioned by batch id, so a replayed batch starts from exactly the state its first
   attempt saw) -- or, on the first batch after a lost checkpoint, from the snapshot a
   stateful sink stored with its offsets;
2. runs the batch's tuples through it at the batch's processing time (Spark's batch
   timestamp, recorded in the offset log: a replay sees the same time), calling the bolt's
   ``execute(window)`` for every window that fired and routing late tuples;
3. saves the snapshot (and the stateful variant's ``KeyValueState``, a TWS map state), and
   registers a processing-time timer for the next moment a window can close without new
   tuples (continuous trigger only: Spark then runs no-data micro-batches).

With ``with_message_id_field`` the snapshot is also sent to the driver, which stores it with
the sinks' offsets (``state`` of :meth:`BaseSink.commit`), so the windows survive a lost
checkpoint.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kstorm._runtime.envelope import NOW_COLUMN, Outgoing, state_dest, to_arrow
from kstorm._spark.gc_control import freeze_imports
from kstorm._spark.stage import (
    MapStateKeyValue,
    StageContext,
    arrivals,
    metrics_row,
    packed,
    tuples_of,
    typed_rows,
)
from kstorm.tuple import Tuple
from kstorm.windowing._store import PersistentTuples
from kstorm.windowing._task import WindowedTask
from kstorm.windowing.bolt import acks_on_arrival
from kstorm.windowing.config import WindowConfig

STATE_KEY = "wbolt:{component}:{task}"  # its name in the sinks' stored state


def state_key(component: str, task: int) -> str:
    """Name of a windowed bolt task's snapshot in a sink's stored state."""
    return STATE_KEY.format(component=component, task=task)


@dataclass
class WindowedStageSpec:
    """What the processor needs besides the stage context (shipped with it)."""

    component: str
    config: WindowConfig
    inputs: list[str] = field(default_factory=list)  # streams the watermark waits for
    timers: bool = False        # TimeMode ProcessingTime: timers and no-data batches
    to_driver: bool = False     # send snapshots to the driver (stored with sink offsets)
    seeds: dict[int, bytes] = field(default_factory=dict)  # task -> snapshot from a sink
    acks_on_arrival: bool = False  # stateful or persistent: tuples acked as they arrive

    @property
    def time_mode(self) -> str:
        """The TWS time mode."""
        return "ProcessingTime" if self.timers else "None"


class _MapStateChunks:
    """A persistent window's chunk backend: a TWS ``MapState`` (long -> binary)."""

    def __init__(self, map_state: Any) -> None:
        self._ms = map_state

    def get(self, key: int) -> bytes | None:
        row = self._ms.getValue((key,))
        return None if row is None else bytes(row[0])

    def put(self, key: int, blob: bytes) -> None:
        self._ms.updateValue((key,), (blob,))

    def remove(self, key: int) -> None:
        self._ms.removeKey((key,))


def windowed_processor(ctx: StageContext, spec: WindowedStageSpec) -> Any:
    """The ``StatefulProcessor`` of a windowed bolt's stage."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class WindowedStage(StatefulProcessor):
        def init(self, handle: Any) -> None:
            freeze_imports()
            self._handle = handle
            self._window = handle.getValueState("window", "blob binary")
            self._kv = handle.getMapState("kv", "k binary", "v binary")
            self._tuples = handle.getMapState("tuples", "k long", "v binary")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any
                            ) -> Iterator[Any]:
            yield from self._batch(int(key[0]), rows, timerValues)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                               ) -> Iterator[Any]:
            yield from self._batch(int(key[0]), None, timerValues)

        def _batch(self, task: int, rows: Iterator[Any] | None, timer_values: Any
                   ) -> Iterator[Any]:
            now = int(timer_values.getCurrentProcessingTimeInMs())
            kvs: list[MapStateKeyValue] = []

            def state_for(component: str, _task: int) -> MapStateKeyValue:
                kv = MapStateKeyValue(self._kv)
                kvs.append(kv)
                return kv

            executor = ctx.executor(task, state_for)
            windowed = self._load(task)
            tuples: list[Tuple] = []
            batches = (typed_rows(pdf, ctx) for pdf in rows or ())

            def skip(spout: str, n: int) -> None:
                executor.counters[f"{spout}.skipped"] += n

            for mine, others in arrivals(ctx, batches, executor.dead_letter_record, skip):
                for rows_in in (mine, others):
                    if (now < 0 and rows_in is not None and rows_in.num_rows
                            and NOW_COLUMN in rows_in.schema.names):
                        now = int(rows_in.column(NOW_COLUMN)[0].as_py())
                if others is not None:
                    yield _pandas(others.drop_columns([NOW_COLUMN]))
                tuples.extend(t for _, t in tuples_of(ctx, mine, [task] * mine.num_rows))
            executor.counters[f"{spec.component}.executed"] += len(tuples)
            executor.run_windows(spec.component, task, windowed, tuples, now,
                                 spec.config.late_tuple_stream, spec.acks_on_arrival)
            for chunk in packed(executor.finish_rows()):
                yield _pandas(chunk)
            for kv in kvs:
                kv.flush()
            blob = pickle.dumps(windowed.snapshot(), protocol=5)
            self._window.update((blob,))
            if spec.to_driver:
                kv_items = dict(MapStateKeyValue(self._kv))
                seed = pickle.dumps({"window": blob, "kv": kv_items}, protocol=5)
                yield _pandas(to_arrow([Outgoing(state_dest(spec.component), task,
                                                 spec.component, "", seed, None)]))
            if spec.timers:
                self._set_timer(windowed.next_timer(now))
            metrics = metrics_row(ctx, executor.counters)
            if metrics is not None:
                yield _pandas(to_arrow([metrics]))

        def _load(self, task: int) -> WindowedTask:
            store = (PersistentTuples(_MapStateChunks(self._tuples),
                                      spec.config.max_events_in_memory)
                     if spec.config.persistent else None)
            windowed = WindowedTask(spec.component, spec.config, spec.inputs, store,
                                    tracked=ctx.acking is not None and not spec.acks_on_arrival)
            if self._window.exists():
                windowed.restore(pickle.loads(self._window.get()[0]))
            elif task in spec.seeds:  # first batch after a lost checkpoint
                seed = pickle.loads(spec.seeds[task])
                windowed.restore(pickle.loads(seed["window"]))
                kv = MapStateKeyValue(self._kv)
                for k, v in seed["kv"].items():
                    kv.put(k, v)
                kv.flush()
            return windowed

        def _set_timer(self, at: int | None) -> None:
            existing = list(self._handle.listTimers())
            for t in existing:
                if t != at:
                    self._handle.deleteTimer(t)
            if at is not None and at not in existing:
                self._handle.registerTimer(at)

        def close(self) -> None:
            pass

    return WindowedStage()


def _pandas(batch: pa.RecordBatch) -> Any:
    return batch.to_pandas()


def windowed_spec(topology: Any, plan: Any, stage: Any, settings: Any,
                  seeds: dict[str, bytes]) -> WindowedStageSpec:
    """The :class:`WindowedStageSpec` of a windowed bolt's stage."""
    from kstorm._runtime.plan import source_kind
    from kstorm.config import TriggerMode
    from kstorm.windowing.durations import Duration

    spec = topology.components[stage.head]
    config: WindowConfig = spec.component.window_config
    inputs = [f"{g.component}:{g.stream}" for g in spec.inputs
              if source_kind(topology.components[g.component].component) != "kafka"]
    continuous = settings.trigger is TriggerMode.CONTINUOUS
    needs_timers = (config.idle_timeout is not None if config.is_event_time
                    else isinstance(config.sliding_interval, Duration))
    stores = any(getattr(topology.components[s].component, "records_offsets", False)
                 for s in plan.sinks)
    to_driver = stores and config.message_id_field is not None and not config.persistent
    prefix = state_key(stage.head, 0)[:-1]
    mine = {int(k[len(prefix):]): v for k, v in seeds.items() if k.startswith(prefix)}
    return WindowedStageSpec(stage.head, config, inputs, continuous and needs_timers,
                             to_driver, mine, acks_on_arrival(spec.component))
