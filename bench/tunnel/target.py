"""The job bench/tunnel reaches: a TCP server on 127.0.0.1:$PORT inside the lease's job, a plain
asyncio pump (read up to 64 KiB, write, drain), the same for every client, direct or through the
data plane. Commands, one after another on a connection until its end:

- `U` n (u64): the client sends n bytes; the server reads them all and answers `K` n (u64).
- `D` n (u64): the server sends n bytes.
- `E` size (u32): echo: the server reads `size` bytes, writes them back, and again, until the end.

Run as a host job by the worker (bubblewrap); standard library only.
"""

from __future__ import annotations

import asyncio
import os
import resource
import struct

CHUNK = 64 * 1024
_BLOCK = os.urandom(CHUNK)  # what `D` sends (incompressible, as real payloads through TLS are)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while command := await reader.read(1):
            if command == b"U":
                (n,) = struct.unpack("!Q", await reader.readexactly(8))
                left = n
                while left:
                    data = await reader.read(min(CHUNK, left))
                    if not data:
                        return
                    left -= len(data)
                writer.write(b"K" + struct.pack("!Q", n))
                await writer.drain()
            elif command == b"D":
                (n,) = struct.unpack("!Q", await reader.readexactly(8))
                view = memoryview(_BLOCK)
                while n:
                    k = min(CHUNK, n)
                    writer.write(view[:k])
                    await writer.drain()
                    n -= k
            elif command == b"E":
                (size,) = struct.unpack("!I", await reader.readexactly(4))
                while True:
                    try:
                        message = await reader.readexactly(size)
                    except asyncio.IncompleteReadError:
                        return
                    writer.write(message)
                    await writer.drain()
            else:
                return
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # a thousand connections at once
    server = await asyncio.start_server(serve, "127.0.0.1", int(os.environ["PORT"]), backlog=2048)
    print(f"serving on {os.environ['PORT']}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
