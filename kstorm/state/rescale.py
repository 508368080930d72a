r"""Rescaling a stateful bolt's state: its keys follow their key groups to the new tasks.

A fields grouping sends a tuple to task ``stable_hash(grouping values) % parallelism``. The
routing hash ``h`` is the tuple's *key group*: whatever the parallelism, the task of a key
group is ``h % parallelism``, so a key group is never split between tasks and routing is the
same for a bolt that never rescales as it always was.

A state written while executing a tuple belongs to that tuple's key group, whatever key the
bolt used in its ``KeyValueState``. The Redis provider stores, beside each key it commits,
the key group of the tuple being executed when the key was written (:data:`TAG`, in the same
hash, so seed 000's commit and undo move the two together). At a start with another
parallelism, :func:`redistribute` sends every key to task ``key group % new parallelism``:
the task that will receive that key group's tuples. That is exact when each state key is
written under one key group only (a count per word, a session per user). What cannot be
moved exactly is refused, with the reason, and never half done:

- a key with no recorded key group (written before kstorm recorded them, by a hook outside
  ``execute``, or by a bolt not every input of which is a fields grouping from a bolt);
- a key written under two key groups (:data:`MIXED`: a per-task total, say), as far as the
  state shows it: a read-then-write of a key with another key group, or the same key held by
  two tasks;
- a bolt whose routing is not a fields grouping from bolts (global grouping: its one task's
  state is not keyed; a spout's raw rows are hashed by Spark, not by this rule).

The spark provider keeps a task's state in a TWS map whose values are pickles; a value
written while executing a tuple carries its key group in front (:func:`tag_value`), so the
key group is committed with the value in the same state-store version.
:func:`task_fields` gives a task's map in :func:`redistribute`'s form.

Example:
    >>> old = [{b"a": b"1", TAG + b"a": b"7"}, {b"b": b"2", TAG + b"b": b"5"}]
    >>> [[k for k in t if not k.startswith(TAG)] for t in redistribute(old, 3)]
    [[], [b'a'], [b'b']]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from kstorm.errors import StateError
from kstorm.grouping import GroupingKind
from kstorm.topology import StormTopology

#: The field beside a state key that holds its key group (a decimal routing hash).
TAG = b"\x00kstorm:kg\x00"
#: The key group of a key written under two key groups: it cannot follow either.
MIXED = b"mixed"
#: The start of a spark-provider value that carries its key group (pickles start with 0x80).
TAGGED = b"\x00kg:"
#: The key group of a key written outside ``execute`` (a hook, a tick tuple): none.
UNKNOWN = b"?"


def tag_value(group: bytes, payload: bytes) -> bytes:
    r"""A spark-provider value: ``payload`` (a pickle) written under key group ``group``.

    Example:
        >>> split_value(tag_value(b"7", b"\x80data"))
        (b'7', b'\x80data')
    """
    return TAGGED + group + b"\x00" + payload


def split_value(blob: bytes) -> tuple[bytes | None, bytes]:
    r"""``(key group, payload)`` of a spark-provider value (None: written without one).

    Example:
        >>> split_value(b"\x80data")
        (None, b'\x80data')
    """
    if not blob.startswith(TAGGED):
        return None, blob
    group, _, payload = blob[len(TAGGED):].partition(b"\x00")
    return group, payload


def task_fields(entries: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    r"""One spark-provider task's map entries as :func:`redistribute` takes them.

    Each key keeps its stored value (key group included); its key group goes beside it.

    Example:
        >>> task_fields([(b"a", tag_value(b"7", b"\x80x"))])[TAG + b"a"]
        b'7'
    """
    fields: dict[bytes, bytes] = {}
    for key, blob in entries:
        fields[key] = blob
        group = split_value(blob)[0]
        if group is not None:
            fields[TAG + key] = group
    return fields


def new_group(stored: bytes | None, group: int | None) -> bytes:
    """The key group a key written under ``group`` keeps, when it had ``stored`` before.

    Example:
        >>> new_group(None, 7), new_group(b"7", 7), new_group(b"7", 5), new_group(None, None)
        (b'7', b'7', b'mixed', b'?')
    """
    now = UNKNOWN if group is None else str(group).encode()
    return now if stored is None or stored == now else MIXED


def why_not_keyed(topology: StormTopology, component: str) -> str | None:
    """Why ``component``'s state cannot follow key groups (None: it can).

    Every input must be a fields grouping whose tuples come from a bolt: the executor routes
    those by :func:`kstorm.grouping.stable_hash` and records the same hash with the state.
    """
    spec = topology.components[component]
    for g in spec.inputs:
        source = f"{g.component}:{g.stream}"
        if g.kind is GroupingKind.GLOBAL:
            return (f"its input {source} is a global grouping: its one task's state is not "
                    "keyed by grouping values, so nothing says where a key would go")
        if g.kind is not GroupingKind.FIELDS:
            return (f"its input {source} is a {g.kind.value} grouping: tuples go to any task, "
                    "so its state is per task, not per key")
        if topology.components[g.component].is_spout:
            return (f"its input {source} comes from a spout, whose raw rows Spark routes by "
                    "its own hash: put a bolt between the spout and the stateful bolt")
    return None


def redistribute(old: Sequence[Mapping[bytes, bytes]], tasks: int
                 ) -> list[dict[bytes, bytes]]:
    """Each old task's committed fields (keys and their :data:`TAG` fields), over ``tasks``.

    Raises:
        StateError: a key without a key group, written under two, or held by two tasks
            (the first five named).
    """
    new: list[dict[bytes, bytes]] = [{} for _ in range(tasks)]
    owner: dict[bytes, int] = {}
    problems: list[str] = []
    for task, fields in enumerate(old):
        for key, value in fields.items():
            if key.startswith(TAG):
                continue
            tag = fields.get(TAG + key)
            if key in owner:
                problems.append(f"key {key!r} is held by tasks {owner[key]} and {task} (not "
                                "keyed by grouping values)")
                continue
            owner[key] = task
            if tag is None or not tag.lstrip(b"-").isdigit() and tag != MIXED:
                problems.append(f"task {task}'s key {key!r} has no key group")
                continue
            if tag == MIXED:
                problems.append(f"task {task}'s key {key!r} was written under several key "
                                "groups (not keyed by grouping values)")
                continue
            target = new[int(tag) % tasks]
            target[key] = value
            target[TAG + key] = tag
    if problems:
        msg = "; ".join(problems[:5]) + (
            f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
        raise StateError(msg)
    return new
