"""Seed 000's commit protocol on the driver, for state held by a provider outside Spark.

Each task of a stateful bolt prepares its batch's changes under the batch's txid
(``prepare_commit``, in the Spark task). The driver then, per batch and in txid order:

1. commits the sinks (their values, offsets and txid in one atomic step each);
2. commits every task's state: ``pre_commit(txid)`` hook, ``commit(txid)`` (a task that
   prepared nothing commits an empty change set, so every task is at the batch's txid);
3. lets Spark write its commit log.

Where the states are the Redis provider's and a RedisSink writes to the same server and
database, steps 1 and 2 are one: that sink's commit script also commits every task's state
(:meth:`StateBook.atomic_commit`, hooks first), so no crash can fall between them.

A crash between any two steps is settled at the next start by :meth:`StateBook.recover`,
given the last txid the topology has committed (``last``: the checkpoint's, or the sink's
when the topology resumes from a sink) — seed 000's recovery rule with kstorm's facts:

- a txid prepared but not committed: committed if ``<= last`` (its sinks committed: the
  topology will not run it again, e.g. it resumes from the sink after a lost checkpoint),
  else rolled back (``pre_rollback`` hook; the batch runs again and prepares again);
- a state committed at ``last + 1`` (killed after step 2, before Spark's commit log): that
  commit is taken back (``rollback_commit``), since Spark replays the batch;
- a task at ``last - 1`` with nothing prepared had no tuples in batch ``last`` (a task with
  tuples prepares before any sink commits): its empty commit of ``last`` is completed;
- then every task must be at ``last``. A state behind or ahead, or empty while the topology
  has committed batches, is a :class:`StateError` naming the component, never a reset.

A failed batch attempt re-run in place (seed 002) first goes through :meth:`rollback`.

A custom state with only Storm's ``State`` methods (:class:`kstorm.state.BaseState`: no
``committed_txid``/``prepared_txid``/``rollback_commit``) is recovered as Storm's checkpoint
spout recovers it: ``commit(last)`` (idempotent; completes a commit a crash cut off), then
``rollback()``; it cannot be checked for being behind or ahead, and a crash between its
commit and Spark's commit log replays that batch into it (logged at start).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kstorm._runtime.window_kvstore import internal_state, window_namespace
from kstorm.component import TopologyContext
from kstorm.errors import ConfigError, StateError
from kstorm.state import RECOVERY_METHODS, STATE_METHODS, state_namespace, tracks_txids
from kstorm.state.redis import RedisKeyValueState, StateCommit, replace_states
from kstorm.state.rescale import redistribute, why_not_keyed
from kstorm.topology import StormTopology
from kstorm.windowing.bolt import BaseStatefulWindowedBolt

log = logging.getLogger("kstorm.state")


@dataclass
class _Task:
    component: str
    task: int
    namespace: str
    state: Any
    bolt: Any  # the driver-side copy whose hooks run (None: a window's state)


def _hook(bolt: Any, name: str, *args: Any) -> None:
    """Call seed 000's hook ``name`` when the bolt has it (windowed bolts may not)."""
    hook = getattr(bolt, name, None)
    if callable(hook):
        hook(*args)


