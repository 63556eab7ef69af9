"""An HTTP proxy in front of the S3 endpoint that injects the faults object storage really has.

Faults, on a seeded schedule: ``slowdown`` (503 SlowDown), ``error`` (500 InternalError),
``reset`` (the connection is reset, nothing answered), ``stall`` (nothing is sent for
longer than the client's timeout, then the connection closes) and ``truncate`` (a GET's
body ends early although Content-Length promised more). Whether a request fails is
decided from ``seed``, the request (method, path, query, range) and how many times that
same request was seen, so a schedule is the same whatever order threads send requests in.
Requests that change data (PUT/POST/DELETE) fail only *before* they reach the endpoint,
as a real store's front end would: the retry must not find its own half-applied write.

``deny`` fails every request whose path contains the string, always (100% for one object), with
``deny_kind`` (any of the above, or ``denied``: 403 AccessDenied).
``latency_s`` delays every request (the benchmark's "looks like real object storage").
``got_bytes`` counts the body bytes of the GETs answered, per (path, client): the client is the first word of the
request's User-Agent (``aiobotocore`` for fsspec/s3fs, another for Lance's own object store client).
"""

from __future__ import annotations

import hashlib
import http.client
import http.server
import random
import socket
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

__all__ = ["FaultProxy", "KINDS"]

KINDS = ("slowdown", "error", "reset", "stall", "truncate")
_BODIES = {
    "slowdown": (503, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code>"
                      b"<Message>Please reduce your request rate.</Message></Error>"),
    "denied": (403, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code>"
                    b"<Message>Access Denied</Message></Error>"),
    "error": (500, b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>InternalError</Code>"
                   b"<Message>We encountered an internal error. Please try again.</Message></Error>"),
}


@dataclass
class FaultProxy:
    """``with FaultProxy(upstream, rate=0.15) as proxy:`` then point clients at ``proxy.url``.

    Args:
        upstream: the real endpoint (``http://127.0.0.1:PORT``).
        rate: fraction of requests that fail (0..1).
        kinds: which faults to draw from.
        seed: the schedule's seed.
        stall_s: how long a stall lasts (longer than the clients' read timeout).
        deny: fail every request whose path contains this (with ``deny_kind``).
        deny_kind: the fault ``deny`` requests get.
        latency_s: added to every request.
    """

    upstream: str
    rate: float = 0.0
    kinds: tuple[str, ...] = KINDS
    seed: int = 0
    stall_s: float = 3.0
    deny: str | None = None
    deny_kind: str = "error"
    latency_s: float = 0.0
    requests: int = 0
    faults: Counter = field(default_factory=Counter)
    got_bytes: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._seen: Counter = Counter()
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "use the proxy as a context manager"
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def fault_fraction(self) -> float:
        return sum(self.faults.values()) / max(1, self.requests)

    def __enter__(self) -> "FaultProxy":
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    def decide(self, method: str, path: str, range_: str) -> str | None:
        """The fault for this request, or None to forward it untouched."""
        key = f"{method} {path} {range_}"
        with self._lock:
            self.requests += 1
            self._seen[key] += 1
            n = self._seen[key]
        if self.deny is not None and self.deny in path:
            kind: str | None = self.deny_kind
        else:
            digest = hashlib.sha256(f"{self.seed}|{key}|{n}".encode()).digest()
            rng = random.Random(digest)
            kind = rng.choice(self.kinds) if rng.random() < self.rate else None
        if kind == "truncate" and method != "GET":
            kind = "error"  # nothing to cut short: fail it before it reaches the endpoint instead
        if kind is not None:
            with self._lock:
                self.faults[kind] += 1
        return kind


class _Handler(http.server.BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"  # keep-alive, as clients expect; every answer has a Content-Length

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self) -> None:
        owner = self.owner
        body = self._body()
        if owner.latency_s:
            time.sleep(owner.latency_s)
        kind = owner.decide(self.command, self.path, self.headers.get("Range", ""))
        if kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if kind == "stall":
            time.sleep(owner.stall_s)
            self.close_connection = True
            return
        if kind in _BODIES:
            status, payload = _BODIES[kind]
            self._answer(status, [("Content-Type", "application/xml")], payload)
            return
        status, headers, data = self._forward(body)
        if kind == "truncate" and len(data) > 1:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            return
        if self.command == "GET":
            with owner._lock:
                client = (self.headers.get("User-Agent") or "?").split("/")[0]
                owner.got_bytes[(urlsplit(self.path).path, client)] += len(data)
        self._answer(status, headers, data)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        up = urlsplit(self.owner.upstream)
        conn = http.client.HTTPConnection(up.hostname, up.port, timeout=60)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "content-length")}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            kept = [(k, v) for k, v in resp.getheaders() if k.lower() not in ("transfer-encoding", "content-length", "connection")]
            if self.command == "HEAD":  # a HEAD answer keeps the object's length and has no body
                kept.append(("Content-Length", resp.getheader("Content-Length") or "0"))
            return resp.status, kept, data
        finally:
            conn.close()

    def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if self.command != "HEAD" or not any(k.lower() == "content-length" for k, _ in headers):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    def log_message(self, *args: object) -> None:
        pass
