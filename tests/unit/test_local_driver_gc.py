"""Which garbage collector a driver's JVM gets (``ttl.spark.session_settings``): pure logic."""

from __future__ import annotations

from ttl import spark as spark_settings
from ttl.config import SparkConfig

GC = spark_settings.LOCAL_DRIVER_GC


def _driver_options(**kwargs) -> list[str]:
    return spark_settings.session_settings(**kwargs).get(
        "spark.driver.extraJavaOptions", "").split()


def test_a_local_driver_runs_the_parallel_collector_once(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert GC == "-XX:+UseParallelGC"
    assert _driver_options().count(GC) == 1
    assert _driver_options(overrides={"spark.driver.extraJavaOptions": "-Xss4m"}) \
        .count(GC) == 1                                             # beside the profile's
    assert GC not in spark_settings.session_settings().get(
        "spark.executor.extraJavaOptions", "")


def test_a_collector_the_profile_names_wins(monkeypatch):
    """Two collectors in one option list stop the JVM from starting."""
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    for chosen in ("-XX:+UseG1GC", "-XX:+UseZGC", "-XX:+UseSerialGC"):
        options = _driver_options(
            overrides={"spark.driver.extraJavaOptions": f"-Xss4m {chosen}"})
        assert chosen in options and GC not in options


def test_a_cluster_or_submitted_driver_keeps_its_jvms_collector(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert GC not in _driver_options(conf=SparkConfig(master="spark://host:7077"))
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")                 # started by spark-submit
    assert GC not in _driver_options(overrides={"spark.jars": "/a.jar"})
