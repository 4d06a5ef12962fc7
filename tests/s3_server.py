"""A real S3-compatible server on loopback for the store tests: ``moto`` in server mode.

Started once per test session in its own process, on a free port; every test gets a fresh
prefix in one bucket. The endpoint travels in the URI's query (the way a user points a run at
MinIO or Ceph); credentials come from the standard AWS environment variables, as they would on
a cluster.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

BUCKET = "arenaforge-test"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
               "AWS_DEFAULT_REGION": "us-east-1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen, log, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"moto server exited with {proc.returncode}: "
                               f"{log.read().decode()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"moto server did not listen on port {port} within {timeout} s")


class S3Server:
    def __init__(self, port: int):
        self.port = port
        self.endpoint = f"127.0.0.1:{port}"
        self.query = f"endpoint_override={self.endpoint}&scheme=http&region=us-east-1"

    def uri(self, *parts: str) -> str:
        """A fresh location in the bucket: ``s3://bucket/<uuid>/<parts>?<endpoint>``."""
        path = "/".join([BUCKET, uuid.uuid4().hex[:12], *parts])
        return f"s3://{path}?{self.query}"

    def env(self) -> dict[str, str]:
        """The environment of a subprocess that reaches the server without URI options."""
        return {**os.environ, **CREDENTIALS, "AWS_ENDPOINT_URL": f"http://{self.endpoint}"}


@pytest.fixture(scope="session")
def s3_server():
    pytest.importorskip("moto.server", reason="moto[server] is in the dev extra")
    port = _free_port()
    # its request log goes to a file: a pipe nobody reads fills up and stalls the server
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed when the server stops
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                             "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        _wait_listening(port, proc, log)
        server = S3Server(port)
        import pyarrow.fs as pafs

        fs, _ = pafs.FileSystem.from_uri(f"s3://{BUCKET}?{server.query}"
                                         "&allow_bucket_creation=true")
        fs.create_dir(BUCKET)
        yield server
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
