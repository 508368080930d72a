"""A windowed bolt's own fields, kept with its windows so that they follow its task anywhere.

Storm runs a bolt task on one instance for its worker's life, and a windowed bolt may keep a
running value in a field: storm-starter's ``SlidingWindowSumBolt`` keeps ``sum``, adding
``get_new()`` and subtracting ``get_expired()``. On Spark a windowed bolt task runs in the
Python worker Spark gives its state's key in that batch; a worker keeps the instance it
prepared, but another worker prepares its own, whose fields would start over while the
windows went on.

So every batch of a windowed bolt task ends with :func:`save`: the instance's own fields,
pickled into the task's window state (:attr:`WindowedTask.bolt_fields`, stored wherever the
windows are: Spark's state store, a state provider, a sink's record). The next batch begins
with :func:`restore` into the instance it runs on, unless that instance is the one that saved
them and did nothing since (a token says so). A failed attempt's changes are undone with the
windows' (the next attempt restores the fields saved with the windows it starts from), and so
are a restart's: the fields always belong to the windows they were computed with.

What is kept: every attribute of the instance that pickles, except what the runtime hands the
bolt (its collector, context and state) and kstorm's own settings. An attribute that does not
pickle (a client, a lock, a file) stays as ``prepare`` made it in each worker; its name is
logged once per bolt.
"""

from __future__ import annotations

import logging
import pickle
import uuid
from typing import Any

from kstorm.bolt import BasicOutputCollector, OutputCollector
from kstorm.component import TopologyContext

log = logging.getLogger("kstorm.windowing")

#: The instance's marker: the token of the fields it saved last (None: changed since).
TOKEN = "_kstorm_fields_token"
_RUNTIME = (OutputCollector, BasicOutputCollector, TopologyContext)
_WARNED: set[str] = set()


def _runtime_object(value: Any, handed: tuple[Any, ...]) -> bool:
    """What the runtime handed the bolt (not its own): collector, context, state."""
    return (any(value is h for h in handed) or isinstance(value, _RUNTIME)
            or callable(getattr(value, "prepare_commit", None)))


def save(bolt: Any, component: str, handed: tuple[Any, ...] = ()) -> bytes | None:
    """The bolt's own fields after a batch, with a new token the instance keeps.

    ``handed``: what the runtime gave the bolt (its collectors, context, state), never kept.
    None when it has no fields of its own.
    """
    fields = {name: value for name, value in vars(bolt).items()
              if not name.startswith("_kstorm") and not _runtime_object(value, handed)}
    if not fields:
        return None
    try:
        body = pickle.dumps(fields, protocol=5)
    except Exception:  # noqa: BLE001 - some field does not pickle: keep those that do
        kept, left = {}, []
        for name, value in fields.items():
            try:
                pickle.dumps(value, protocol=5)
            except Exception:  # noqa: BLE001 - a client, a lock, a file: not state
                left.append(name)
            else:
                kept[name] = value
        if component not in _WARNED:
            _WARNED.add(component)
            log.info("windowed bolt %r: field(s) %s do not pickle, so they are not kept with "
                     "its windows: each Python worker has them as prepare() made them",
                     component, sorted(left))
        body = pickle.dumps(kept, protocol=5)
    token = uuid.uuid4().hex
    object.__setattr__(bolt, TOKEN, token)
    return pickle.dumps((token, body), protocol=5)


def restore(bolt: Any, saved: bytes | None) -> None:
    """Before a batch: the fields saved with the windows, unless ``bolt`` saved them itself.

    The instance's token is cleared either way: it changes during the batch, and if the
    batch fails, the next attempt must restore.
    """
    mine = getattr(bolt, TOKEN, None)
    object.__setattr__(bolt, TOKEN, None)
    if saved is None:
        return
    token, body = pickle.loads(saved)
    if mine == token:
        return
    for name, value in pickle.loads(body).items():
        object.__setattr__(bolt, name, value)
