"""``kstorm run`` stopped by a signal: a stop, not a failure, however the signal was sent.

SIGTERM to the driver alone (Kubernetes, ``docker stop``) stops the topology as asked. Sent
to the whole process group (systemd's default ``KillMode``, ``kill -- -PGID``, ``timeout``)
it reaches Spark's JVM and Python processes too, which end the query under the driver: that
is still the stop asked for (exit 0, said so), not "topology failed" with a py4j error and
a traceback of pyspark's accumulator server.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from eo_topology import kill_session, wait_for_output, wait_session_gone

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent

TOPOLOGY = '''
from kstorm import BaseBasicBolt, Fields, TopologyBuilder, Values
from kstorm.testing import CaptureSink, ListSpout


class Split(BaseBasicBolt):
    def execute(self, tup, collector):
        for word in tup.get_string(0).split():
            collector.emit(Values(word))

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("word"))


class Shown(CaptureSink):
    def commit(self, batch):
        print("committed txid", batch.txid, flush=True)
        return super().commit(batch)


builder = TopologyBuilder()
builder.set_spout("lines", ListSpout([[("a b",)], [("c d",)]], Fields("line")))
builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
builder.set_bolt("out", Shown()).shuffle_grouping("split")
topology = builder.create_topology()
'''


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short temporary directory, so the JVM's own directory fits under it."""
    path = Path(tempfile.mkdtemp(prefix="krs-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("to_group", [False, True], ids=["driver", "process-group"])
def test_sigterm_stops_kstorm_run_cleanly(short_tmp: Path, to_group: bool) -> None:
    (short_tmp / "stoppable.py").write_text(TOPOLOGY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(short_tmp)]),
           "PYSPARK_PYTHON": sys.executable, "TMPDIR": str(short_tmp)}
    log = short_tmp / "run.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "kstorm.cli", "run", "stoppable:topology",
             "-c", f"kstorm.checkpoint.dir={short_tmp / 'cp'}", "-c", "kstorm.trigger=continuous",
             "-c", "kstorm.spark.master=local[2]"],
            env=env, cwd=short_tmp, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_output(log, "committed txid 1", process)
            if to_group:
                os.killpg(process.pid, signal.SIGTERM)
            else:
                process.send_signal(signal.SIGTERM)
            assert process.wait(120) == 0, log.read_text()[-3000:]
            wait_session_gone(process.pid)  # the JVM, the zygote and the workers follow
        finally:
            kill_session(process.pid)
            process.wait(30)
    text = log.read_text()
    assert "kstorm: topology 'stoppable' stopped (a batch it interrupted runs again" in text, \
        text[-3000:]
    assert "failed" not in text and "Traceback" not in text, text[-3000:]
    assert "WARNING" not in text and "Connection refused" not in text, text[-3000:]
