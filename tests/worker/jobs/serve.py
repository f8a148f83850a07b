"""A small model server for the data plane's tests: answers a completion-shaped POST and GET /
with which rank served it, on $PORT at 127.0.0.1 (inside the job's own network namespace)."""

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RANK, LEASE = os.environ.get("RANK", "0"), os.environ.get("GPUNET_LEASE", "")


class Handler(BaseHTTPRequestHandler):
    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer({"served_by_rank": RANK, "lease": LEASE, "path": self.path})

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        completion = f"{request.get('prompt', '')} ... and that is the answer from rank {RANK}"
        self._answer({"completion": completion, "served_by_rank": RANK, "auth": self.headers.get("Authorization")})

    def log_message(self, *args: object) -> None:
        pass


print(f"serving on {os.environ['PORT']}", flush=True)
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
