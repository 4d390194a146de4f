"""deploy/k8s, deploy/systemd and deploy/cron agree with the code and the cluster profile.

Pure file checks (no Spark session): the manifests carry exactly the Spark settings
``deploy/submit`` produces for conf/cluster.example.toml, and every command line names an
existing ``ttl`` command with options that parse.
"""

from __future__ import annotations

import configparser
import importlib.util
import re
import shlex
from datetime import datetime, timedelta, timezone
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from apscheduler.triggers.cron import CronTrigger
from click.testing import CliRunner

from ttl.cli import main as cli
from ttl.config import SPARK_DEFAULTS, load, read_spark_defaults
from ttl.spark import LOG4J2
from ttl.submit import packages, spark_settings

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
PROFILE = ROOT / "conf" / "cluster.example.toml"
IMAGE_LOG4J2 = "/opt/ttl/conf/log4j2.properties"  # the Dockerfile's copy of conf/log4j2...
CONF = load(PROFILE)


def _manifests() -> dict[str, list[dict]]:
    files = sorted(K8S.rglob("*.yaml"))
    assert len(files) >= 6, files
    return {f.name: [d for d in yaml.safe_load_all(f.read_text()) if d is not None]
            for f in files}


def _kind(kind: str) -> list[dict]:
    return [d for docs in _manifests().values() for d in docs if d["kind"] == kind]


def _apps() -> dict[str, dict]:
    """Job name (``stream``, ``evict``, ``drill``) -> SparkApplication spec (or template)."""
    specs = [d["spec"] for d in _kind("SparkApplication")]
    specs += [d["spec"]["template"] for d in _kind("ScheduledSparkApplication")]
    return {Path(s["mainApplicationFile"]).stem: s for s in specs}


def _scheduled(job: str) -> dict:
    [doc] = [d for d in _kind("ScheduledSparkApplication")
             if d["spec"]["template"]["mainApplicationFile"].endswith(f"/jobs/{job}.py")]
    return doc


def _fires_per_day(cron: str) -> int:
    trigger = CronTrigger.from_crontab(cron, timezone="UTC")
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    fires, t = 0, trigger.get_next_fire_time(None, start)
    while t < start + timedelta(days=1):
        fires, t = fires + 1, trigger.get_next_fire_time(t, t + timedelta(seconds=1))
    return fires


def _check_cli(command: str, args: list[str]) -> None:
    """``ttl <command> --help`` works and ``args`` parse for that command (not run)."""
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, (command, result.output)
    for option in (a for a in args if a.startswith("--")):
        assert option in result.output, (command, option)
    cli.commands[command].make_context(command, list(args))  # raises on a bad option/value


def expected_spark_conf() -> dict[str, str]:
    settings = {**read_spark_defaults(SPARK_DEFAULTS), **spark_settings(CONF, local_python=False)}
    return {k: v.replace(f"file:{LOG4J2}", f"file:{IMAGE_LOG4J2}") for k, v in settings.items()}


# --- Kubernetes ----------------------------------------------------------------------------


def test_every_document_parses_and_has_kind_and_name():
    for name, docs in _manifests().items():
        assert docs, name
        for doc in docs:
            assert doc["apiVersion"] and doc["kind"], name
            if doc["kind"] != "Kustomization":
                assert doc["metadata"]["name"], name


def test_checked_in_manifests_match_the_generator():
    spec = importlib.util.spec_from_file_location("k8s_render", K8S / "render.py")
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    rendered = render.render(PROFILE)
    for name, text in rendered.items():
        assert (K8S / name).read_text() == text, f"{name} is stale: run deploy/k8s/render.py"
    assert set(rendered) == {f.name for f in K8S.glob("*.yaml")}


def test_one_stream_application_and_two_schedules():
    assert [Path(d["spec"]["mainApplicationFile"]).name for d in _kind("SparkApplication")] == [
        "stream.py"]
    assert sorted(_apps()) == ["drill", "evict", "stream"]