class StateBook:
    """The driver's side of seed 000's protocol for every stateful bolt task (module doc)."""

    def __init__(self, topology: StormTopology, name: str, conf: Mapping[str, Any],
                 provider: Any, components: Iterable[str], provider_name: str = "custom",
                 windowed: Iterable[str] = ()) -> None:
        self.name = name
        self.provider_name = provider_name
        self.provider = provider
        self.topology = topology
        self.conf = dict(conf)
        self.tasks: list[_Task] = []
        for component in components:
            spec = topology.components[component]
            bolt = spec.component
            for task in range(spec.parallelism):
                self.tasks.append(self._task(component, task, spec.parallelism,
                                             copy.deepcopy(bolt)))
        for component in windowed:  # user windowed bolts: windows (+ a stateful one's state)
            spec = topology.components[component]
            user = isinstance(spec.component, BaseStatefulWindowedBolt)
            for task in range(spec.parallelism):
                context = TopologyContext(name, component, task, spec.parallelism)
                namespace = window_namespace(name, component, task)
                self.tasks.append(_Task(component, task, namespace, internal_state(
                    provider, namespace, self.conf, context), None))
                if user:
                    self.tasks.append(self._task(component, task, spec.parallelism,
                                                 copy.deepcopy(spec.component)))
        for t in self.tasks[:1]:
            missing = [m for m in STATE_METHODS if not callable(getattr(t.state, m, None))]
            if missing:
                msg = (f"state provider {provider_name!r}: the state of {t.component!r} "
                       f"({type(t.state).__name__}) lacks {missing}")
                raise ConfigError(msg, hint="implement kstorm.KeyValueState and kstorm.State's "
                                  "prepare_commit/commit/rollback (subclass "
                                  "kstorm.state.BaseState for the rest)")
            if not tracks_txids(t.state):
                log.warning(
                    "state provider %r: %s has only Storm's State methods, so kstorm recovers "
                    "it from the checkpoint as Storm does (commit(last txid), then rollback()) "
                    "and a crash after its commit, before Spark's commit log, applies that "
                    "batch to it twice; implement %s to close that gap", provider_name,
                    type(t.state).__name__, ", ".join(RECOVERY_METHODS))

    def _task(self, component: str, task: int, tasks: int, bolt: Any) -> _Task:
        namespace = state_namespace(self.name, component, task)
        context = TopologyContext(self.name, component, task, tasks)
        return _Task(component, task, namespace,
                     self.provider.new_state(namespace, self.conf, context), bolt)

    @property
    def components(self) -> list[str]:
        return sorted({t.component for t in self.tasks})

    # -- per batch ---------------------------------------------------------------------------

    def commit(self, txid: int) -> None:
        """Step 2: every task's state commits ``txid`` (after the batch's sinks)."""
        for t in self.tasks:
            _hook(t.bolt, "pre_commit", txid)
            t.state.commit(txid)

    def atomic_commit(self, txid: int) -> StateCommit | None:
        """Every task's commit of ``txid`` for a sink to carry (steps 1 and 2 in one).

        Only when every task's state is the Redis provider's on one server and database:
        a RedisSink there (``accepts_states``) commits them in its own script. None otherwise.
        """
        states = [t.state for t in self.tasks]
        if not states or not all(type(s) is RedisKeyValueState for s in states):
            return None
        servers = {s.config.server for s in states}
        if len(servers) != 1:
            return None
        return StateCommit(servers.pop(), txid,
                           tuple(k for s in states for k in s.redis_keys))

    def pre_commit(self, txid: int) -> None:
        """The ``pre_commit`` hooks, for states a sink commits (:meth:`atomic_commit`)."""
        for t in self.tasks:
            _hook(t.bolt, "pre_commit", txid)

    def rollback(self, txid: int) -> None:
        """Before a failed attempt of ``txid`` re-runs: no prepared or committed trace of it."""
        for t in self.tasks:
            if not tracks_txids(t.state):  # Storm's State: rollback() discards what is prepared
                _hook(t.bolt, "pre_rollback")
                t.state.rollback()
                continue
            prepared = t.state.prepared_txid()
            committed = t.state.committed_txid()
            if prepared is not None or committed == txid:
                _hook(t.bolt, "pre_rollback")
            if prepared is not None:
                t.state.rollback()
            if committed == txid:
                t.state.rollback_commit(txid)

    # -- at start ----------------------------------------------------------------------------

    def recover(self, last: int | None, *, init_empty: Iterable[str] = (),
                where: str = "the checkpoint") -> None:
        """Settle every task at txid ``last`` (None: nothing committed yet; module doc).

        Args:
            last: the last txid the topology committed (sinks and checkpoint agree on it).
            init_empty: components allowed to start empty although ``last`` is not None
                (``kstorm.state.init.empty``: a stateful bolt new in the topology).
            where: what ``last`` comes from, for messages.
        """
        allowed = set(init_empty)
        self._rescale(last, allowed, where)
        self._settle(self.tasks, last, allowed, where)

    def _settle(self, tasks: list[_Task], last: int | None, allowed: set[str],
                where: str) -> None:
        """:meth:`recover` for ``tasks``: each at ``last``, or a :class:`StateError`."""
        problems: list[tuple[str, str]] = []
        for t in tasks:
            if not tracks_txids(t.state):
                self._recover_untracked(t, last)
                continue
            prepared = t.state.prepared_txid()
            committed = t.state.committed_txid()
            if prepared is not None:
                if last is not None and prepared <= last and (committed is None
                                                              or prepared > committed):
                    log.info("state %s: txid %s was prepared and its sinks committed: "
                             "committing it", t.namespace, prepared)
                    _hook(t.bolt, "pre_commit", prepared)
                    t.state.commit(prepared)
                else:
                    log.info("state %s: discarding prepared txid %s (the batch runs again)",
                             t.namespace, prepared)
                    _hook(t.bolt, "pre_rollback")
                    t.state.rollback()
            committed = t.state.committed_txid()
            nxt = 0 if last is None else last + 1
            if committed is not None and committed == nxt:
                log.info("state %s: txid %s committed before Spark's commit log; taking it "
                         "back (the batch is replayed)", t.namespace, committed)
                _hook(t.bolt, "pre_rollback")
                t.state.rollback_commit(committed)
                committed = t.state.committed_txid()
            if last is not None and (committed == last - 1 or (committed is None
                                                             and last == 0)):
                # the sinks committed ``last`` and this task prepared nothing for it: it had
                # no tuples in that batch (a task with tuples prepares before any sink
                # commits), so its commit of ``last`` is the empty one the crash cut off
                _hook(t.bolt, "pre_commit", last)
                t.state.commit(last)
                committed = last
            if committed == last:
                continue
            if committed is None and t.component in allowed:
                continue
            if committed is None:
                problems.append((t.component, f"{t.namespace} is empty"))
            elif last is None or committed > last:
                problems.append((t.component, f"{t.namespace} is at txid {committed}, ahead"))
            else:
                problems.append((t.component, f"{t.namespace} is at txid {committed}, behind"))
        if problems:
            at = "nothing committed" if last is None else f"txid {last}"
            components = sorted({c for c, _ in problems})
            listed = "; ".join(p for _, p in problems[:6])
            msg = (f"topology {self.name!r}: the state of {components} ({self.provider_name} "
                   f"provider) does not match {where} ({at}): {listed}"
                   + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""))
            raise StateError(msg, hint=(
                "a state ahead of the topology means its checkpoint and sinks were reset while "
                "the state was kept: delete the state (keys kstorm:state:<topology>:"
                "<component>:* in Redis) to recompute it, or restore the checkpoint; an empty "
                "or behind state was deleted or lost: restore it, or start over by deleting "
                "the checkpoint and the sinks' records; a stateful bolt new in this topology "
                "may start empty with kstorm.state.init.empty = [component]"))

    @staticmethod
    def _recover_untracked(t: _Task, last: int | None) -> None:
        """A state with Storm's methods only: as Storm's checkpoint spout recovers it.

        The batch ``last`` committed its sinks, so its state commit is completed (a no-op
        when done: ``commit`` is idempotent); whatever a later batch prepared is discarded.
        """
        if last is not None:
            _hook(t.bolt, "pre_commit", last)
            t.state.commit(last)
        _hook(t.bolt, "pre_rollback")
        t.state.rollback()

    def _rescale(self, last: int | None, allowed: set[str], where: str) -> None:
        """Each bolt whose state another task count wrote: its keys moved to the new tasks.

        The old tasks are settled at ``last`` first (seed 000's recovery, as below), then
        every committed key goes to the task of its key group (``kstorm/state/rescale.py``)
        in one MULTI/EXEC that also deletes the old tasks: a crash leaves the old layout
        or the new one. A state that cannot be moved exactly is a :class:`StateError`.
        """
        for component in self.components:
            spec = self.topology.components[component]
            n = spec.parallelism
            mine = [t for t in self.tasks if t.component == component
                    and tracks_txids(t.state)]
            if not mine:
                continue  # states without txids cannot tell who wrote them
            old = self._old_task_count(component, n, mine)
            if old is None:
                continue
            problem = f"its state in the {self.provider_name} provider was written by {old} task(s)"
            why = self._why_not_rescalable(component, mine)
            if why is not None:
                msg = (f"topology {self.name!r}: stateful bolt {component!r} now runs {n} "
                       f"task(s) but {problem}, and it cannot be moved to other tasks: {why}")
                raise StateError(msg, hint=(
                    f"keep the bolt's parallelism at {old}, or delete its state (kstorm:state:"
                    f"{self.name}:{component}:* in Redis) and recompute it"))
            context = TopologyContext(self.name, component, 0, old)
            olds = [_Task(component, i, state_namespace(self.name, component, i),
                          self.provider.new_state(state_namespace(self.name, component, i),
                                                  self.conf, context),
                          copy.deepcopy(spec.component)) for i in range(old)]
            self._settle(olds, last, allowed, where)
            try:
                layout = redistribute([t.state.committed_fields() for t in olds], n)
            except StateError as exc:
                msg = (f"topology {self.name!r}: stateful bolt {component!r} now runs {n} "
                       f"task(s) but {problem}, and some keys cannot follow their key "
                       f"group to a new task: {exc}")
                raise StateError(msg, hint=(
                    f"keep the bolt's parallelism at {old}; a key must be written only while "
                    "executing tuples of one grouping value (docs/state.md, Rescaling)")
                                 ) from exc
            replace_states([t.state for t in olds], [t.state for t in mine], layout, last)
            log.info("state of %r: %d key(s) moved from %d task(s) to %d by key group, at "
                     "txid %s", component, sum(len(f) for f in layout) // 2, old, n, last)

    def _why_not_rescalable(self, component: str, mine: list[_Task]) -> str | None:
        if any(t.bolt is None for t in mine):
            return "a windowed bolt's windows are per task (they cannot be rescaled)"
        if not all(type(t.state) is RedisKeyValueState for t in mine):
            return (f"the {self.provider_name} provider cannot move keys between tasks (the "
                    "redis provider can)")
        return why_not_keyed(self.topology, component)

    def _old_task_count(self, component: str, n: int, mine: list[_Task]) -> int | None:
        """How many tasks wrote ``component``'s state, when not ``n`` (None: ``n`` or none)."""
        def written(task: int, window: bool = False) -> bool:
            context = TopologyContext(self.name, component, task, task + 1)
            state = (internal_state(self.provider, window_namespace(self.name, component, task),
                                    self.conf, context) if window else
                     self.provider.new_state(state_namespace(self.name, component, task),
                                             self.conf, context))
            return tracks_txids(state) and (state.committed_txid() is not None
                                            or state.prepared_txid() is not None)

        windows = any(t.bolt is None for t in mine)
        if written(n) or (windows and written(n, window=True)):
            old = n + 1
            while written(old) or (windows and written(old, window=True)):
                old += 1
            return old
        known = [t.task for t in mine if t.state.committed_txid() is not None]
        if known and max(known) + 1 < n:  # else a task's state is missing: recover says so
            return max(known) + 1
        return None
