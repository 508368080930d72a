"""Spark's local checkpoint files without a child process per file: ``kstorm-hadoop.jar``.

Without Hadoop's native library (pyspark ships none), Hadoop's raw local file system runs
``chmod`` for the permission of every file it creates and ``readlink`` for both ends of every
rename. Spark writes each micro-batch's offset-log and commit-log entries as a new file
renamed into place, so every batch spawned about three processes from the driver JVM (seen
with ``strace -f -e trace=execve``: 23 ``chmod`` and 89 ``readlink`` in 40 one-row batches),
which is most of the ``walCommit`` and ``commitOffsets`` phases (~20 ms each).

``jvm/src/kstorm/hadoop/*.java`` is that file system with the permission set and a symbolic
link recognised through ``java.nio`` (everything else is Hadoop's code);
``jvm/src/kstorm/spark/*.java`` the class loader a session kstorm starts is built with
(``session.DEFERRED_EXTENSIONS``). ``jvm/kstorm-hadoop.jar`` holds their classes, built by
``python -m kstorm._spark.speedups.hadoop_fs`` (needs a JDK) and committed, so no JDK is needed to
run kstorm. The jar records a digest of the
sources it was built from (:func:`jar_sources_digest`); a unit test checks it against the
sources.

How Spark gets it (``kstorm/_spark/session.py``): the jar is appended to every driver's class
path (``SPARK_DIST_CLASSPATH``, which Spark's launcher adds last; the JVM class cache is keyed
by the jar, ``launch.py``), and with a ``local`` master the ``file`` scheme of Hadoop's
FileContext (what the checkpoint logs are written through) is :data:`FS_CLASS`. On a cluster
the executors do not have the jar, so Hadoop's own ``RawLocalFs`` stays.

Example:
    >>> JAR.name
    'kstorm-hadoop.jar'
    >>> FS_CLASS
    'kstorm.hadoop.NoForkLocalFs'
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent / "jvm"
JAR = HERE / "kstorm-hadoop.jar"
SOURCES = HERE / "src"
FS_CLASS = "kstorm.hadoop.NoForkLocalFs"
DIGEST_ENTRY = "META-INF/kstorm-hadoop.sources.sha256"
_STAMP = (1980, 1, 1, 0, 0, 0)  # fixed entry times: the same classes give the same jar


def proof(jar: Path = JAR) -> str | None:
    """Why Hadoop cannot load :data:`FS_CLASS` from ``jar``, or None when it can.

    The option naming the class is set before the JVM starts, so the proof is the jar's: a
    readable zip holding the class file. A JVM that cannot load it would fail the first
    checkpoint write; one that lacks the jar never gets the option.
    """
    entry = FS_CLASS.replace(".", "/") + ".class"
    try:
        with zipfile.ZipFile(jar) as archive:
            if archive.getinfo(entry).file_size == 0:
                return f"{entry} in {jar} is empty"
            archive.read(entry)
    except KeyError:
        return f"{jar} holds no {entry}"
    except (OSError, zipfile.BadZipFile) as exc:
        return f"cannot read {jar} ({exc})"
    return None


def sources_digest(root: Path = SOURCES) -> str:
    """sha256 over every ``.java`` file under ``root`` (relative path and bytes)."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.java")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def jar_sources_digest(jar: Path = JAR) -> str | None:
    """The sources digest recorded in ``jar`` (None: no jar, or none recorded)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            return archive.read(DIGEST_ENTRY).decode().strip()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def hadoop_api_jar() -> Path:
    """The Hadoop client API jar of the installed pyspark (what the sources compile against)."""
    import pyspark

    jars = sorted((Path(pyspark.__file__).parent / "jars").glob("hadoop-client-api-*.jar"))
    if not jars:
        msg = "no hadoop-client-api jar in the installed pyspark's jars directory"
        raise FileNotFoundError(msg)
    return jars[-1]


def build(out: Path = JAR, javac: str = "javac") -> Path:
    """Compile the sources (Java 17 class files) into ``out``; returns ``out``."""
    sources = sorted(SOURCES.rglob("*.java"))
    with tempfile.TemporaryDirectory(prefix="kstorm-hadoop-") as classes:
        subprocess.run([javac, "--release", "17", "-Xlint:all", "-Werror", "-cp",
                        str(hadoop_api_jar()), "-d", classes, *map(str, sources)], check=True)
        built = sorted(Path(classes).rglob("*.class"))
        partial = out.with_suffix(".jar.partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            entries = [("META-INF/MANIFEST.MF", b"Manifest-Version: 1.0\r\n\r\n"),
                       (DIGEST_ENTRY, sources_digest().encode() + b"\n")]
            entries += [(p.relative_to(classes).as_posix(), p.read_bytes()) for p in built]
            for name, data in entries:
                jar.writestr(zipfile.ZipInfo(name, _STAMP), data)
        os.replace(partial, out)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else JAR))
