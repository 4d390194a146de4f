"""JVM jars from Maven Central, resolved once into a cache outside the repository.

Two bundles, kept apart because they must never share a classpath:

* ``spark``: Delta Lake for the pinned Spark line and Spark's Kafka connector (with their
  runtime dependencies, minus what PySpark already ships), handed to Spark as ``spark.jars``.
* ``kafka``: an Apache Kafka broker release (KRaft) and the matching ``kafka-streams`` jar,
  for the local broker and the codec's byte-compatibility test.
* ``s3proxy``: the local S3-compatible server (``ttl.local.object_store``).
* ``packages-<digest>``: a profile's ``spark.packages`` (hadoop-aws for ``s3a://``, ...),
  handed to a local session as ``spark.jars`` once ``ttl setup --conf PROFILE`` (or
  ``--object-store``, for hadoop-aws) resolved them; until then Spark's Ivy resolves them.

Maven resolves them (``mvn dependency:copy-dependencies`` on a generated pom): it reaches
Maven Central on this kind of machine, whereas Spark's own Ivy resolver is a second code path
we do not need locally. A bundle is complete when its ``.complete`` marker lists every jar; a
second run finds the marker and downloads nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ttl.config import REPO_ROOT
from ttl.errors import SetupError

VERSIONS_FILE = REPO_ROOT / "deploy" / "versions.toml"
MARKER = ".complete"


@dataclass(frozen=True)
class Versions:
    """The JVM versions pinned in ``deploy/versions.toml``."""

    scala: str
    spark: str
    spark_line: str
    delta: str
    kafka: str
    spark_token_provider: str
    hadoop: str
    s3proxy: str

    @classmethod
    def load(cls, path: Path = VERSIONS_FILE) -> Versions:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
        return cls(**{name: str(raw[name]) for name in cls.__dataclass_fields__})

    def spark_packages(self) -> list[str]:
        """Coordinates a cluster user passes to ``--packages`` instead of local jars."""
        return [
            f"io.delta:delta-spark_{self.spark_line}_{self.scala}:{self.delta}",
            f"org.apache.spark:spark-sql-kafka-0-10_{self.scala}:{self.spark}",
        ]

    def spark_bundle(self) -> list[str]:
        """What the local resolver fetches: the packages, with the token provider replaced."""
        token = f"org.apache.spark:spark-token-provider-kafka-0-10_{self.scala}"
        connector = self.spark_packages()[1]
        return [
            self.spark_packages()[0],
            f"{connector}!{token}",
            f"{token}:{self.spark_token_provider}",
        ]

    def s3proxy_packages(self) -> list[str]:
        return [f"org.gaul:s3proxy:{self.s3proxy}",
                "com.fasterxml.jackson.core:jackson-annotations:2.21"]

    def hadoop_aws(self) -> str:
        """What a profile lists in ``spark.packages`` for ``s3a://`` paths."""
        return f"org.apache.hadoop:hadoop-aws:{self.hadoop}"

    def kafka_packages(self) -> list[str]:
        return [
            f"org.apache.kafka:kafka_{self.scala}:{self.kafka}",
            f"org.apache.kafka:kafka-streams:{self.kafka}",
            # Kafka logs through SLF4J 2; without a binding the broker's log would be empty.
            "org.slf4j:slf4j-api:2.0.17",
            "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.4",
        ]


def cache_root() -> Path:
    """``$TTL_CACHE`` or ``~/.cache/ttl``: outside the repository, shared by clones."""
    return Path(os.environ.get("TTL_CACHE", Path.home() / ".cache" / "ttl"))


def bundle_dir(bundle: str, versions: Versions | None = None) -> Path:
    v = versions or Versions.load()
    if bundle.startswith("packages-"):
        return cache_root() / "jars" / bundle
    tag = {"spark": f"spark-{v.spark}-delta-{v.delta}", "kafka": f"kafka-{v.kafka}",
           "s3proxy": f"s3proxy-{v.s3proxy}"}[bundle]
    return cache_root() / "jars" / tag


def packages_bundle(coordinates: list[str]) -> str:
    """The bundle name of a profile's ``spark.packages`` (by their digest)."""
    digest = hashlib.sha256("\n".join(sorted(coordinates)).encode()).hexdigest()[:12]
    return f"packages-{digest}"


def packages_jars(coordinates: list[str]) -> list[Path] | None:
    """The local jars of ``coordinates`` if resolved (``resolve_packages``), else None."""
    target = bundle_dir(packages_bundle(coordinates))
    return jars(target.name) if (target / MARKER).exists() else None


