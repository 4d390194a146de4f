"""A real S3-compatible server on 127.0.0.1, for tests and local runs: s3proxy.

s3proxy (a Java program, ``ttl setup --object-store`` resolves it with Maven like the other
jars) serves the S3 API over a local directory (its ``filesystem-nio2`` backend: one
directory per bucket, one file per object), with AWS signatures checked against one
access key, and conditional writes (``If-None-Match: *``) decided atomically. Chosen over
SeaweedFS, which implements more of S3 but builds from Go source in about five minutes
into a 233 MB binary with four servers to start; s3proxy starts in about a second from
jars resolved in about 20 s.

Clients find it the way they find AWS: ``environment()`` gives the standard ``AWS_*``
variables (delta-rs reads them as they are), ``spark_settings()`` the S3A settings (Spark's
``s3a://`` paths, with hadoop-aws from ``spark.packages``). Like the local broker, it never
outlives the Python process that started it.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ttl.errors import SetupError
from ttl.jvm import jars
from ttl.local.process import die_with_parent, free_port

log = logging.getLogger(__name__)

MAIN = "org.gaul.s3proxy.Main"
REGION = "us-east-1"


class LocalObjectStore:
    """``with LocalObjectStore() as s3: s3.create_bucket("b"); ... s3.endpoint ...``"""

    def __init__(self, data_dir: str | Path | None = None, *, port: int | None = None,
                 access_key: str = "ttl-local", secret_key: str = "ttl-local-secret",
                 check_signatures: bool = True) -> None:
        self.dir = Path(data_dir or tempfile.mkdtemp(prefix="ttl-s3-"))
        self.port = port or free_port()
        self.access_key = access_key
        self.secret_key = secret_key
        #: Off only for a test that alters requests on their way (a signed header would
        #: then fail the signature): any credentials are then accepted.
        self.check_signatures = check_signatures
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def buckets(self) -> Path:
        return self.dir / "buckets"

    @property
    def log_file(self) -> Path:
        return self.dir / "s3proxy.log"

    def environment(self) -> dict[str, str]:
        """The ``AWS_*`` variables that point AWS clients (delta-rs, the AWS SDK) here."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true",
                "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": REGION,
                "AWS_EC2_METADATA_DISABLED": "true"}

    def spark_settings(self) -> dict[str, str]:
        """S3A's settings for this server (credentials from the environment's ``AWS_*``)."""
        return {"spark.hadoop.fs.s3a.endpoint": self.endpoint,
                "spark.hadoop.fs.s3a.endpoint.region": REGION,
                "spark.hadoop.fs.s3a.path.style.access": "true",
                "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
                "spark.hadoop.fs.s3a.aws.credentials.provider":
                    "software.amazon.awssdk.auth.credentials."
                    "EnvironmentVariableCredentialsProvider"}

    def create_bucket(self, name: str) -> str:
        """A bucket (a directory of the server's backend); returns ``s3a://name``."""
        (self.buckets / name).mkdir(parents=True, exist_ok=True)
        return f"s3a://{name}"

    def _properties(self) -> str:
        return "\n".join([
            f"s3proxy.endpoint={self.endpoint}",
            "s3proxy.authorization=" + ("aws-v2-or-v4" if self.check_signatures else "none"),
            f"s3proxy.identity={self.access_key}",
            f"s3proxy.credential={self.secret_key}",
            "jclouds.provider=filesystem-nio2",
            f"jclouds.filesystem.basedir={self.buckets}",
            "jclouds.region=" + REGION,
        ]) + "\n"

    def start(self, timeout: float = 60.0) -> LocalObjectStore:
        java = shutil.which("java")
        if java is None:
            raise SetupError("no `java` on PATH: the local object store (s3proxy) runs on "
                             "the JVM")
        classpath = os.pathsep.join(str(p) for p in jars.jars("s3proxy"))
        self.buckets.mkdir(parents=True, exist_ok=True)
        config = self.dir / "s3proxy.properties"
        config.write_text(self._properties())
        started = time.monotonic()
        with open(self.log_file, "ab") as out:  # the child keeps its own copy
            self.process = subprocess.Popen(
                [java, "-Xmx256m", "-cp", classpath, MAIN, "--properties", str(config)],
                stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        self._wait_ready(started + timeout)
        log.info("local object store (s3proxy) at %s in %.1f s", self.endpoint,
                 time.monotonic() - started)
        return self

    def _wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise SetupError(f"the local object store exited "
                                 f"(code {self.process.returncode}); see {self.log_file}")
            try:
                urllib.request.urlopen(self.endpoint, timeout=2).close()
                return
            except urllib.error.HTTPError:  # 403 to an anonymous request: it is up
                return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise SetupError(f"the local object store did not answer on {self.endpoint} in "
                         f"time; see {self.log_file}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> LocalObjectStore:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
