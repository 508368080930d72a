"""User windowed bolts on Spark: one ``transformWithStateInPandas`` task per bolt task.

A windowed bolt's stage is grouped by ``__task``; for each task and micro-batch the processor

1. loads the task's :class:`~kstorm._runtime.window_task.WindowedTask` snapshot from a TWS
   value state (versioned by batch id, so a replayed batch starts from exactly the state its first
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

With ``topology.state.provider`` other than ``spark`` the provider holds the task instead
(steps 1 and 3 read and prepare it there, ``kstorm/_runtime/window_kvstore.py``; the stateful
variant's ``KeyValueState`` too): the driver commits it after the sinks and recovers it at
the sinks' txid after a lost checkpoint (``kstorm/_runtime/state_book.py``).
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from kstorm._runtime.envelope import NOW_COLUMN, Outgoing, state_dest, to_arrow
from kstorm._runtime.window_kvstore import KVChunks, WindowKV, internal_state, window_namespace
from kstorm._runtime.window_store import PersistentTuples
from kstorm._runtime.window_task import WindowedTask
from kstorm._spark.speedups.gc_control import freeze_imports
from kstorm._spark.stage import (
    MapStateKeyValue,
    StageContext,
    arrivals,
    metrics_row,
    packed,
    task_of_key,
    tuples_of,
    typed_rows,
)
from kstorm.tuple import Tuple
from kstorm.windowing.bolt import acks_on_arrival
from kstorm.windowing.config import WindowConfig
from kstorm.windowing.sessions import bind_session_keys

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
    external: bool = False      # windows in the state provider (not spark): _kvstore.py

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

    n_tasks = ctx.topology.components[ctx.stage.head].parallelism

    class WindowedStage(StatefulProcessor):
        def init(self, handle: Any) -> None:
            freeze_imports()
            self._handle = handle
            self._window = handle.getValueState("window", "blob binary")
            self._kv = handle.getMapState("kv", "k binary", "v binary")
            self._tuples = handle.getMapState("tuples", "k long", "v binary")

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any
                            ) -> Iterator[Any]:
            yield from self._batch(task_of_key(key[0], n_tasks), rows, timerValues)

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                               ) -> Iterator[Any]:
            yield from self._batch(task_of_key(key[0], n_tasks), None, timerValues)

        def _batch(self, task: int, rows: Iterator[Any] | None, timer_values: Any
                   ) -> Iterator[Any]:
            now = int(timer_values.getCurrentProcessingTimeInMs())
            kvs: list[Any] = []

            def state_for(component: str, _task: int) -> Any:
                kv = (_provider_state(ctx, component, task) if spec.external
                      else MapStateKeyValue(self._kv))
                kvs.append(kv)
                return kv

            executor = ctx.executor(task, state_for)
            held = _ProviderWindows(ctx, spec, task) if spec.external else None
            windowed = self._load(task) if held is None else held.load()
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
            if held is not None:  # seed 000: prepared here, committed by the driver
                txid = executor.attempt.transaction_id
                for kv in kvs:
                    kv.prepare_commit(txid)
                held.prepare(windowed, txid)
            else:
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


_TOKEN = ("token",)
#: Per Python worker: (topology, component, task) -> (token, task, its WindowKV) as the worker
#: last prepared them. Reused when the provider's committed state carries the same token (the
#: driver committed what this worker prepared), so a batch reads nothing but the token.
_WORKER_WINDOWS: dict[tuple[str, str, int], tuple[str, WindowedTask, WindowKV]] = {}


def _provider_state(ctx: StageContext, component: str, task: int, *,
                    window: bool = False) -> Any:
    """Task ``task``'s user state, or (``window``) its windows' state, in the provider."""
    from kstorm._spark.stage import _provider
    from kstorm.component import TopologyContext
    from kstorm.state import state_namespace

    spec = ctx.topology.components[component]
    conf = {**ctx.conf, **spec.conf}
    context = TopologyContext(ctx.topology_name, component, task, spec.parallelism)
    provider = _provider(ctx.settings)
    if window:
        namespace = window_namespace(ctx.topology_name, component, task)
        return internal_state(provider, namespace, conf, context)
    return provider.new_state(state_namespace(ctx.topology_name, component, task), conf,
                              context)


class _ProviderWindows:
    """A task's windows held by the state provider (``kstorm/_runtime/window_kvstore.py``)."""

    def __init__(self, ctx: StageContext, spec: WindowedStageSpec, task: int) -> None:
        self.ctx, self.spec, self.task = ctx, spec, task
        self.kv = _provider_state(ctx, spec.component, task, window=True)
        self.key = (ctx.topology_name, spec.component, task)

    def load(self) -> WindowedTask:
        """The task as committed: this worker's copy if it is that, else read from the state."""
        spec = self.spec
        cached = _WORKER_WINDOWS.pop(self.key, None)  # a failed attempt must not reuse it
        if cached is not None and cached[0] == self.kv.get(_TOKEN):
            _, windowed, self.windows = cached
            self.windows.kv = self.kv
            if windowed.store is not None:
                windowed.store.backend = KVChunks(self.kv)
            return windowed
        store = (PersistentTuples(KVChunks(self.kv), spec.config.max_events_in_memory)
                 if spec.config.persistent else None)
        windowed = WindowedTask(spec.component, spec.config, spec.inputs, store,
                                tracked=self.ctx.acking is not None and not spec.acks_on_arrival)
        self.windows = WindowKV(self.kv, spec.component)
        self.windows.load(windowed)
        return windowed

    def prepare(self, windowed: WindowedTask, txid: int) -> None:
        """Put what the batch changed and prepare it under ``txid``."""
        self.windows.save(windowed)
        token = uuid.uuid4().hex
        self.kv.put(_TOKEN, token)
        self.kv.prepare_commit(txid)
        _WORKER_WINDOWS[self.key] = (token, windowed, self.windows)


def _pandas(batch: pa.RecordBatch) -> Any:
    return batch.to_pandas()


def windowed_spec(topology: Any, plan: Any, stage: Any, settings: Any,
                  seeds: dict[str, bytes]) -> WindowedStageSpec:
    """The :class:`WindowedStageSpec` of a windowed bolt's stage."""
    from kstorm._runtime.plan import source_kind
    from kstorm.config import TriggerMode
    from kstorm.windowing.durations import Duration

    spec = topology.components[stage.head]
    config: WindowConfig = bind_session_keys(spec.component.window_config, spec.inputs,
                                             stage.head)
    inputs = [f"{g.component}:{g.stream}" for g in spec.inputs
              if source_kind(topology.components[g.component].component) != "kafka"]
    continuous = settings.trigger is TriggerMode.CONTINUOUS
    needs_timers = ((config.idle_timeout is not None or config.watermark_interval is not None)
                    if config.is_event_time else isinstance(config.sliding_interval, Duration))
    stores = any(getattr(topology.components[s].component, "records_offsets", False)
                 for s in plan.sinks)
    external = settings.state_provider != "spark"
    to_driver = (stores and config.message_id_field is not None and not config.persistent
                 and not external)
    prefix = state_key(stage.head, 0)[:-1]
    mine = {int(k[len(prefix):]): v for k, v in seeds.items() if k.startswith(prefix)}
    return WindowedStageSpec(stage.head, config, inputs, continuous and needs_timers,
                             to_driver, mine, acks_on_arrival(spec.component), external)