@pytest.mark.parametrize("job", ["stream", "evict", "drill"])
def test_application_required_fields(job):
    spec = _apps()[job]
    assert spec["type"] == "Python" and spec["pythonVersion"] == "3"
    assert spec["mode"] == "cluster"
    assert spec["sparkVersion"] == version("pyspark")
    assert spec["image"]
    assert spec["mainApplicationFile"] == f"local:///opt/ttl/jobs/{job}.py"
    assert (ROOT / "jobs" / f"{job}.py").is_file()
    assert isinstance(spec["driver"], dict) and isinstance(spec["executor"], dict)
    assert spec["restartPolicy"]["type"] in ("Never", "OnFailure", "Always")


@pytest.mark.parametrize("job", ["stream", "evict", "drill"])
def test_arguments_parse_for_the_command_the_job_runs(job):
    spec = _apps()[job]
    command = re.search(r'sys\.argv = \[sys\.argv\[0\], "([\w-]+)"',
                        (ROOT / "jobs" / f"{job}.py").read_text()).group(1)
    assert spec["arguments"][:2] == ["--conf", "/etc/ttl/cluster.toml"]
    _check_cli(command, spec["arguments"])


@pytest.mark.parametrize("job", ["stream", "evict", "drill"])
def test_spark_conf_is_what_deploy_submit_sets(job):
    spark_conf = _apps()[job]["sparkConf"]
    assert all(isinstance(v, str) for v in spark_conf.values())  # map[string]string
    assert spark_conf == expected_spark_conf()
    assert _apps()[job]["deps"]["packages"] == packages(CONF, all_packages=True)


def test_no_manifest_names_a_path_of_this_checkout():
    for f in K8S.glob("*.yaml"):
        assert str(ROOT) not in f.read_text(), f


@pytest.mark.parametrize("job", ["stream", "evict", "drill"])
def test_pod_resources_agree_with_spark_conf(job):
    spec = _apps()[job]
    sc, driver, executor = spec["sparkConf"], spec["driver"], spec["executor"]
    assert driver["cores"] == int(sc.get("spark.driver.cores", "1"))
    assert driver["memory"] == sc["spark.driver.memory"]
    assert executor["instances"] == int(sc["spark.executor.instances"])
    assert executor["cores"] == int(sc["spark.executor.cores"])
    assert executor["memory"] == sc["spark.executor.memory"]


def test_stream_restarts_after_failures():
    policy = _apps()["stream"]["restartPolicy"]
    assert policy["type"] in ("Always", "OnFailure")
    if policy["type"] == "OnFailure":
        assert policy["onFailureRetries"] > 0
    assert policy["onFailureRetryInterval"] > 0


def test_the_stream_driver_is_scraped_and_probed_on_the_profiles_metrics_port():
    from ttl.config import load

    port = load(PROFILE).metrics.port
    driver = _apps()["stream"]["driver"]
    assert port is not None
    assert driver["annotations"]["prometheus.io/port"] == str(port)
    assert driver["ports"] == [{"name": "metrics", "protocol": "TCP", "containerPort": port}]
    (container,) = driver["template"]["spec"]["containers"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": port}
    assert "ports" not in _apps()["evict"]["driver"]  # batch jobs serve nothing


@pytest.mark.parametrize("job", ["evict", "drill"])
def test_schedules_are_valid_cron_and_never_overlap(job):
    spec = _scheduled(job)["spec"]
    CronTrigger.from_crontab(spec["schedule"])  # raises on a bad expression
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["template"]["mainApplicationFile"]


def test_evict_schedule_is_the_profiles_and_drills_are_daily():
    assert _scheduled("evict")["spec"]["schedule"] == CONF.eviction.cron
    assert _scheduled("evict")["spec"]["template"]["arguments"][2:] == ["--clock", "wall"]
    assert _fires_per_day(_scheduled("drill")["spec"]["schedule"]) == 1


def test_configmap_is_the_profile_byte_for_byte_and_loads(tmp_path):
    [configmap] = _kind("ConfigMap")
    text = configmap["data"]["cluster.toml"]
    assert text.encode() == PROFILE.read_bytes()
    copy = tmp_path / "cluster.toml"
    copy.write_text(text)
    assert load(copy).model_dump(exclude={"source"}) == CONF.model_dump(exclude={"source"})


@pytest.mark.parametrize("job", ["stream", "evict", "drill"])
def test_profile_is_mounted_where_the_arguments_point(job):
    spec = _apps()[job]
    [configmap] = _kind("ConfigMap")
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in spec["driver"]["volumeMounts"]}
    conf_path = Path(spec["arguments"][1])
    volume = volumes[mounts[str(conf_path.parent)]]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    assert conf_path.name in configmap["data"]


