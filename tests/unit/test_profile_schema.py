"""The profile's JSON Schema: current in conf/, accepting the shipped profiles, refusing
what the loader refuses."""

from __future__ import annotations

import json

import jsonschema
import pytest

from ttl import config
from ttl.config import CONF_DIR

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SCHEMA_FILE = CONF_DIR / "profile.schema.json"


def test_the_checked_in_schema_is_the_current_one():
    assert json.loads(SCHEMA_FILE.read_text()) == json.loads(json.dumps(config.json_schema())), \
        "run: .venv/bin/ttl config schema > conf/profile.schema.json"


@pytest.mark.parametrize("profile", ["local.toml", "cluster.example.toml"])
def test_the_shipped_profiles_validate_against_it(profile):
    with (CONF_DIR / profile).open("rb") as fh:
        raw = tomllib.load(fh)
    jsonschema.validate(raw, config.json_schema())
    config.load(CONF_DIR / profile)  # and load


def test_it_refuses_an_unknown_setting_and_a_bad_duration_as_the_loader_does():
    schema = config.json_schema()
    base = {"store": {"name": "s", "path": "/x", "ttl": "7d"},
            "kafka": {"input_topic": "i", "changelog_topic": "c"},
            "stream": {"checkpoint": "/cp"}}
    jsonschema.validate(base, schema)
    for bad in ({**base, "store": {**base["store"], "ttl": "soon"}},
                {**base, "store": {**base["store"], "tll": "7d"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        with pytest.raises(config.ConfigError):
            config.from_dict(bad)
