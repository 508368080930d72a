# The kstorm application image: Python 3.11, a Java 17 runtime for Spark, and kstorm with
# its avro and redis extras. Build it from the repository root (compose.yaml does this):
#
#   docker build -f docker/Dockerfile.app -t kstorm-app:0.1.0 .
#
# BASE_IMAGE is python:3.11-slim-bookworm by default; any Debian bookworm works too (python3
# 3.11 then comes from Debian's apt), e.g. without a registry the image that
# scripts/container-engine.sh makes:
#
#   docker build --build-arg BASE_IMAGE=localhost/debian:bookworm \
#       -f docker/Dockerfile.app -t kstorm-app:0.1.0 .
#
# kstorm is installed into a virtualenv, /opt/kstorm, on PATH: Debian's python3 is
# "externally managed" (PEP 668) and refuses a system-wide pip install.
#
# The image runs the Spark driver (`kstorm ...`, master local[*] by default). With its
# entrypoint replaced by `spark-class` it is also a Spark standalone master or worker whose
# Spark (pyspark's jars) and Python match the driver's exactly: see compose.yaml.

ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

LABEL org.opencontainers.image.title="kstorm" \
      org.opencontainers.image.description="Apache Storm topologies on Spark Structured Streaming" \
      org.opencontainers.image.licenses="Apache-2.0"

# JAVA_HOME is a symlink made below, so it is the same on amd64 and arm64.
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    PATH=/opt/kstorm/bin:$PATH \
    PYSPARK_PYTHON=/opt/kstorm/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/kstorm/bin/python \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# - openjdk-17-jre-headless: Spark 4 runs on Java 17 or 21; bookworm's JRE is 17.
#   Slim images delete /usr/share/man, where the JRE's postinst puts alternatives links.
# - procps: Spark's launch scripts call `ps`.
# - tini: PID 1 that forwards signals and reaps the JVM's and the embedded broker's children.
# - python3 python3-venv: only on a base without a Python that can make a venv (plain Debian).
# - The symlink turns /usr/lib/jvm/java-17-openjdk-<arch> into one JAVA_HOME.
RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    python=""; \
    python3 -c "import venv, ensurepip" 2> /dev/null || python="python3 python3-venv"; \
    apt-get update; \
    apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini $python; \
    rm -rf /var/lib/apt/lists/*; \
    ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" "$JAVA_HOME"; \
    "$JAVA_HOME/bin/java" -version; \
    python3 -m venv /opt/kstorm; \
    /opt/kstorm/bin/python -c "import sys; assert sys.version_info >= (3, 11), sys.version"

# PySpark is a ~400 MB download: give it its own layer so that editing kstorm does not fetch
# it again. Keep the version equal to pyproject.toml's pin; if they differ, the install
# below replaces it with pyproject's (correct, only slower).
# docker/wheelhouse: wheels downloaded on the host, for builds whose containers cannot reach
# PyPI (then PIP_NO_INDEX=1; see docker/wheelhouse/README.md). Committed, it holds a README only.
ARG PYSPARK_VERSION=4.3.0
ARG PIP_NO_INDEX=
COPY docker/wheelhouse /wheels
RUN pip install --find-links /wheels "pyspark==${PYSPARK_VERSION}"

COPY pyproject.toml README.md /src/
COPY kstorm /src/kstorm
COPY serdes /src/serdes
COPY sinks /src/sinks
RUN set -eux; \
    pip install --find-links /wheels "/src[avro,redis]"; \
    rm -rf /src /wheels; \
    python -c "import kstorm, serdes, sinks, pyspark; print('pyspark', pyspark.__version__)"; \
    kstorm --help > /dev/null

# Non-root. /app is the working directory: checkpoints default to /app/.kstorm/checkpoints,
# which compose.yaml mounts as a volume (shared with Spark workers in cluster mode).
RUN set -eux; \
    useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin kstorm; \
    install -d -o kstorm -g kstorm /app /app/.kstorm
WORKDIR /app
USER 10001:10001

# Start Spark once at build time: records the JVM class cache (~/.cache/kstorm) that every
# container start then maps, a few seconds less to the first result (README, "Start-up").
# WARM_UP=0 skips it (the image then works, with a slower first start).
ARG WARM_UP=1
RUN if [ "$WARM_UP" = 1 ]; then kstorm -v warm-up; fi

ENTRYPOINT ["/usr/bin/tini", "--", "kstorm"]
CMD ["demo"]
