"""Real servers for the test suite: nginx, moto's S3 server, gcp-storage-emulator, Azurite, and a
deliberately faulty proxy.

They run on 127.0.0.1 at free ports and are always torn down. The fault proxy exists only for
faults a real server will not produce on demand (a connection cut after N bytes, a 503, a stall);
everything else is tested against nginx and moto themselves.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ACCESS_LOG_FORMAT = "'\"$request\" $status $body_bytes_sent \"$http_range\"'"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def send_cut_off(handler: Any, body: bytes, after_bytes: int) -> None:
    """Send the first ``after_bytes`` of ``body`` and drop the connection (a body cut short)."""
    handler.wfile.write(body[:after_bytes])
    handler.wfile.flush()
    handler.close_connection = True
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)


def wait_for_port(port: int, timeout_s: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listening on 127.0.0.1:{port} after {timeout_s} s")


@dataclass
class NginxServer:
    root: Path
    url: str
    norange_url: str
    noetag_url: str
    access_log: Path
    proc: subprocess.Popen
    command: list[str] = field(default_factory=list)

    def log_lines(self) -> list[str]:
        return self.access_log.read_text().splitlines() if self.access_log.exists() else []

    def wait_logged(self, fragment: str, timeout: float = 10.0) -> None:
        """nginx writes a request's log line after the client has the body, so a test that
        counts log lines after a request of its own waits for that request's line first."""
        deadline = time.monotonic() + timeout
        while not any(fragment in line for line in self.log_lines()):
            if time.monotonic() > deadline:
                raise AssertionError(f"nginx never logged a request for {fragment!r}")
            time.sleep(0.02)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stop(self) -> None:
        """A real outage: nginx exits (fast shutdown), so its port refuses connections."""
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)

    def start(self) -> None:
        """The same nginx again, on the same port, after :meth:`stop`."""
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for_port(self.port, proc=self.proc)


def _nginx_conf(work: Path, root: Path, port: int) -> str:
    user = "user root;\n" if os.geteuid() == 0 else ""
    temps = "\n".join(
        f"    {kind}_temp_path {work / kind};" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}daemon off;
worker_processes 1;
pid {work / 'nginx.pid'};
error_log {work / 'error.log'} warn;
events {{ worker_connections 512; }}
http {{
    log_format feedline {ACCESS_LOG_FORMAT};
    access_log {work / 'access.log'} feedline;
{temps}
    default_type application/octet-stream;
    sendfile on;
    tcp_nodelay on;
    keepalive_requests 100000;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location /norange/ {{ alias {root}/; max_ranges 0; }}
        location /noetag/ {{ alias {root}/; etag off; }}
    }}
}}
"""


@contextlib.contextmanager
def run_nginx(work: Path) -> Iterator[NginxServer]:
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise RuntimeError("nginx is not installed; `make test` installs it (apt-get install nginx-light)")
    root = work / "www"
    root.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for _attempt in range(5):
        port = free_port()
        conf = work / "nginx.conf"
        conf.write_text(_nginx_conf(work, root, port))
        command = [binary, "-c", str(conf), "-p", str(work), "-e", str(work / "error.log")]
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            wait_for_port(port, proc=proc)
        except RuntimeError as exc:
            last_error = exc
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()
            continue
        base = f"http://127.0.0.1:{port}"
        server = NginxServer(root, base, f"{base}/norange", f"{base}/noetag", work / "access.log", proc, command)
        try:
            yield server
        finally:
            proc = server.proc  # the one running now, after any stop() / start()
            if proc.poll() is None:
                proc.send_signal(signal.SIGQUIT)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return
    raise RuntimeError(f"nginx did not start: {last_error}")


@dataclass
class S3Server:
    endpoint_url: str
    bucket: str
    storage_options: dict[str, Any]
    env: dict[str, str]
    server: Any

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def run_moto(bucket: str = "feedline-test") -> Iterator[S3Server]:
    from moto.server import MotoRequestHandler, ThreadedMotoServer

    MotoRequestHandler.disable_nagle_algorithm = True  # TCP_NODELAY, as every test server
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    wait_for_port(port)
    endpoint = f"http://127.0.0.1:{port}"
    env = {**S3_ENV, "AWS_ENDPOINT_URL": endpoint, "FSSPEC_S3_ENDPOINT_URL": endpoint}
    saved = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    try:
        import boto3

        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        yield S3Server(endpoint, bucket, options, env, server)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class GcsServer:
    """gcp-storage-emulator (in memory) in its own process, with one bucket."""

    endpoint_url: str
    bucket: str
    storage_options: dict[str, Any]
    proc: subprocess.Popen

    def filesystem(self, endpoint_url: str | None = None) -> Any:
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(endpoint_url=endpoint_url or self.endpoint_url, token="anon",
                             project="feedline-test", skip_instance_cache=True)


@contextlib.contextmanager
def run_gcs_emulator(bucket: str = "feedline-test") -> Iterator[GcsServer]:
    import sys

    port = free_port()
    command = [sys.executable, "-m", "gcp_storage_emulator", "start", "--host", "127.0.0.1",
               "--port", str(port), "--in-memory", "--quiet", "--default-bucket", bucket]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout_s=60, proc=proc)
        endpoint = f"http://127.0.0.1:{port}"
        options = {"endpoint_url": endpoint, "token": "anon", "project": "feedline-test"}
        yield GcsServer(endpoint, bucket, options, proc)
    finally:
        _stop(proc)


#: Azurite's well-known development account (published in Azurite's README; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
#: Where `make servers` installs Azurite (npm, next to the repository's venv).
AZURITE_BIN = Path(__file__).resolve().parents[1] / ".azurite" / "node_modules" / ".bin" / "azurite-blob"


@dataclass
class AzureServer:
    """Azurite's blob service (in memory) in its own process, with one container."""

    endpoint_url: str
    container: str
    storage_options: dict[str, Any]
    proc: subprocess.Popen

    def connection_string(self, endpoint_url: str | None = None) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint_url or self.endpoint_url}/{AZURITE_ACCOUNT};"
        )

    def filesystem(self, endpoint_url: str | None = None) -> Any:
        from adlfs import AzureBlobFileSystem

        return AzureBlobFileSystem(connection_string=self.connection_string(endpoint_url),
                                   skip_instance_cache=True)


