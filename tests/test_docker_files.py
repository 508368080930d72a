"""The Docker files build: every COPY source is in the build context, compose is consistent.

No Docker engine needed: the build context is computed with docker-py's own ``.dockerignore``
matcher (``docker.utils.build.exclude_paths``, what ``docker build`` through docker-py sends),
and the compose file is checked as YAML. Where the ``docker compose`` CLI exists it also
validates the compose file (``docker compose config``).
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from docker.utils.build import exclude_paths

REPO = Path(__file__).resolve().parent.parent
DOCKER = REPO / "docker"
COMPOSE = DOCKER / "compose.yaml"
DOCKERFILES = sorted(p for p in DOCKER.rglob("Dockerfile*") if p.suffix != ".dockerignore")
# Built from the repository root (compose.yaml: context ".."). The service images are not:
# Dockerfile.broker's context is a directory holding only the tansu binary, Dockerfile.redis's
# is empty (integration_tests/_services.py ensure_image builds both so).
SERVICE_DOCKERFILES = {DOCKER / "Dockerfile.broker", DOCKER / "Dockerfile.redis"}
REPO_CONTEXT_DOCKERFILES = [p for p in DOCKERFILES if p not in SERVICE_DOCKERFILES]


# -- reading Dockerfiles -----------------------------------------------------------------------


@dataclass(frozen=True)
class Copy:
    line: int
    sources: tuple[str, ...]
    dest: str


def instructions(dockerfile: Path) -> list[tuple[int, str, str]]:
    """``(line number, INSTRUCTION, arguments)``, continuation lines joined, comments dropped."""
    out: list[tuple[int, str, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(dockerfile.read_text().splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # a comment inside a continued instruction
            continue
        start = start or number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        word, _, rest = text.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        start = 0
    return out


def copies(dockerfile: Path) -> list[Copy]:
    """The COPY/ADD instructions that read the build context (``--from`` ones do not)."""
    found = []
    for number, word, rest in instructions(dockerfile):
        if word not in ("COPY", "ADD"):
            continue
        if rest.startswith("["):
            words = json.loads(rest)
        else:
            words = shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        paths = [w for w in words if not w.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        assert len(paths) >= 2, f"{dockerfile}:{number}: COPY needs a source and a destination"
        found.append(Copy(number, tuple(paths[:-1]), paths[-1]))
    return found


def dockerignore(dockerfile: Path, context: Path) -> list[str]:
    """The patterns BuildKit uses: ``<Dockerfile>.dockerignore``, else the context's own."""
    for candidate in (dockerfile.with_name(dockerfile.name + ".dockerignore"),
                      context / ".dockerignore"):
        if candidate.is_file():
            # the same reading as docker-py's api/build.py
            lines = [line.strip() for line in candidate.read_text().splitlines()]
            return [line for line in lines if line and not line.startswith("#")]
    return []


def build_context(dockerfile: Path, context: Path) -> set[str]:
    """The paths (files and directories, relative) that the build would send."""
    patterns = dockerignore(dockerfile, context)
    return set(exclude_paths(str(context), patterns,
                             dockerfile=str(dockerfile.relative_to(context))))


def missing_from_context(dockerfile: Path, context: Path) -> list[str]:
    """COPY sources of ``dockerfile`` that are absent from its build context, with why."""
    sent = build_context(dockerfile, context)
    problems = []
    for copy in copies(dockerfile):
        for source in copy.sources:
            where = f"line {copy.line}: {source}"
            assert "$" not in source, f"{where}: variables in COPY sources are not checked"
            source = source.strip("/") or "."
            matches = ({p for p in sent if fnmatch.fnmatchcase(p, source)}
                       if any(c in source for c in "*?[") else {source} & sent)
            if not matches:
                exists = (context / source).exists() or any(context.glob(source))
                why = "excluded by .dockerignore" if exists else "not in the repository"
                problems.append(f"{where} is {why}")
                continue
            for match in matches:  # a directory: the code in it must reach the image too
                path = context / match
                if path.is_dir():
                    code = {str(f.relative_to(context)) for f in path.rglob("*.py")
                            if "__pycache__" not in f.parts}
                    problems += [f"{where}: {f} is excluded" for f in sorted(code - sent)]
    return problems


# -- the build contexts ------------------------------------------------------------------------


def test_there_are_dockerfiles_to_check():
    names = {str(p.relative_to(REPO)) for p in DOCKERFILES}
    assert {"docker/Dockerfile.app", "docker/examples/Dockerfile.topology"} <= names


@pytest.mark.parametrize("dockerfile", REPO_CONTEXT_DOCKERFILES,
                         ids=lambda p: str(p.relative_to(REPO)))
def test_every_copied_path_is_in_the_build_context(dockerfile):
    # every Dockerfile here is built from the repository root (compose.yaml: context "..")
    assert copies(dockerfile), f"{dockerfile} copies nothing: is the parser right?"
    assert missing_from_context(dockerfile, REPO) == []


def test_the_service_images_copy_only_what_their_small_contexts_hold():
    assert [c.sources for c in copies(DOCKER / "Dockerfile.broker")] == [("tansu",)]
    assert copies(DOCKER / "Dockerfile.redis") == []


@pytest.mark.parametrize("dockerfile", sorted(SERVICE_DOCKERFILES | {DOCKER / "Dockerfile.app"}),
                         ids=lambda p: p.name)
