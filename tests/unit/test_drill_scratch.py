"""Where a drill's scratch table lives (``drill.scratch``): on the store's file system,
because on a cluster the executors write it and the driver's /tmp is not theirs."""

from __future__ import annotations

import pytest

from ttl import config
from ttl.drill import scratch_path, scratch_root
from ttl.errors import ConfigError

MINIMAL = {
    "store": {"name": "s", "path": "data/s"},
    "kafka": {"input_topic": "in", "changelog_topic": "cl"},
    "stream": {"checkpoint": "data/ckpt"},
}


def _conf(store_path: str, scratch: str | None = None) -> config.Config:
    drill = {} if scratch is None else {"scratch": scratch}
    return config.from_dict({**MINIMAL, "store": {**MINIMAL["store"], "path": store_path},
                             "drill": drill})


def test_the_default_scratch_root_is_beside_the_store_on_its_file_system(tmp_path,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert scratch_root(_conf("data/s")) == str(tmp_path / "data" / "s_drill_scratch")
    assert scratch_root(_conf("s3a://bucket/ttl/s/")) == "s3a://bucket/ttl/s_drill_scratch"
    assert scratch_root(_conf("abfss://c@acct.dfs.core.windows.net/s")) == \
        "abfss://c@acct.dfs.core.windows.net/s_drill_scratch"


def test_a_configured_scratch_root_resolves_like_the_store_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    relative = _conf("s3a://bucket/ttl/s", "scratch/drills")
    assert scratch_root(relative) == str(tmp_path / "scratch" / "drills")
    assert scratch_root(_conf("data/s", "/mnt/shared/drills")) == "/mnt/shared/drills"
    assert scratch_root(_conf("data/s", "s3a://other/drills")) == "s3a://other/drills"


def test_a_blank_scratch_root_is_refused_at_load_naming_the_setting():
    with pytest.raises(ConfigError, match=r"drill\.scratch"):
        _conf("data/s", "  ")


def test_each_drill_gets_a_fresh_directory_directly_under_the_root():
    first = scratch_path("s3a://bucket/ttl/s_drill_scratch/", "s", 1_700_000_000_000)
    second = scratch_path("s3a://bucket/ttl/s_drill_scratch", "s", 1_700_000_000_000)
    for path in (first, second):
        parent, _, name = path.rpartition("/")
        assert parent == "s3a://bucket/ttl/s_drill_scratch"
        assert name.startswith("s-1700000000000-")
    assert first != second                    # same store, same millisecond: still two
