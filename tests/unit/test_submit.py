"""deploy/submit's command for both profiles: what it ships, and that no secret is in it."""

from __future__ import annotations

from pathlib import Path

from ttl import submit
from ttl.config import CONF_DIR

CLUSTER = CONF_DIR / "cluster.example.toml"
LOCAL = CONF_DIR / "local.toml"
SECRETS = {"TTL_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "TTL_KAFKA_USERNAME": "svc-user-7f3a",
           "TTL_KAFKA_PASSWORD": "hunter2-Secret-9c1e", "TTL_KAFKA_CA_PEM": "/etc/ca-1d2e.pem"}


def test_cluster_command_ships_packages_the_package_and_profile_and_never_a_secret(monkeypatch):
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    cmd = submit.command(CLUSTER, Path("jobs/stream.py"), [], packages_flag=True,
                         package=Path("ttl-0123.zip"))
    text = " ".join(cmd)
    for value in SECRETS.values():
        assert value not in text
    assert cmd[cmd.index("--master") + 1].startswith("spark://")
    packages = cmd[cmd.index("--packages") + 1].split(",")
    assert "org.apache.hadoop:hadoop-aws:3.4.2" in packages
    assert any(p.startswith("io.delta:delta-spark_") for p in packages)
    # only ttl's own jar (its log stores and writes by position), when ``ttl setup`` built it
    from ttl.jvm import log_store

    shipped = cmd[cmd.index("--jars") + 1].split(",") if "--jars" in cmd else []
    assert shipped == ([str(log_store.built())] if log_store.built() else []), shipped
    assert cmd[cmd.index("--py-files") + 1] == "ttl-0123.zip"
    assert "spark.delta.logStore.s3a.impl=io.delta.storage.S3DynamoDBLogStore" in cmd
    assert "spark.pyspark.python=python3" in cmd          # the profile wins over this venv
    assert cmd[-3:] == ["jobs/stream.py", "--conf", str(CLUSTER)]


def test_local_command_uses_the_jar_bundle_and_cluster_mode_passes_the_profile_by_name():
    cmd = submit.command(LOCAL, Path("jobs/drill.py"), ["--report", "r.json"])
    assert "--jars" in cmd and "--packages" not in cmd
    assert cmd[cmd.index("--master") + 1] == "local[*]"
    clustered = submit.command(CLUSTER, Path("jobs/drill.py"), [], packages_flag=True,
                               deploy_mode="cluster")
    assert clustered[-2:] == ["--conf", "cluster.example.toml"]
    assert clustered[clustered.index("--files") + 1] == str(CLUSTER)


def test_a_profile_naming_ttls_s3_log_store_ships_its_jar():
    """conf/s3-local.toml names ``ttl.delta.S3ConditionalLogStore``: the jar ``ttl setup``
    built goes with ``--jars``, also when the cluster resolves the rest by ``--packages``."""
    from ttl.jvm import log_store

    profile = Path(__file__).parents[2] / "conf" / "s3-local.toml"
    for flag in (False, True):
        cmd = submit.command(profile, Path("jobs/stream.py"), [], packages_flag=flag)
        shipped = cmd[cmd.index("--jars") + 1].split(",")
        assert str(log_store.built()) in shipped, shipped


def test_the_shipped_package_imports_from_its_zip_alone(tmp_path):
    """What ``--py-files`` and ``addPyFile`` ship: a zip Python imports ``ttl`` from (a
    wheel it would not), whose executors' side imports nothing beyond the standard library
    at its top (an executor has no pydantic, confluent-kafka or delta-rs)."""
    import subprocess
    import sys

    from ttl.spark import package_zip

    shipped = package_zip()
    assert shipped.suffix == ".zip" and package_zip() == shipped  # cached by its contents
    probe = subprocess.run(
        [sys.executable, "-S", "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
         "import ttl.store.executor_fold as f; print(f.__file__)", str(shipped)],
        capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().startswith(str(shipped)), probe.stdout


def test_the_executors_output_schema_is_the_one_spark_is_told():
    """``OUTPUT_DDL`` (what ``mapInArrow`` is told) and ``output_schema()`` (what a partition
    yields, built without Spark) are the same columns and types."""
    import pyarrow as pa

    from ttl.store.executor_fold import OUTPUT_DDL, output_schema

    names = [part.strip().split(" ", 1)[0] for part in
             OUTPUT_DDL.replace("STRUCT<key: STRING, value: BINARY>", "S").split(",")]
    assert names == output_schema().names
    arrow = {"STRING": pa.string(), "BINARY": pa.binary(), "BIGINT": pa.int64(),
             "INT": pa.int32()}
    for part, field in zip(OUTPUT_DDL.replace("STRUCT<key: STRING, value: BINARY>", "S")
                           .split(","), output_schema(), strict=True):
        kind = part.strip().split(" ", 1)[1]
        assert (field.type == pa.list_(pa.struct([("key", pa.string()),
                                                  ("value", pa.binary())]))
                if kind == "ARRAY<S>" else field.type == arrow[kind]), part


def test_a_profiles_own_jars_go_with_ttls_in_jars(tmp_path):
    """spark-submit takes ``--jars`` over ``--conf spark.jars=...``: a profile's own
    ``spark.jars`` are shipped in ``--jars``, beside ttl's jar, and not as a setting."""
    from ttl.jvm import log_store

    profile = tmp_path / "own.toml"
    profile.write_text(CLUSTER.read_text().replace(
        "[spark.settings]", '[spark.settings]\n"spark.jars" = "/opt/a.jar,/opt/b.jar"', 1))
    cmd = submit.command(profile, Path("jobs/stream.py"), [], packages_flag=True)
    shipped = cmd[cmd.index("--jars") + 1].split(",")
    assert shipped[:2] == ["/opt/a.jar", "/opt/b.jar"], shipped
    assert (str(log_store.built()) in shipped) == (log_store.built() is not None)
    assert not any(part.startswith("spark.jars=") for part in cmd), cmd