def test_the_base_image_is_a_build_argument(dockerfile):
    # A machine without a registry builds them FROM localhost/debian:bookworm
    # (scripts/container-engine.sh): `--build-arg BASE_IMAGE=...`.
    steps = instructions(dockerfile)
    (base,) = [rest for _, word, rest in steps if word == "FROM"]
    assert base == "${BASE_IMAGE}"
    assert any(word == "ARG" and rest.startswith("BASE_IMAGE=") for _, word, rest in steps)


def test_the_redis_image_keeps_an_append_only_file():
    steps = instructions(DOCKER / "Dockerfile.redis")
    (cmd,) = [json.loads(rest) for _, word, rest in steps if word == "CMD"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes"
    assert cmd[cmd.index("--appendfsync") + 1] == "always"


def test_the_app_image_gets_the_spark_worker_daemon():
    # Spark's spark.python.daemon.module is kstorm's; the image's pip install fails or its
    # workers cannot start without it (the bug this test was written for)
    sent = build_context(DOCKER / "Dockerfile.app", REPO)
    assert "kstorm/_spark/speedups/daemon.py" in sent
    assert {"kstorm/cli/__init__.py", "serdes/__init__.py", "sinks/redis/sink.py"} <= sent
    assert not any(p.startswith((".git/", "tests/", "bench/")) for p in sent)


def test_the_context_check_catches_an_excluded_copy_source(tmp_path):
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "main.py").write_text("print('hi')\n")
    (tmp_path / "app" / "helper.py").write_text("x = 1\n")
    (tmp_path / "daemon.py").write_text("")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM python:3.11\n"
                          "COPY --from=builder /wheels /wheels\n"  # another stage: ignored
                          "COPY daemon.py \\\n     /src/\n"
                          "COPY [\"app\", \"/src/app\"]\n"
                          "COPY missing.txt /src/\n")
    (tmp_path / "Dockerfile.dockerignore").write_text("*\n!app\napp/helper.py\n")
    assert missing_from_context(dockerfile, tmp_path) == [
        "line 3: daemon.py is excluded by .dockerignore",
        "line 5: app: app/helper.py is excluded",
        "line 6: missing.txt is not in the repository",
    ]


def test_the_example_image_runs_an_importable_topology():
    # CMD ["run", "module:function", ...]: the module must import and the function must
    # return a topology, or the container fails at its first start
    import importlib

    (cmd,) = [rest for _, word, rest in instructions(DOCKER / "examples/Dockerfile.topology")
              if word == "CMD"]
    args = json.loads(cmd)
    assert args[0] == "run"
    module, _, function = args[1].partition(":")
    topology = getattr(importlib.import_module(module), function)()
    assert set(topology.create_topology().components) == {"views", "per_page", "store"}
    (base,) = [rest for _, word, rest in instructions(DOCKER / "examples/Dockerfile.topology")
               if word == "ARG" and rest.startswith("KSTORM_IMAGE=")]
    assert base.split("=", 1)[1] == compose()["x-kstorm-image"]["image"]


# -- compose -----------------------------------------------------------------------------------


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_services_volumes_and_images_are_consistent():
    spec = compose()
    services = spec["services"]
    declared_volumes = set(spec.get("volumes") or {})
    used_volumes = set()
    for name, service in services.items():
        assert "image" in service or "build" in service, f"{name}: no image and no build"
        image = service.get("image", "")
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image), f"{name}: image {image!r} has no tag"
        if "build" in service:
            context = (COMPOSE.parent / service["build"]["context"]).resolve()
            dockerfile = context / service["build"]["dockerfile"]
            assert context == REPO, f"{name}: the Dockerfiles are written for the repo root"
            assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            if not source.startswith((".", "/", "~")):
                used_volumes.add(source)
        for needed, how in (service.get("depends_on") or {}).items():
            assert needed in services, f"{name} depends on unknown service {needed}"
            if how.get("condition") == "service_healthy":
                assert "healthcheck" in services[needed], f"{needed} has no healthcheck"
            assert set(services[needed].get("profiles", [])) <= set(
                service.get("profiles", [])), f"{name} depends on {needed}, not always started"
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port} listens beyond localhost"
    assert used_volumes == declared_volumes
    # one image for the app and the Spark cluster: driver and executors run the same Spark
    built = {s["image"] for s in services.values() if "build" in s}
    assert built == {spec["x-kstorm-image"]["image"]}


def test_compose_images_are_the_ones_the_docs_list():
    readme = (DOCKER / "README.md").read_text()
    for name, service in compose()["services"].items():
        assert f"`{service['image']}`" in readme, f"docker/README.md does not list {name}'s image"


def test_compose_file_is_valid_for_the_docker_cli_where_it_exists():
    # The YAML-level checks above always run; `docker compose config` (the CLI's own
    # validation: schema, interpolation, anchors, profiles) runs where the CLI has the plugin.
    spec = compose()
    assert spec["name"] == "kstorm" and set(spec["services"]) >= {"kafka", "redis", "app"}
    try:
        version = subprocess.run(["docker", "compose", "version"], capture_output=True,
                                 text=True, timeout=30, check=False)
    except FileNotFoundError:
        return  # no docker CLI on this machine
    if version.returncode != 0:
        return  # the docker CLI without the compose plugin
    done = subprocess.run(["docker", "compose", "-f", str(COMPOSE), "--profile", "cluster",
                           "config", "--quiet"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
