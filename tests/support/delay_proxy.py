#!/usr/bin/env python3
"""delay_proxy.py - puts a server at a distance for a test: every chunk read from either side is
held for a fixed one-way delay, then written to the other side.

    delay_proxy.py TARGET_PORT ONE_WAY_MS

Listens on a free loopback port, prints it as one line on stdout, and serves until killed. Each
connection accepted is paired with one to 127.0.0.1:TARGET_PORT.

For cases that judge a count of round trips by time: with a delay far above this machine's
scheduling noise (50-100 ms one way), one round trip more is a difference a loaded machine cannot
blur. Not a benchmark tool (bench/ has the C one): asyncio adds its own fraction of a millisecond.
Each direction is one queue drained in order, so the stream's bytes keep their order; the delay
counts from when a chunk was read.
"""
import asyncio
import socket
import sys


async def pump(reader, writer, delay):
    queue = asyncio.Queue()

    async def deliver():
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if data is None:
                try:
                    writer.write_eof()
                except OSError:
                    pass
                return
            writer.write(data)
            try:
                await writer.drain()
            except OSError:
                return

    task = asyncio.ensure_future(deliver())
    loop = asyncio.get_running_loop()
    try:
        while True:
            data = await reader.read(65536)
            queue.put_nowait((loop.time() + delay, data or None))
            if not data:
                break
    except OSError:
        queue.put_nowait((loop.time() + delay, None))
    await task


async def serve(target_port, delay):
    async def on_client(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            cwriter.close()
            return
        for w in (cwriter, swriter):
            w.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(pump(creader, swriter, delay), pump(sreader, cwriter, delay),
                             return_exceptions=True)
        cwriter.close()
        swriter.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1]), float(sys.argv[2]) / 1000.0))
