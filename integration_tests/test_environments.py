"""The stateful word count exact where the environment moves: temporary directories of every
length kstorm has a threshold for, a temporary directory on another file system than the
checkpoint, a home without a usable ``~/.cache``, two topologies on one host at once, one of
them killed, and a working directory deleted under the driver.

Each run is ``python -m wc_topology`` (KafkaSpout -> split -> ``BaseStatefulBolt`` count,
fields grouping -> RedisSink) in a process of its own with the environment under test,
SIGKILLed once at a random moment and restarted; every word's stored count must equal its
count in the produced sentences (computed here).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _runs import RUN_TIMEOUT, Runs
from topologies import sentence_records

from kstorm._kafka.client import create_topic
from kstorm._spark.speedups import jvm_tmp

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SENTENCES = 400  # 10 batches of 40 records
# A driver's JVM directory is <TMPDIR>/kstorm-jvm-<uid>/<pid>-<8 random>; it holds Spark's
# sockets up to this TMPDIR length (Spark takes a socket directory of at most 60 characters,
# and ".<uuid>.sock" in it must fit in 107 bytes), and a short directory does beyond it.
_JVM_DIR_EXTRA = len(f"/kstorm-jvm-{os.getuid()}/{os.getpid()}-xxxxxxxx")
SOCKET_LIMIT = min(jvm_tmp.SOCKET_DIR_MAX,
                   jvm_tmp.SUN_PATH_MAX - len("/" + jvm_tmp.SPARK_SOCKET_NAME)) - _JVM_DIR_EXTRA
LENGTHS = sorted({30, SOCKET_LIMIT, SOCKET_LIMIT + 1, 120})


@pytest.fixture
def short_root() -> Iterator[Path]:
    """A directory of this test's own right under /tmp, to grow TMPDIRs of a given length."""
    path = Path(tempfile.mkdtemp(prefix="ke", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _of_length(root: Path, length: int) -> Path:
    path = root / ("t" * (length - len(str(root)) - 1))
    path.mkdir(parents=True, exist_ok=True)
    assert len(str(path)) == length
    return path


def _word_count(kafka: Any, redis_server: Any, produce: Any, where: Path,
                env: dict[str, str], checkpoint: Path | None = None
                ) -> tuple[Runs, Counter[str]]:
    name = f"wce-{uuid.uuid4().hex[:6]}"
    topic = f"{name}-sentences"
    create_topic(kafka.bootstrap_servers, topic, 2)
    sentences = [json.loads(r)["sentence"]
                 for r in sentence_records(SENTENCES, seed=len(name))]
    produce(kafka.bootstrap_servers, topic, sentences)
    argv = ["--bootstrap", kafka.bootstrap_servers, "--redis-url", redis_server.url,
            "--topic", topic, "--checkpoint", str(checkpoint or where / "checkpoint"),
            "--name", name, "--provider", "spark"]
    runs = Runs(argv, name, redis_server.url, where, module="wc_topology", env=env)
    return runs, Counter(w for s in sentences for w in s.split())


def _stored(runs: Runs) -> dict[str, int]:
    keys = runs.client.keys(f"{runs.name}:*")
    return {k.decode().split(":", 1)[1]: int(runs.client.get(k)) for k in keys}


def _exact_after_a_kill(runs: Runs, truth: Counter[str]) -> None:
    runs.kill_at_random()
    assert runs.finish() == 0, ("\n".join(runs.timeline) + "\n"
                                + runs.logs[-1].read_text()[-3000:])
    assert _stored(runs) == dict(truth), "\n".join(runs.timeline)


@pytest.mark.parametrize("length", LENGTHS)
def test_word_count_exact_under_temporary_directories_of_every_threshold(
        spark: Any, kafka: Any, redis_server: Any, produce: Any, tmp_path: Path,
        short_root: Path, length: int) -> None:
    """30 characters (the length that once stopped every stateful topology), the last
    length whose JVM directory holds Spark's sockets, the first that moves them to a short
    directory, and 120 (every length between is ``tests/_spark/test_jvm_tmp.py``'s sweep)."""
    tmpdir = _of_length(short_root, length)
    runs, truth = _word_count(kafka, redis_server, produce, tmp_path, {"TMPDIR": str(tmpdir)})
    _exact_after_a_kill(runs, truth)


def test_word_count_exact_with_tmpdir_on_another_file_system_and_no_usable_home(
        spark: Any, kafka: Any, redis_server: Any, produce: Any, tmp_path: Path) -> None:
    """TMPDIR on /dev/shm (tmpfs), the checkpoint under pytest's directory, and HOME a
    file (so no ~/.cache can be made there: the class cache is skipped, said once)."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.statvfs(shm).f_bavail * os.statvfs(shm).f_frsize < 2 ** 30:
        pytest.fail("/dev/shm (tmpfs with 1 GiB free) is needed for this test")
    tmpdir = Path(tempfile.mkdtemp(prefix="kenv-", dir=shm))
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    try:
        assert os.stat(tmpdir).st_dev != os.stat(tmp_path).st_dev
        env = {"TMPDIR": str(tmpdir), "HOME": str(home), "KSTORM_CACHE_DIR": "",
               "XDG_CACHE_HOME": ""}
        runs, truth = _word_count(kafka, redis_server, produce, tmp_path, env)
        _exact_after_a_kill(runs, truth)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def test_two_topologies_at_once_one_killed_the_other_unaffected(
        spark: Any, kafka: Any, redis_server: Any, produce: Any, tmp_path: Path) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first, first_truth = _word_count(kafka, redis_server, produce, first_dir, {})
    second, second_truth = _word_count(kafka, redis_server, produce, second_dir, {})
    survivor = second.start()
    first.kill_at_random()  # while the second runs
    assert survivor.wait(300) == 0, second.report(survivor)
    assert _stored(second) == dict(second_truth)
    assert first.finish() == 0, "\n".join(first.timeline)
    assert _stored(first) == dict(first_truth)


def test_word_count_exact_on_the_public_routes_only(
        spark: Any, kafka: Any, redis_server: Any, produce: Any, tmp_path: Path) -> None:
    """Every speed-up off (``KSTORM_SPEEDUPS_OFF=all``): foreachBatch, toArrow, the public
    MapState methods, TCP between the JVM and Python, no zygote. The same counts."""
    runs, truth = _word_count(kafka, redis_server, produce, tmp_path,
                              {"KSTORM_SPEEDUPS_OFF": "all"})
    _exact_after_a_kill(runs, truth)
    log = runs.logs[-1].read_text()
    assert "data path on the public route" in log, log[-2000:]


def test_word_count_exact_when_its_working_directory_is_deleted_under_it(
        spark: Any, kafka: Any, redis_server: Any, produce: Any, tmp_path: Path) -> None:
    """The driver's working directory removed while it runs (a cleaned-up build or release
    directory): Spark's Python processes still start (the zygote's launcher hands over to
    Python itself), the run ends by itself, and every count is exact after a kill too."""
    runs, truth = _word_count(kafka, redis_server, produce, tmp_path, {})
    for attempt in ("killed", "finishing"):
        work = tmp_path / f"work-{attempt}"
        work.mkdir()
        runs.cwd = work
        before = runs.txid()
        run = runs.start()
        assert runs.await_commit(run, before) or run.exited() == 0, runs.report(run)
        shutil.rmtree(work)
        runs.timeline.append(f"run{runs.count}: its working directory deleted at txid "
                             f"{runs.txid()}")
        if attempt == "killed":
            time.sleep(runs.rng.uniform(0.5, 2.0))
            run.kill()
            runs.timeline.append(f"run{runs.count} killed at txid {runs.txid()}")
            continue
        code = run.wait(RUN_TIMEOUT + 60)
        assert code == 0, runs.report(run)
    assert _stored(runs) == dict(truth), "\n".join(runs.timeline)
