r"""Exactly-once Redis sink (seed 002's transactional and opaque state, on Redis).

Stored layout, as ``redis-cli`` shows it. Values sit where you asked for them, in
plain Redis types; the exactly-once bookkeeping sits beside them under
``kstorm:<topology>:<sink>:`` (``<sink>`` is the sink id, ``redis`` by default)::

    # field=None: a string key per value
    GET counts:storm                                  -> "42"
    HGET kstorm:wc:redis:txid counts:storm            -> "8"   (txid that last wrote it)
    HGET kstorm:wc:redis:prev counts:storm            -> "40"  (value before txid 8)

    # field="{word}": a hash per key, a field per value
    HGETALL counts:2024-05-01                         -> storm "42"  spark "17"
    HGETALL kstorm:wc:redis:txid:counts:2024-05-01    -> storm "8"   spark "6"
    HGETALL kstorm:wc:redis:prev:counts:2024-05-01    -> storm "40"

    # the batch record, written in the same atomic step as the values
    HGETALL kstorm:wc:redis:offsets                   -> txid "8"  words/0 "1210"  words/1 "988"
    SMEMBERS kstorm:wc:redis:lastkeys                 -> "\x00counts:storm" ... (opaque mode)

* values: numbers are plain decimals (integers exact up to 2**53), anything else
  compact JSON with sorted keys (``value_codec="json"``), or verbatim strings
  (``value_codec="string"``).
* ``txid``: the txid that last wrote each value (seed 002's ``txid``).
* ``prev`` (opaque mode only): each value as it was before that txid (seed 002's
  ``prevCount``), so a replay of the txid recomputes from it. No entry when the
  txid wrote the value first.
* ``lastkeys`` (opaque mode only): the keys the last txid wrote. A replay of that txid
  (seed 002's opaque spouts may emit a different batch) is applied again from ``prev``,
  and a key it no longer writes is put back as it was before the txid.
* ``offsets``: ``txid`` = the last committed batch; ``<topic>/<partition>`` = the
  end offset (exclusive) that batch read up to.
* ``stage:<txid>``: a batch of more than ``max_entries_per_call`` keys, uploaded in
  numbered JSON chunks just before its commit and deleted by it (it expires after
  a day if the commit never comes). The commit itself is still one script, so a
  large batch is as atomic as a small one.

Redis must be standalone (or one shard): one script touches all the keys. Keep one
topology per key space; two topologies writing one key break the update rules. To
start a key space over, delete its keys *and* ``kstorm:<topology>:<sink>:*``.
"""

from .config import RedisConfig
from .merge import BUILTIN_MERGES, LuaMerge
from .sink import CommitResult, Committed, RedisSink

__all__ = [
    "BUILTIN_MERGES",
    "CommitResult",
    "Committed",
    "LuaMerge",
    "RedisConfig",
    "RedisSink",
]
