"""A free-form spout under kill -9: the replayed batch is the logged one, sinks exactly once.

``python -m spout_topology`` (NumberSpout 0..2999 -> Record -> two transactional Redis
sinks, sum and count per key) runs in a subprocess. The first run pauses inside batch 3
after the bolt has seen it (so batch 3 is logged, processed, not committed) and is
SIGKILLed there with its whole process session. The second run replays batch 3 from the
spout's log, then goes on with ``next_tuple`` from the position the spout persisted in
``ack``, and exits once everything is acked.

Ground truth is ``range(3000)``: each key's sum and count in Redis must equal it (nothing
lost, nothing doubled), every number must have been seen in exactly one batch id (a replay
that re-ran ``next_tuple`` would put numbers in other batches), batch 3's attempts before and
after the kill must hold the same numbers as its log file, and every number must be acked.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
import redis
from _services import RedisService
from eo_topology import TopologyProcess
from spout_topology import KEYS
from spouts import acked, recorded_batches

from kstorm._runtime.spout_log import SpoutLog

pytestmark = [pytest.mark.integration, pytest.mark.slow]

N = 3_000
PAUSE_BATCH = 3
START_TIMEOUT = 180.0


def test_kill_9_mid_batch_replays_the_logged_batch(redis_server: RedisService,
                                                   tmp_path: Path) -> None:
    name = f"sp-{uuid.uuid4().hex[:6]}"
    checkpoint = tmp_path / "checkpoint"
    argv = ["--redis-url", redis_server.url, "--count", str(N), "--state-dir", str(tmp_path),
            "--checkpoint", str(checkpoint), "--name", name, "--per-batch", "300"]
    first = TopologyProcess.start([*argv, "--pause-batch", str(PAUSE_BATCH)], tmp_path, "run1",
                                  module="spout_topology")
    marker = tmp_path / "paused"
    deadline = time.monotonic() + START_TIMEOUT
    while not marker.exists():
        assert first.exited() is None, f"run1 exited early:\n{first.tail()}"
        assert time.monotonic() < deadline, f"run1 never reached batch 3:\n{first.tail()}"
        time.sleep(0.05)
    first.kill()
    seen_at_kill = len(recorded_batches(tmp_path))
    spout_log = SpoutLog(checkpoint / "kstorm" / "spouts" / "numbers")
    logged = sorted(t.values[0] for t in spout_log.tuples(PAUSE_BATCH))  # before the replay
    assert logged and spout_log.acked() <= PAUSE_BATCH  # logged, never acked

    second = TopologyProcess.start(argv, tmp_path, "run2", module="spout_topology")
    code = second.wait(START_TIMEOUT + 240)
    assert code == 0, f"run2 exited {code}:\n{second.tail()}"

    client = redis.Redis.from_url(redis_server.url)
    for k in range(KEYS):
        mine = [n for n in range(N) if n % KEYS == k]
        assert int(client.get(f"{name}:sum:{k}")) == sum(mine), f"sum of key {k}"
        assert int(client.get(f"{name}:count:{k}")) == len(mine), f"count of key {k}"
    batches_of: dict[int, set[int]] = defaultdict(set)
    for batch, _pid, _task, numbers in recorded_batches(tmp_path):
        for n in numbers:
            batches_of[n].add(batch)
    assert sorted(batches_of) == list(range(N))
    assert all(len(b) == 1 for b in batches_of.values()), "a number moved to another batch"
    recorded = recorded_batches(tmp_path)
    before = sorted(n for b, _, _, ns in recorded[:seen_at_kill] if b == PAUSE_BATCH for n in ns)
    after = sorted(n for b, _, _, ns in recorded[seen_at_kill:] if b == PAUSE_BATCH for n in ns)
    assert after == logged, f"the replay of batch {PAUSE_BATCH} is its logged content"
    assert before and set(before) <= set(logged), "the first attempt saw logged tuples only"
    assert sorted(set(acked(tmp_path))) == list(range(N))
    opens = (tmp_path / "opens").read_text().split()
    assert len(opens) == 4 and int(opens[1]) == 0 < int(opens[3]) <= min(logged)
