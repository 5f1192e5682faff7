"""A loopback stand-in for OSWorld's file store, for tests: serves files the test made, honours
HTTP Range (206 + Content-Range), and can cut a response short to exercise resuming."""

from __future__ import annotations

import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

from drums.osworld_assets import STORE


class Store:
    def __init__(self, root: str):
        self.root = root
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)
        self.cut_after: dict[str, int] = {}  # path -> bytes to send before dropping the connection (once)
        self.no_range = False
        store = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                path = unquote(urlsplit(self.path).path).lstrip("/")
                store.requests.append((path, self.headers.get("Range")))
                f = os.path.realpath(os.path.join(store.root, path))
                if not f.startswith(os.path.realpath(store.root) + "/") or not os.path.isfile(f):
                    self.send_error(404)
                    return
                data = open(f, "rb").read()
                start, status = 0, 200
                rng = self.headers.get("Range")
                if rng and not store.no_range and rng.startswith("bytes=") and rng.endswith("-"):
                    start = int(rng[6:-1])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                body = data[start:]
                self.send_response(status)
                if status == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                cut = store.cut_after.pop(path, None)
                if cut is not None:
                    self.wfile.write(body[:cut])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def put(self, url: str, data: bytes) -> str:
        """Places a file at the store path of an OSWorld file-store URL."""
        assert url.startswith(STORE), url
        rel = unquote(urlsplit(url).path.split("/resolve/main/", 1)[1])
        p = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
