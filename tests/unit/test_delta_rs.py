"""delta-rs's storage options from a profile's S3A settings (``ttl.delta_rs``)."""

from __future__ import annotations

from ttl import delta_rs
from ttl.config import CONF_DIR, load


def test_the_local_servers_s3a_settings_become_delta_rs_options():
    options = delta_rs.storage_options({
        "fs.s3a.endpoint": "http://127.0.0.1:9000", "fs.s3a.endpoint.region": "us-east-1",
        "fs.s3a.path.style.access": "true", "fs.s3a.connection.ssl.enabled": "false"})
    assert options == {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true",
                       "AWS_REGION": "us-east-1"}


def test_a_bare_host_takes_its_scheme_from_the_tls_setting_and_keys_pass_through():
    assert delta_rs.storage_options({"fs.s3a.endpoint": "minio:9000",
                                     "fs.s3a.connection.ssl.enabled": "false"}) == {
        "AWS_ENDPOINT_URL": "http://minio:9000", "AWS_ALLOW_HTTP": "true"}
    # S3A's default virtual-hosted style is not passed on (delta-rs would take the endpoint
    # for the bucket's host); an AWS endpoint names the region requests are signed for.
    assert delta_rs.storage_options({"fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com",
                                     "fs.s3a.access.key": "AK", "fs.s3a.secret.key": "SK",
                                     "fs.s3a.path.style.access": "false"}) == {
        "AWS_ENDPOINT_URL": "https://s3.eu-west-1.amazonaws.com", "AWS_ACCESS_KEY_ID": "AK",
        "AWS_SECRET_ACCESS_KEY": "SK", "AWS_REGION": "eu-west-1"}
    assert delta_rs.storage_options({"fs.s3a.endpoint": "s3.eu-west-1.amazonaws.com",
                                     "fs.s3a.endpoint.region": "eu-west-2"})[
        "AWS_REGION"] == "eu-west-2"
    for host, region in (("s3-fips.us-east-1.amazonaws.com", "us-east-1"),
                         ("s3.dualstack.ap-south-1.amazonaws.com", "ap-south-1"),
                         ("s3.cn-north-1.amazonaws.com.cn", "cn-north-1"),
                         ("s3.amazonaws.com", None), ("minio.internal:9000", None)):
        assert delta_rs.storage_options({"fs.s3a.endpoint": host}).get("AWS_REGION") == region
    assert delta_rs.storage_options({}) == {}  # AWS itself: delta-rs's defaults, the env


def test_the_documented_s3_profile_gives_delta_rs_its_endpoint_and_only_s3_paths_take_it():
    conf = load(CONF_DIR / "s3-local.toml")
    options = delta_rs.profile_options(conf)
    assert options["AWS_ENDPOINT_URL"] == "http://127.0.0.1:9000"
    assert options["AWS_ALLOW_HTTP"] == "true"
    assert delta_rs.storage_options_for("s3a://ttl/sessions", options) == options
    assert delta_rs.storage_options_for("/data/ttl/sessions", options) is None
    assert delta_rs.storage_options_for("s3a://ttl/sessions", {}) is None
