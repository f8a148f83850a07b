"""A job that floods: every connection to $PORT (127.0.0.1, inside the job's own network namespace)
is sent zeros as fast as it takes them, until it closes. Prints a heartbeat line each 0.2 s."""

import os
import socket
import threading
import time


def flood(conn: socket.socket) -> None:
    block = bytes(1 << 16)
    try:
        while True:
            conn.sendall(block)
    except OSError:
        conn.close()


def serve() -> None:
    listener = socket.create_server(("127.0.0.1", int(os.environ["PORT"])))
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=flood, args=(conn,), daemon=True).start()


threading.Thread(target=serve, daemon=True).start()
n = 0
while True:
    n += 1
    print(f"tick {n}", flush=True)
    time.sleep(0.2)
