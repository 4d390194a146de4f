"""Configuration: bad settings fail at load time, naming the file and the setting."""

from __future__ import annotations

import pytest

from ttl import config
from ttl.config import CONF_DIR, parse_duration_ms
from ttl.errors import ConfigError
from ttl.kafka import KafkaClients

MINIMAL = {
    "store": {"name": "s", "path": "data/s"},
    "kafka": {"input_topic": "in", "changelog_topic": "cl"},
    "stream": {"checkpoint": "data/ckpt"},
}


def test_local_profile_loads():
    conf = config.load(CONF_DIR / "local.toml")
    assert conf.kafka.bootstrap_servers == "embedded"
    assert conf.store.ttl is not None and conf.store.ttl > 0


@pytest.mark.parametrize(
    ("raw", "ms"), [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("2h", 7_200_000),
                    ("7d", 604_800_000), (1500, 1500)],
)
def test_durations_parse_to_milliseconds(raw, ms):
    assert parse_duration_ms(raw) == ms


def test_unknown_key_is_named():
    raw = {**MINIMAL, "store": {**MINIMAL["store"], "tll": "1h"}}
    with pytest.raises(ConfigError, match=r"store\.tll"):
        config.from_dict(raw, source="x.toml")


def test_wrong_type_is_named_with_file():
    raw = {**MINIMAL, "store": {**MINIMAL["store"], "ttl": "soon"}}
    with pytest.raises(ConfigError, match=r"x\.toml.*store\.ttl"):
        config.from_dict(raw, source="x.toml")


def test_bad_enum_is_named():
    raw = {**MINIMAL, "eviction": {"clock": "sundial"}}
    with pytest.raises(ConfigError, match=r"eviction\.clock"):
        config.from_dict(raw)
    raw = {**MINIMAL, "maintenance": {"cluster_by": "key"}}
    with pytest.raises(ConfigError, match=r"maintenance\.cluster_by"):
        config.from_dict(raw)
    layout = config.from_dict({**MINIMAL, "maintenance": {"cluster_by": "key_hash"}})
    assert layout.maintenance.cluster_by == "key_hash"
    assert layout.maintenance.optimize_file_bytes == 128 * 2**20


def test_missing_section_is_named():
    raw = {k: v for k, v in MINIMAL.items() if k != "kafka"}
    with pytest.raises(ConfigError, match=r"kafka"):
        config.from_dict(raw)


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        config.load(tmp_path / "nope.toml")


