"""delta-rs's access to a store's tables: the location and credentials Spark has.

Spark reaches ``s3a://`` through Hadoop's S3A settings (a profile's
``spark.hadoop.fs.s3a.*``: endpoint, region, path-style access, TLS, keys); delta-rs (the
``object_store`` crate) takes storage options of its own. This maps the one onto the other,
so one profile points both at the same store: what runs without Spark (``ttl status``,
``get``, ``scan``, ``dead-letters`` and its replay's record of what it replayed,
``report``, the metrics) from the profile's settings, a batch's lookup from its Spark
session's. Credentials a profile leaves to the
environment (``EnvironmentVariableCredentialsProvider``: ``AWS_ACCESS_KEY_ID``...) are read
there by both; on AWS, delta-rs also finds an instance's or a pod's role as the SDK does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from ttl.config import Config, declared_settings
from ttl.names import S3_SCHEMES, local_path

__all__ = ["history", "is_table", "profile_options", "read_object", "session_options",
           "storage_options", "storage_options_for", "table", "table_if_exists"]

#: Hadoop S3A settings delta-rs takes as they are, under its own names.
_SAME_VALUE = {
    "fs.s3a.endpoint.region": "AWS_REGION",
    "fs.s3a.access.key": "AWS_ACCESS_KEY_ID",
    "fs.s3a.secret.key": "AWS_SECRET_ACCESS_KEY",
    "fs.s3a.session.token": "AWS_SESSION_TOKEN",
}
#: Every S3A setting ``storage_options`` reads.
S3A_KEYS = ("fs.s3a.endpoint", "fs.s3a.connection.ssl.enabled", *_SAME_VALUE)
#: The region an AWS S3 endpoint names (``s3.eu-west-1.amazonaws.com``, ``s3-eu-west-1...``,
#: ``s3.dualstack.eu-west-1...``, ``s3-fips.us-east-1...``).
_AWS_REGION = re.compile(
    r"^s3(?:-fips)?[.-](?:dualstack\.|fips\.)?([a-z]{2}(?:-[a-z]+)+-\d)\.amazonaws\.com")


def storage_options(hadoop: Mapping[str, str]) -> dict[str, str]:
    """delta-rs storage options from Hadoop S3A settings (keys as Hadoop names them,
    ``fs.s3a.*``; absent ones are left to delta-rs's defaults and the environment).

    With an endpoint, delta-rs addresses buckets by path (``endpoint/bucket/key``: its
    virtual-hosted mode would take the endpoint for the bucket's own host), whatever S3A's
    ``path.style.access`` says: S3 and S3-compatible servers answer both. The region is
    S3A's, else the one an AWS endpoint names (``s3.<region>.amazonaws.com``): requests
    are signed for it."""
    out: dict[str, str] = {}
    ssl = str(hadoop.get("fs.s3a.connection.ssl.enabled", "true")).strip().lower() != "false"
    endpoint = hadoop.get("fs.s3a.endpoint")
    if endpoint:
        if "://" not in endpoint:  # S3A takes a bare host; TLS then follows the setting
            endpoint = f"{'https' if ssl else 'http'}://{endpoint}"
        out["AWS_ENDPOINT_URL"] = endpoint
        if endpoint.startswith("http://"):
            out["AWS_ALLOW_HTTP"] = "true"
        named = _AWS_REGION.search(urlparse(endpoint).hostname or "")
        if named and not hadoop.get("fs.s3a.endpoint.region"):
            out["AWS_REGION"] = named.group(1)
    for key, name in _SAME_VALUE.items():
        if hadoop.get(key):
            out[name] = str(hadoop[key])
    return out


def profile_options(conf: Config) -> dict[str, str]:
    """``storage_options`` from the Spark settings a profile declares
    (``spark.hadoop.fs.s3a.*``, ``conf/spark-defaults.conf`` included)."""
    prefix = "spark.hadoop."
    return storage_options({k.removeprefix(prefix): v
                            for k, v in declared_settings(conf.spark).items()
                            if k.startswith(prefix)})


def session_options(spark) -> dict[str, str]:
    """``storage_options`` from a Spark session's Hadoop configuration (what its own
    reads of the table use)."""
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    found = {key: hadoop.get(key) for key in S3A_KEYS}
    return storage_options({k: v for k, v in found.items() if v is not None})


def table(path: str, options: Mapping[str, str] | None = None, version: int | None = None):
    """The table at ``path`` (at ``version``, else the newest), read by delta-rs."""
    from deltalake import DeltaTable

    return DeltaTable(path, version=version, storage_options=storage_options_for(path, options))


def history(table, path: str, limit: int) -> list[dict]:
    """The commit information of the newest ``limit`` versions of ``table`` (delta-rs's, at
    ``path``), newest first, as delta-rs's ``history(limit)`` gives it (``version`` added;
    a commit without one: its version only); fewer when the log no longer has older ones.

    On a local disk, read by the commits' names from the table's version down: delta-rs's
    ``history`` lists the log first, which there reads every file name of ``_delta_log``
    (0.19 s with 100,000 commits), a second listing after the table's open. Elsewhere
    delta-rs's ``history``: on S3 its listing starts from a key, and it reads the commits
    concurrently, where one request each here would add up."""
    local = local_path(path)
    if local is None:
        return table.history(limit)
    out = []
    for version in range(table.version(), max(-1, table.version() - limit), -1):
        try:
            raw = (Path(local) / "_delta_log" / f"{version:020d}.json").read_bytes()
        except FileNotFoundError:
            if not out:  # not even the newest: the path is not where delta-rs read it
                return table.history(limit)
            break  # removed by the log's clean-up: the older ones are gone too
        info = next((action["commitInfo"] for action in map(json.loads, raw.splitlines())
                     if action and "commitInfo" in action), {})
        out.append({**info, "version": version})
    return out


def is_table(path: str, options: Mapping[str, str] | None = None) -> bool:
    from deltalake import DeltaTable

    return DeltaTable.is_deltatable(path, storage_options=storage_options_for(path, options))


def table_if_exists(path: str, options: Mapping[str, str] | None = None):
    """The table at ``path`` if there is one there, else ``None`` (a side table not made
    yet: the dead letters' replays, the drills, the lease)."""
    return table(path, options) if is_table(path, options) else None


def storage_options_for(path: str, options: Mapping[str, str] | None) -> dict[str, str] | None:
    """The options for a path on S3 (others take none: S3 options on a local path are an
    error in delta-rs)."""
    return dict(options) if options and urlparse(path).scheme in S3_SCHEMES else None


def read_object(path: str, options: Mapping[str, str] | None) -> bytes:
    """One object on S3 (``s3a://bucket/key``), read with the storage options delta-rs
    gets (``storage_options``: endpoint, region, plain HTTP, keys; what they leave out from
    the environment, as delta-rs does), through Arrow's S3 client: a file of a table's log
    that delta-rs reads but does not hand out, such as a version's checksum. A missing
    object raises ``FileNotFoundError``."""
    parsed = urlparse(path)
    if parsed.scheme not in S3_SCHEMES:
        raise ValueError(f"{path}: not an S3 path")
    with s3_filesystem(options).open_input_stream(f"{parsed.netloc}{parsed.path}") as stream:
        return stream.read()


def s3_filesystem(options: Mapping[str, str] | None):
    """Arrow's S3 client with the storage options delta-rs gets (``storage_options``:
    endpoint, region, plain HTTP, keys; what they leave out from the environment, as
    delta-rs does); its paths are ``bucket/key``."""
    from pyarrow import fs

    options = dict(options or {})
    settings: dict[str, object] = {}
    endpoint = options.get("AWS_ENDPOINT_URL")
    if endpoint:  # and a region, as delta-rs assumes: else the SDK asks EC2's metadata
        where = urlparse(endpoint)
        settings.update(endpoint_override=where.netloc, scheme=where.scheme or "https",
                        region="us-east-1")
    for name, arg in (("AWS_ACCESS_KEY_ID", "access_key"), ("AWS_SECRET_ACCESS_KEY",
                      "secret_key"), ("AWS_SESSION_TOKEN", "session_token"),
                      ("AWS_REGION", "region")):
        if options.get(name):
            settings[arg] = options[name]
    return fs.S3FileSystem(**settings)
