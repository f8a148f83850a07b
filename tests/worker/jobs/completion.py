"""A small model server for the endpoint tests: a completion-shaped POST (`{"prompt": ...}` ->
`{"completion": ..., "node": ...}`) on 127.0.0.1:$PORT, saying which node answered (its rank, its
GPUs and its working directory: the node's own, whatever rank it took over). Also: GET /stream?n=N
(N chunks, one every STREAM_SECONDS, chunked), GET /slow?s=S (answers after S seconds), GET /count
(the requests it took), GET /quit (answers, then the job exits 0), GET /cookie (sets two cookies),
GET /redirect (to /v1/completions), and GET on any other path (the path and the headers it got).
KEEPALIVE_SECONDS: an idle connection is closed after this long."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

NODE = {
    "rank": os.environ.get("RANK", "0"),
    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    "workdir": os.environ.get("GPUNET_WORKDIR", os.getcwd()),
    "mark": os.environ.get("NODE_MARK", ""),
}
taken = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked answers, as model servers stream tokens
    disable_nagle_algorithm = True  # its head and body are two writes: no delayed-ACK wait between them
    timeout = float(os.environ.get("KEEPALIVE_SECONDS", "0")) or None  # an idle connection is closed after it

    def _count(self) -> None:
        global taken
        with lock:
            taken += 1

    def _answer(self, body: dict, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        if url.path == "/count":
            self._answer({"taken": taken, "node": NODE})
            return
        self._count()
        if url.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(int(query.get("n", "5"))):
                chunk = f"data: {i} {time.time():.3f}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
                time.sleep(float(os.environ.get("STREAM_SECONDS", "0.3")))
            self.wfile.write(b"0\r\n\r\n")
            return
        if url.path == "/cookie":  # a session cookie for the whole site, as a web app sets one
            self.send_response(200)
            self.send_header("Set-Cookie", "sid=1; Path=/; Domain=example.com; HttpOnly")
            self.send_header("Set-Cookie", "pref=2; Path=/ui")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/v1/completions")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if url.path == "/quit":
            self._answer({"node": NODE, "quitting": True})
            threading.Timer(0.2, os._exit, (0,)).start()
            return
        if url.path == "/slow":
            time.sleep(float(query.get("s", "1")))
        self._answer({"node": NODE, "path": self.path, "headers": dict(self.headers.items())})

    def do_POST(self) -> None:
        self._count()
        size = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(size) or b"{}")
        prompt = str(request.get("prompt", ""))
        self._answer(
            {
                "completion": f"{prompt} ... is what rank {NODE['rank']} completes",
                "node": NODE,
                "authorization": self.headers.get("Authorization"),
                "forwarded_prefix": self.headers.get("X-Forwarded-Prefix"),
            }
        )

    def log_message(self, *args: object) -> None:
        pass


server = ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8000"))), Handler)
print(f"serving completions on {server.server_address[1]}", flush=True)
server.serve_forever()
