"""Which garbage collector a driver's JVM gets (``ttl.spark.session_settings``): pure logic
(no jar look-up, no class-data archive)."""

from __future__ import annotations

import pytest

from ttl import spark as spark_settings
from ttl.config import SparkConfig
from ttl.jvm import class_archive

GC = spark_settings.LOCAL_DRIVER_GC
JARS = {"spark.jars": "/a.jar"}


@pytest.fixture(autouse=True)
def _pure(monkeypatch):
    monkeypatch.setattr(class_archive, "java_options", lambda settings: None)
    for name in ("PYSPARK_GATEWAY_PORT", "SPARK_CONF_DIR", "SPARK_HOME",
                 *spark_settings._JAVA_OPTIONS_ENV):
        monkeypatch.delenv(name, raising=False)


def _driver_options(conf: SparkConfig | None = None, **overrides: str) -> list[str]:
    return spark_settings.session_settings(conf, {**JARS, **overrides}).get(
        "spark.driver.extraJavaOptions", "").split()


def _profile(options: str) -> list[str]:
    return _driver_options(**{"spark.driver.extraJavaOptions": options})


def test_a_local_driver_runs_the_parallel_collector_once():
    assert GC == "-XX:+UseParallelGC"
    assert _driver_options().count(GC) == 1
    assert _driver_options(SparkConfig(master="local[4]")).count(GC) == 1
    assert _profile("-Xss4m").count(GC) == 1                        # beside the profile's
    assert GC not in spark_settings.session_settings(overrides=JARS).get(
        "spark.executor.extraJavaOptions", "")


def test_a_collector_the_profile_names_wins():
    """Two collectors in one option list stop the JVM from starting."""
    for chosen in ("-XX:+UseG1GC", "-XX:+UseZGC", "-XX:+UseSerialGC", "-XX:+UseShenandoahGC",
                   "-XX:+UseEpsilonGC", "-XX:+UseParallelGC"):
        options = _profile(f"-Xss4m {chosen}")
        assert chosen in options and options.count(chosen) == 1
        assert GC not in options or chosen == GC
    # defaultJavaOptions: Spark's launcher puts them on the same command line.
    options = _driver_options(**{"spark.driver.defaultJavaOptions": "-XX:+UseG1GC"})
    assert GC not in options


def test_options_that_only_end_in_gc_choose_no_collector():
    for flag in ("-XX:+UseAdaptiveSizePolicyWithSystemGC", "-XX:+UseGCOverheadLimit",
                 "-XX:+UseMaximumCompactionOnSystemGC", "-XX:+ExplicitGCInvokesConcurrent"):
        assert _profile(flag).count(GC) == 1, flag
    # Prepended, so a profile's later ``-XX:-UseParallelGC`` turns it off again.
    options = _profile("-XX:-UseParallelGC")
    assert options.index(GC) < options.index("-XX:-UseParallelGC")


def test_a_collector_named_where_else_the_jvm_reads_options_wins(monkeypatch, tmp_path):
    for name in spark_settings._JAVA_OPTIONS_ENV:
        monkeypatch.setenv(name, "-Xss4m -XX:+UseG1GC")
        assert GC not in _driver_options(), name
        monkeypatch.setenv(name, "-Xss4m")
        assert GC in _driver_options(), name
        monkeypatch.delenv(name)
    (tmp_path / "spark-defaults.conf").write_text(
        "spark.driver.defaultJavaOptions  -XX:+UseZGC\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert GC not in _driver_options()
    monkeypatch.delenv("SPARK_CONF_DIR")
    assert GC in _driver_options()
    # No SPARK_CONF_DIR: the launcher reads $SPARK_HOME/conf (a properties file: ``=``).
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text(
        "# a Spark distribution's\nspark.driver.defaultJavaOptions=-XX:+UseG1GC\n")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert GC not in _driver_options()


def test_spark_defaults_are_read_as_a_properties_file(tmp_path):
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# comment\nspark.a  1 2\nspark.b=x=y\nspark.c : file:/z\n"
                    "spark.d\t-Da=b -Dc=d\n\n=odd\n")
    assert spark_settings.read_spark_defaults(path) == {
        "spark.a": "1 2", "spark.b": "x=y", "spark.c": "file:/z", "spark.d": "-Da=b -Dc=d"}


def test_a_cluster_submitted_or_local_cluster_driver_keeps_its_jvms_collector(monkeypatch):
    assert GC not in _driver_options(SparkConfig(master="spark://host:7077"))
    assert GC not in _driver_options(SparkConfig(master="local-cluster[2,1,1024]"))
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")                 # started by spark-submit
    assert GC not in _driver_options()