def test_secrets_hold_no_values():
    secrets = _kind("Secret")
    assert secrets
    for secret in secrets:
        for field in ("data", "stringData"):
            for key, value in (secret.get(field) or {}).items():
                assert value in ("", None), f"{secret['metadata']['name']}: {key} has a value"


@pytest.mark.parametrize("job", ["stream", "evict", "drill"])
@pytest.mark.parametrize("role", ["driver", "executor"])
def test_kafka_secrets_reach_driver_and_executors(job, role):
    spec = _apps()[job]
    [secret] = _kind("Secret")
    name, keys = secret["metadata"]["name"], set(secret["stringData"])
    env = {e["name"]: e for e in spec[role]["env"]}
    k = CONF.kafka
    for var in (k.security_protocol_env, k.sasl_username_env, k.sasl_password_env):
        assert env[var]["valueFrom"]["secretKeyRef"] == {"name": name, "key": var}
        assert var in keys
    ca_path = Path(env[k.ssl_ca_location_env]["value"])  # a path to the mounted CA file
    mounts = {m["mountPath"]: m["name"] for m in spec[role]["volumeMounts"]}
    volume = {v["name"]: v for v in spec["volumes"]}[mounts[str(ca_path.parent)]]
    assert volume["secret"]["secretName"] == name
    assert {"key": "ca.pem", "path": ca_path.name} in volume["secret"]["items"]
    assert "ca.pem" in keys


def test_kustomization_lists_everything_but_the_secret():
    [kustomization] = _kind("Kustomization")
    listed = set(kustomization["resources"])
    assert all((K8S / r).is_file() for r in listed)
    others = {f.name for f in K8S.glob("*.yaml")} - {"kustomization.yaml", "secret.yaml"}
    assert listed == others


def test_dockerfile_provides_what_the_manifests_name():
    text = (K8S / "Dockerfile").read_text()
    base = re.search(r"^ARG SPARK_IMAGE=apache/spark:(\S+)", text, re.M).group(1)
    assert base.startswith(version("pyspark") + "-") and "python3" in base
    assert re.search(r"^COPY jobs /opt/ttl/jobs$", text, re.M)
    assert re.search(rf"^COPY conf/log4j2.properties {IMAGE_LOG4J2}$", text, re.M)


# --- systemd and cron ----------------------------------------------------------------------


def test_systemd_unit_runs_ttl_schedule():
    unit = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string((ROOT / "deploy" / "systemd" / "ttl-schedule.service").read_text())
    service = unit["Service"]
    assert service["Restart"] == "on-failure"
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > 0
    assert service["EnvironmentFile"] == "/etc/ttl/secrets.env"
    assert service["User"] not in ("", "root") and service["WorkingDirectory"].startswith("/")
    argv = shlex.split(service["ExecStart"])
    assert Path(argv[0]).name == "ttl" and argv[1:3] == ["schedule", "--conf"]
    _check_cli("schedule", argv[2:])
    assert unit["Install"]["WantedBy"]


def _cron_entries() -> list[tuple[str, str, str]]:
    """(schedule, user, command) per job line of deploy/cron/ttl.cron."""
    entries = []
    for line in (ROOT / "deploy" / "cron" / "ttl.cron").read_text().splitlines():
        if not line.strip() or line.startswith("#") or re.match(r"^[A-Z_]+=", line):
            continue
        fields = line.split(None, 6)
        entries.append((" ".join(fields[:5]), fields[5], fields[6]))
    return entries


def test_cron_lines_name_existing_commands_and_never_overlap():
    commands = {}
    for schedule, user, command in _cron_entries():
        CronTrigger.from_crontab(schedule)
        assert user != "root"
        assert "flock -n " in command and re.search(r">> /\S+\.log 2>&1$", command)
        match = re.search(r"/bin/ttl ([\w-]+)([^']*)'", command)
        args = shlex.split(match.group(2))
        _check_cli(match.group(1), args)
        assert args[:2] == ["--conf", "/etc/ttl/cluster.toml"]
        commands[match.group(1)] = schedule
    assert commands["evict"] == CONF.eviction.cron
    assert _fires_per_day(commands["drill"]) == 1