def test_invalid_toml_names_the_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[store\nname=1")
    with pytest.raises(ConfigError, match="bad.toml"):
        config.load(bad)


def test_size_limits_that_a_changelog_record_cannot_carry_are_refused_naming_them():
    """Reliability 7: a value within store.max_value_bytes must fit a changelog record."""
    assert config.from_dict(MINIMAL).store.max_record_bytes == 1_000_000  # defaults fit
    raw = {**MINIMAL, "store": {**MINIMAL["store"], "max_value_bytes": 1_048_576}}
    with pytest.raises(ConfigError, match=r"store\.max_value_bytes \(1048576\) \+ "
                       r"store\.max_headers_bytes \(65536\).*store\.max_record_bytes "
                       r"\(1000000\)"):
        config.from_dict(raw)
    raised = {**raw, "store": {**raw["store"], "max_record_bytes": 2_000_000}}
    assert config.from_dict(raised).store.max_value_bytes == 1_048_576


def test_a_changelog_topic_that_cannot_carry_the_largest_record_is_named():
    from ttl.changelog.topic import TopicState, max_message_needed, size_violations

    need = max_message_needed(1_000_000)
    assert need <= 1_048_588  # Kafka's default max.message.bytes carries the default limit
    fits = TopicState("cl", 2, {"max.message.bytes": str(need)})
    assert size_violations(fits, 1_000_000) == []
    small = TopicState("cl", 2, {"max.message.bytes": "500000"})
    (problem,) = size_violations(small, 1_000_000)
    assert "topic cl: max.message.bytes is 500000" in problem
    assert "store.max_record_bytes (1000000)" in problem


def test_vacuum_refuses_a_retention_shorter_than_publisher_lag_plus_drill_window():
    from ttl.eviction import vacuum

    with pytest.raises(ConfigError, match=r"maintenance\.vacuum_retention"):
        vacuum(None, retention_ms=3_600_000, minimum_ms=2 * 3_600_000, published=0)


SASL = {**MINIMAL, "kafka": {**MINIMAL["kafka"], "bootstrap_servers": "b1:9096",
                             "security_protocol_env": "T_PROTO", "sasl_mechanism": "PLAIN",
                             "sasl_username_env": "T_USER", "sasl_password_env": "T_PASS",
                             "ssl_ca_location_env": "T_CA"}}


def test_kafka_security_comes_from_the_environment_for_both_clients(monkeypatch):
    monkeypatch.setenv("T_PROTO", "SASL_SSL")
    monkeypatch.setenv("T_USER", "alice")
    monkeypatch.setenv("T_PASS", 'p"w\\d')
    monkeypatch.setenv("T_CA", "/etc/ca.pem")
    kafka = KafkaClients(config.from_dict(SASL).kafka)
    assert kafka.client_config() == {
        "bootstrap.servers": "b1:9096", "security.protocol": "SASL_SSL",
        "sasl.username": "alice", "sasl.password": 'p"w\\d',
        "ssl.ca.location": "/etc/ca.pem", "sasl.mechanism": "PLAIN"}
    options = kafka.spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.mechanism"] == "PLAIN"
    assert options["kafka.ssl.truststore.location"] == "/etc/ca.pem"
    assert options["kafka.sasl.jaas.config"] == (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="alice" password="p\\"w\\\\d";')


def test_a_missing_secret_variable_is_named(monkeypatch):
    for var in ("T_PROTO", "T_USER", "T_PASS", "T_CA"):
        monkeypatch.setenv(var, "x")
    monkeypatch.delenv("T_PASS")
    with pytest.raises(ConfigError, match=r"kafka\.sasl_password_env.*\$T_PASS"):
        KafkaClients(config.from_dict(SASL).kafka).client_config()


def test_plaintext_kafka_has_no_security_options():
    options = KafkaClients(config.from_dict(MINIMAL).kafka, "h:1").spark_options()
    assert options == {"kafka.bootstrap.servers": "h:1"}


@pytest.mark.parametrize(("section", "setting", "raw"), [
    ("store", "ttl", "200000000000000d"),                # the issue's: every batch overflowed
    ("store", "max_future", 2**63),                      # integer ms past int64
    ("eviction", "interval", f"{2**47 // 86_400_000 + 1}d"),
    ("maintenance", "vacuum_retention", "9223372036854775807ms"),
    ("changelog", "delete_retention", 2**47 + 1),
])
def test_a_duration_longer_than_the_longest_is_refused_at_load_naming_the_setting(
        section, setting, raw):
    """Issue 31, scenario 8: a duration past int64 (or one that overflows once added to a
    clock) was accepted and failed every batch with an OverflowError."""
    base = MINIMAL.get(section, {})
    raw_conf = {**MINIMAL, section: {**base, setting: raw}}
    with pytest.raises(ConfigError, match=rf"x\.toml: invalid setting {section}\.{setting}: "
                       r".*longer than the longest duration, \d+ ms"):
        config.from_dict(raw_conf, source="x.toml")


def test_the_longest_duration_itself_is_taken():
    assert parse_duration_ms(config.MAX_DURATION_MS) == 2**47
    with pytest.raises(ValueError, match="longer than the longest duration"):
        parse_duration_ms(f"{2**47 + 1}ms")
    # A TTL takes the whole int64 range: expiries saturate (as a record's ttl.ttl does).
    conf = config.from_dict({**MINIMAL, "store": {**MINIMAL["store"], "ttl": 2**63 - 1}})
    assert conf.store.ttl == 2**63 - 1


def test_one_rule_says_whether_two_spellings_name_one_location(tmp_path, monkeypatch):
    from ttl.config import absolute_location, same_location

    monkeypatch.chdir(tmp_path)
    assert absolute_location("file:/data/x") == "file:/data/x"  # a URI, not a relative path
    assert absolute_location("data/x") == str(tmp_path / "data" / "x")
    assert same_location("file:/data/x", "/data//x/")
    assert same_location("file:///data/x", "/data/x")
    assert same_location("data/x", str(tmp_path / "data/x"))
    assert same_location("s3a://b/t/", "s3a://b//t")
    assert not same_location("s3a://b/t", "s3a://b/u") and not same_location("/a", "/a/b")


def test_the_log_retention_outlives_publication_and_drills():
    def maintenance(**given):
        return config.from_dict({**MINIMAL, "maintenance": given}).maintenance

    assert maintenance().log_retention_ms == 2 * 86_400_000
    # unset, it follows a longer drill window instead of refusing the profile
    assert maintenance(drill_window="3d").log_retention_ms == 3 * 86_400_000 + 3_600_000
    assert maintenance(log_retention="26h").log_retention_ms == 26 * 3_600_000
    with pytest.raises(ConfigError, match=r"maintenance\.log_retention"):
        maintenance(log_retention="2h")
    # no clean-up: nothing to check
    assert maintenance(log_retention="2h", log_cleanup_interval=None).log_retention_ms == 7_200_000


@pytest.mark.parametrize(("name", "value"), [("spark.ttl.fold.key_filter.fpp", "0"),
                                             ("spark.ttl.fold.key_filter.fpp", "1.5"),
                                             ("spark.ttl.fold.key_filter.fpp", "often"),
                                             ("spark.ttl.fold.key_filter.enabled", "yes")])
def test_ttls_own_spark_settings_are_checked_at_load(name, value):
    """The executors' fold reads these at its first batch, which may come hours after
    the start: a wrong value fails the profile's load instead, by its name."""
    raw = {**MINIMAL, "spark": {"settings": {name: value}}}
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")):
        config.from_dict(raw)
    fine = {"spark.ttl.fold.key_filter.fpp": "1", "spark.ttl.fold.key_filter.enabled": "False"}
    assert config.from_dict({**MINIMAL, "spark": {"settings": fine}}).spark.settings == fine
