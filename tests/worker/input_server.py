"""A hostile server of job inputs, run on the other machine (tests/worker/outside.py): prints its
port, then answers on every address
  /hello                   the honest input (HELLO)
  /to?url=URL              a redirect to URL
  /endless                 a body that never ends (no length)
  /big?n=N&announce=0|1    N bytes, its Content-Length announced or not
  /slow                    a body of 1000 bytes, one every 0.2 s
  /slow-headers            headers that never end, one byte every 0.2 s
  /seen                    the requests it had, as JSON [[the address it was asked on, the path], ...]"""

from __future__ import annotations

import http.server
import json
import time
from urllib.parse import parse_qs, urlsplit

HELLO = b"hello gpus\n"
seen: list[tuple[str, str]] = []


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes, length: bool = True) -> None:
        self.send_response(200)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if parts.path != "/seen":
            seen.append((self.connection.getsockname()[0], self.path))
        try:
            if parts.path == "/hello":
                self._send(HELLO)
            elif parts.path == "/seen":
                self._send(json.dumps(seen).encode())
            elif parts.path == "/to":
                self.send_response(302)
                self.send_header("Location", query["url"])
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif parts.path == "/endless":
                self.send_response(200)
                self.end_headers()
                while True:
                    self.wfile.write(b"x" * 65536)
            elif parts.path == "/big":
                n = int(query["n"])
                self.send_response(200)
                if query.get("announce") == "1":
                    self.send_header("Content-Length", str(n))
                self.end_headers()
                for start in range(0, n, 65536):
                    self.wfile.write(b"x" * min(65536, n - start))
            elif parts.path == "/slow":
                self.send_response(200)
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif parts.path == "/slow-headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while True:
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            else:
                self.send_error(404)
        except OSError:  # the client went away
            pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


server = Server(("0.0.0.0", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
