"""The JVM jars pinned in deploy/versions.toml match the installed Python packages."""

from __future__ import annotations

from importlib.metadata import version

from ttl.jvm.jars import Versions, _artifact_name, _pom


def test_spark_jars_match_installed_pyspark():
    assert Versions.load().spark == version("pyspark")


def test_delta_jars_match_installed_delta_spark():
    assert Versions.load().delta == version("delta-spark")


def test_delta_artifact_carries_the_spark_line():
    v = Versions.load()
    assert v.spark.startswith(v.spark_line + ".")
    assert v.spark_packages()[0] == f"io.delta:delta-spark_{v.spark_line}_2.13:{v.delta}"


def test_artifact_name_strips_versions():
    assert _artifact_name("kafka-clients-3.9.1.jar") == "kafka-clients"
    assert _artifact_name("zstd-jni-1.5.6-10.jar") == "zstd-jni"
    assert _artifact_name("spark-sql-kafka-0-10_2.13-4.1.3.jar") == "spark-sql-kafka-0-10_2.13"


def test_pom_writes_exclusions():
    pom = _pom(["g:a:1!x:y"])
    assert "<artifactId>a</artifactId><version>1</version>" in pom
    assert "<exclusion><groupId>x</groupId><artifactId>y</artifactId></exclusion>" in pom