def resolve_packages(coordinates: list[str]) -> tuple[list[Path], bool]:
    """Resolve a profile's ``spark.packages`` with Maven, less what PySpark and the spark
    bundle already hold (one copy of each class on the classpath)."""
    return resolve(packages_bundle(coordinates), coordinates=coordinates)


def _pom(coordinates: list[str]) -> str:
    deps = []
    for coord in coordinates:
        coord, *excluded = coord.split("!")
        group, artifact, version = coord.split(":")
        exclusions = "".join(
            "<exclusion><groupId>{}</groupId><artifactId>{}</artifactId></exclusion>".format(
                *ex.split(":")
            )
            for ex in excluded
        )
        deps.append(
            f"<dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{version}</version><exclusions>{exclusions}</exclusions></dependency>"
        )
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>ttl</groupId><artifactId>ttl-jars</artifactId><version>0</version>"
        f"<dependencies>{''.join(deps)}</dependencies></project>"
    )


# Spark's poms declare extra repositories (a Google mirror) that this kind of machine cannot
# reach; Maven would fail on them instead of falling back. Route every repository to Central.
_SETTINGS = (
    '<settings xmlns="http://maven.apache.org/SETTINGS/1.0.0"><mirrors><mirror>'
    "<id>central-only</id><mirrorOf>*,!central</mirrorOf>"
    "<url>https://repo.maven.apache.org/maven2</url></mirror></mirrors></settings>"
)


def _pyspark_jar_names() -> set[str]:
    """Artifact names PySpark already ships, so the spark bundle does not duplicate them."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact_name(p.name) for p in jars.glob("*.jar")}


def _artifact_name(filename: str) -> str:
    """``kafka-clients-3.9.1.jar`` -> ``kafka-clients`` (the version starts at ``-N.N``)."""
    stem = filename.removesuffix(".jar")
    match = re.match(r"^(.*?)-\d+(\.\d+)+", stem)
    return match.group(1) if match else stem


def jars(bundle: str, versions: Versions | None = None) -> list[Path]:
    """The jar paths of a resolved bundle; raises if it was never resolved."""
    target = bundle_dir(bundle, versions)
    marker = target / MARKER
    if not marker.exists():
        raise SetupError(
            f"the {bundle!r} jars are not resolved under {target}. "
            "Operator action: run `ttl setup` (or `make setup`)."
        )
    return [target / name for name in marker.read_text().split()]


def resolve(bundle: str, versions: Versions | None = None, *,
            coordinates: list[str] | None = None) -> tuple[list[Path], bool]:
    """Resolve a bundle if needed; returns its jars and whether anything was downloaded."""
    v = versions or Versions.load()
    target = bundle_dir(bundle, v)
    if (target / MARKER).exists():
        return jars(bundle, v), False
    if shutil.which("mvn") is None:
        raise SetupError("Maven (`mvn`) is not installed; it resolves the JVM jars.")
    coords = coordinates or {"spark": v.spark_bundle, "kafka": v.kafka_packages,
                             "s3proxy": v.s3proxy_packages}[bundle]()
    staging = target.with_name(target.name + ".staging")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / "pom.xml").write_text(_pom(coords))
    (staging / "settings.xml").write_text(_SETTINGS)
    cmd = [
        "mvn", "-q", "-B", "-s", str(staging / "settings.xml"), "-f", str(staging / "pom.xml"),
        "dependency:copy-dependencies", "-DincludeScope=runtime",
        f"-DoutputDirectory={staging / 'lib'}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        output = proc.stdout[-3000:] + proc.stderr[-2000:]
        raise SetupError(f"Maven could not resolve {coords}:\n{output}")
    lib = staging / "lib"
    skip = set()
    if bundle == "spark":
        skip = _pyspark_jar_names()
    elif bundle.startswith("packages-"):  # beside PySpark's and the spark bundle's jars
        skip = _pyspark_jar_names() | {_artifact_name(p.name) for p in jars("spark", v)}
    kept = sorted(p.name for p in lib.glob("*.jar") if _artifact_name(p.name) not in skip)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for name in kept:
        shutil.move(str(lib / name), target / name)
    (target / MARKER).write_text("\n".join(kept) + "\n")
    shutil.rmtree(staging, ignore_errors=True)
    return jars(bundle, v), True


def resolve_all() -> dict[str, tuple[int, bool]]:
    """Resolve every bundle; returns per bundle the jar count and whether it downloaded."""
    out = {}
    for bundle in ("spark", "kafka"):
        paths, downloaded = resolve(bundle)
        out[bundle] = (len(paths), downloaded)
    return out
