"""A real HTTP server on 127.0.0.1 that serves files with Range support and can misbehave.

Faults are queued per path and used up one request at a time:
``fail(path, 500, 500)`` answers the next two requests with HTTP 500; ``cut(path, n)``
sends only n bytes of the next body, then drops the connection; ``stall(path, s)`` waits
s seconds before answering the next request. ``requests`` records (path, Range header).
Bodies stream from disk, so a 500 MB file costs the server no memory either.
"""

from __future__ import annotations

import collections
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote


class FileServer:
    def __init__(self) -> None:
        self.files: dict[str, Path] = {}
        self.requests: list[tuple[str, str | None]] = []
        self._faults: dict[str, collections.deque[tuple[str, float]]] = collections.defaultdict(
            collections.deque
        )
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                server._handle(self)

            def do_HEAD(self) -> None:
                # uv asks for a wheel's size and range support before reading it.
                server._handle(self, head=True)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: object, client_address: object) -> None:
                # A client that hangs up (the CLI after an error status, or a cut we
                # caused) is expected here; keep it off stderr, which the tests read.
                server.errors += 1

        self.errors = 0
        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def serve(self, path: str, file: Path) -> str:
        self.files["/" + path.lstrip("/")] = file
        return self.url(path)

    def fail(self, path: str, *statuses: int) -> None:
        self._faults["/" + path.lstrip("/")].extend(("status", float(code)) for code in statuses)

    def cut(self, path: str, after_bytes: int) -> None:
        self._faults["/" + path.lstrip("/")].append(("cut", float(after_bytes)))

    def stall(self, path: str, seconds: float) -> None:
        self._faults["/" + path.lstrip("/")].append(("stall", seconds))

    def count(self, path: str) -> int:
        return sum(1 for seen, _ in self.requests if seen == "/" + path.lstrip("/"))

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handle(self, handler: BaseHTTPRequestHandler, head: bool = False) -> None:
        # Decoded as a static host does: an index links torch-2.6.0%2Bintelmac-....whl.
        path = unquote(handler.path.split("?", 1)[0])
        range_header = handler.headers.get("Range")
        with self._lock:
            self.requests.append((path, range_header))
            fault = self._faults[path].popleft() if self._faults[path] else None
        if fault and fault[0] == "stall":
            time.sleep(fault[1])
        if fault and fault[0] == "status":
            self._status(handler, int(fault[1]))
            return
        file = self.files.get(path)
        if file is None or not file.is_file():
            self._status(handler, 404)
            return
        size = file.stat().st_size
        etag = f'"{size}-{int(file.stat().st_mtime_ns)}"'
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", range_header or "")
        if_range = handler.headers.get("If-Range")
        if match and (if_range is None or if_range == etag):
            start = int(match[1])
            if start >= size:
                handler.send_response(416)
                handler.send_header("Content-Range", f"bytes */{size}")
                handler.send_header("Content-Length", "0")
                handler.end_headers()
                return
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        else:
            handler.send_response(200)
        handler.send_header("Content-Length", str(size - start))
        if file.suffix == ".html":
            # uv refuses an index page without a Content-Type; a static host sends this.
            handler.send_header("Content-Type", "text/html; charset=utf-8")
        handler.send_header("ETag", etag)
        handler.send_header("Accept-Ranges", "bytes")
        handler.end_headers()
        if head:
            return
        limit = int(fault[1]) if fault and fault[0] == "cut" else None
        sent = 0
        with file.open("rb") as body:
            body.seek(start)
            while chunk := body.read(1 << 20):
                if limit is not None and sent + len(chunk) > limit:
                    handler.wfile.write(chunk[: limit - sent])
                    handler.wfile.flush()
                    handler.close_connection = True
                    # Drop the connection mid-body, as a flaky network does.
                    handler.connection.shutdown(2)
                    return
                handler.wfile.write(chunk)
                sent += len(chunk)

    @staticmethod
    def _status(handler: BaseHTTPRequestHandler, code: int) -> None:
        body = f"fixture server: HTTP {code}\n".encode()
        handler.send_response(code)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
