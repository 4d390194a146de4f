"""Where the metrics endpoint listens: ``metrics.address`` of the profile."""

from __future__ import annotations

import socket
import urllib.request

import pytest

from ttl import config
from ttl.config import CONF_DIR
from ttl.errors import ConfigError
from ttl.local.process import free_port
from ttl.metrics import Metrics

MINIMAL = {
    "store": {"name": "s", "path": "data/s"},
    "kafka": {"input_topic": "in", "changelog_topic": "cl"},
    "stream": {"checkpoint": "data/ckpt"},
}


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def serving(conf) -> tuple[Metrics, int]:
    metrics = Metrics(conf.store.name, conf)
    port = free_port()
    metrics.serve(port)  # as the stream calls it: the port only
    return metrics, port


def test_the_local_profile_serves_metrics_on_the_loopback_address_only():
    """Issue 31, scenario 8: the endpoint always bound 0.0.0.0, so a laptop's metrics were
    open to its network. 127.0.0.2 is the same machine by another (loopback) address: a
    socket bound to 127.0.0.1 only does not answer there."""
    conf = config.load(CONF_DIR / "local.toml")
    assert conf.metrics.address == "127.0.0.1"
    metrics, port = serving(conf)
    try:
        server, _ = metrics._server
        assert server.server_address[:2] == ("127.0.0.1", port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            assert b"ttl_batches_total" in resp.read()
        assert not reachable("127.0.0.2", port)
    finally:
        metrics.close()


def test_a_profile_without_an_address_serves_on_every_interface():
    conf = config.from_dict({**MINIMAL, "metrics": {"port": 9464}})
    assert conf.metrics.address == "0.0.0.0"
    metrics, port = serving(conf)
    try:
        assert metrics._server[0].server_address[:2] == ("0.0.0.0", port)
        assert reachable("127.0.0.2", port)
    finally:
        metrics.close()


@pytest.mark.parametrize("good", ["localhost", "metrics.internal", "10.1.2.3", "::1", "::"])
def test_a_host_name_or_ip_is_a_metrics_address(good):
    assert config.from_dict({**MINIMAL, "metrics": {"address": good}}).metrics.address == good


@pytest.mark.parametrize("bad", ["", "local host", "300.1.2.3", "10.1.2", "-x.example",
                                 "a" * 64, "http://0.0.0.0", 8080])
def test_a_bad_metrics_address_fails_at_load_naming_it(bad):
    with pytest.raises(ConfigError, match=r"x\.toml: invalid setting metrics\.address: "
                       r"(Value error, .* is neither an IP address nor a host name|"
                       r"Input should be a valid string)"):
        config.from_dict({**MINIMAL, "metrics": {"address": bad}}, source="x.toml")