@contextlib.contextmanager
def run_azurite(container: str = "feedline-test") -> Iterator[AzureServer]:
    binary = shutil.which("azurite-blob") or str(AZURITE_BIN)
    if not Path(binary).exists():
        raise RuntimeError("azurite is not installed; `make servers` installs it (npm install azurite)")
    port = free_port()
    command = [binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
               "--disableTelemetry", "--silent", "--skipApiVersionCheck", "--loose"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout_s=60, proc=proc)
        server = AzureServer(f"http://127.0.0.1:{port}", container, {}, proc)
        server.storage_options = {"connection_string": server.connection_string()}
        server.filesystem().mkdir(container)
        yield server
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@dataclass
class Fault:
    kind: str
    count: int
    code: int = 503
    after_bytes: int = 0
    seconds: float = 0.0
    bytes_per_s: float = 0.0
    body: bytes | None = None
    retry_after: str | None = None


@dataclass
class FaultProxy:
    """A FAULT-INJECTING proxy (test-only) in front of a real upstream; see the module docstring."""

    url: str
    upstream_port: int
    server: ThreadingHTTPServer
    faults: list[Fault] = field(default_factory=list)
    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_fault(
        self,
        kind: str,
        *,
        count: int = 1,
        code: int = 503,
        after_bytes: int = 0,
        seconds: float = 0.0,
        bytes_per_s: float = 4.0,
        body: bytes | None = None,
        retry_after: str | None = None,
    ) -> None:
        """``trickle`` sends the real headers, then the body at ``bytes_per_s`` (a GET only);
        ``status`` answers ``code`` with ``body`` (e.g. S3's SlowDown XML), else a short text,
        and a ``Retry-After: retry_after`` header when one is given."""
        if kind not in ("status", "drop", "stall", "trickle"):
            raise ValueError(f"unknown fault kind {kind!r}")
        with self.lock:
            self.faults.append(Fault(kind, count, code, after_bytes, seconds, bytes_per_s, body, retry_after))

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()
            self.requests.clear()

    def take_fault(self) -> Fault | None:
        with self.lock:
            if not self.faults:
                return None
            fault = self.faults[0]
            fault.count -= 1
            if fault.count <= 0:
                self.faults.pop(0)
            return fault


def _proxy_handler(proxy_ref: list[FaultProxy]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # TCP_NODELAY: no delayed-ACK wait between header and body

        def log_message(self, *args: Any) -> None:
            return None

        def _forward(self, method: str) -> None:
            proxy = proxy_ref[0]
            with proxy.lock:
                proxy.requests.append((method, self.path, self.headers.get("Range")))
            fault = proxy.take_fault()
            if fault is not None and fault.kind == "stall":
                time.sleep(fault.seconds)
            if fault is not None and fault.kind == "status":
                body = fault.body if fault.body is not None else f"injected {fault.code}\n".encode()
                self.send_response(fault.code)
                self.send_header("Content-Length", str(len(body)))
                if fault.retry_after is not None:
                    self.send_header("Retry-After", fault.retry_after)
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(body)
                return
            conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn.request(method, self.path, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
            self.send_response(resp.status, resp.reason)
            for key, value in resp.getheaders():
                if key.lower() not in ("connection", "transfer-encoding", "keep-alive", "server", "date"):
                    self.send_header(key, value)
            self.end_headers()
            if method == "HEAD":
                return
            if fault is not None and fault.kind == "drop":
                send_cut_off(self, body, fault.after_bytes)
                return
            if fault is not None and fault.kind == "trickle":
                pause = 1.0 / fault.bytes_per_s
                with contextlib.suppress(OSError):
                    for i in range(len(body)):
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(pause)
                self.close_connection = True
                return
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self._forward("GET")

        def do_HEAD(self) -> None:  # noqa: N802
            self._forward("HEAD")

    return Handler


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        return None  # clients hanging up on injected faults is the point, not news


@contextlib.contextmanager
def run_fault_proxy(upstream_url: str) -> Iterator[FaultProxy]:
    upstream_port = int(upstream_url.rsplit(":", 1)[1].split("/")[0])
    ref: list[FaultProxy] = []
    server = _QuietServer(("127.0.0.1", 0), _proxy_handler(ref))
    proxy = FaultProxy(f"http://127.0.0.1:{server.server_address[1]}", upstream_port, server)
    ref.append(proxy)
    thread = threading.Thread(target=server.serve_forever, name="fault-proxy", daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        server.shutdown()
        server.server_close()
