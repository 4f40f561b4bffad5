#!/usr/bin/env python3
"""Recording TCP proxy for RocketMQ remoting traffic.

    proxy.py OUTDIR LISTEN_HOST:PORT=TARGET_HOST:PORT[=LABEL] ...

Every accepted connection is forwarded unchanged to its target. Each connection's two byte streams are
written to OUTDIR/NNN-LABEL.c2s.bin and OUTDIR/NNN-LABEL.s2c.bin (exactly the bytes seen, so a stream is a
concatenation of remoting frames), and OUTDIR/index.jsonl gets one line per connection (open/close times,
addresses). SIGTERM/SIGINT stop it. The proxy writes OUTDIR/ready when it listens.
"""
import asyncio
import json
import os
import signal
import struct
import sys
import time

OUT = sys.argv[1]
SPECS = [a for a in sys.argv[2:] if not a.startswith("--rewrite=")]
# --rewrite=OLD=NEW: in server->client frames, replace OLD by NEW in the body (frame lengths fixed up). Used to make
# a route that names the server's own address name the proxy instead (mqlite serves name server and broker on one
# port). The .s2c.bin files keep the bytes as the server sent them.
REWRITES = [tuple(a[len("--rewrite="):].split("=", 1)) for a in sys.argv[2:] if a.startswith("--rewrite=")]
os.makedirs(OUT, exist_ok=True)
counter = 0
index = open(os.path.join(OUT, "index.jsonl"), "a", buffering=1)


def rewrite_frames(buf):
    """Split complete frames off buf; return (bytes to forward, rest)."""
    out = bytearray()
    while len(buf) >= 8:
        length, ori = struct.unpack_from(">ii", buf, 0)
        if len(buf) < 4 + length:
            break
        hlen = ori & 0xFFFFFF
        header = bytes(buf[8:8 + hlen])
        body = bytes(buf[8 + hlen:4 + length])
        for old, new in REWRITES:
            body = body.replace(old.encode(), new.encode())
        out += struct.pack(">ii", 4 + hlen + len(body), ori) + header + body
        del buf[:4 + length]
    return bytes(out)


async def pump(reader, writer, f, rewrite=False):
    buf = bytearray()
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            f.write(data)
            if rewrite and REWRITES:
                buf += data
                data = rewrite_frames(buf)
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        f.flush()
        try:
            writer.write_eof()
        except (OSError, RuntimeError):
            pass


def handler(target, label):
    th, tp = target.rsplit(":", 1)

    async def handle(creader, cwriter):
        global counter
        counter += 1
        n = counter
        peer = cwriter.get_extra_info("peername")
        try:
            scen = open(os.path.join(OUT, ".scenario")).read().strip() or "misc"
        except OSError:
            scen = "misc"
        os.makedirs(os.path.join(OUT, scen), exist_ok=True)
        base = os.path.join(OUT, scen, "%03d-%s" % (n, label))
        try:
            sreader, swriter = await asyncio.open_connection(th, int(tp))
        except OSError as e:
            index.write(json.dumps({"conn": n, "label": label, "error": str(e)}) + "\n")
            cwriter.close()
            return
        index.write(json.dumps({"conn": n, "label": label, "scenario": scen, "event": "open", "t": time.time(),
                                "client": "%s:%s" % peer[:2], "target": target, "files": base + ".{c2s,s2c}.bin"}) + "\n")
        with open(base + ".c2s.bin", "wb") as c2s, open(base + ".s2c.bin", "wb") as s2c:
            await asyncio.gather(pump(creader, swriter, c2s), pump(sreader, cwriter, s2c, rewrite=True))
        for w in (cwriter, swriter):
            w.close()
        index.write(json.dumps({"conn": n, "label": label, "event": "close", "t": time.time()}) + "\n")

    return handle


async def main():
    servers = []
    for spec in SPECS:
        parts = spec.split("=")
        listen, target = parts[0], parts[1]
        label = parts[2] if len(parts) > 2 else "conn"
        lh, lp = listen.rsplit(":", 1)
        servers.append(await asyncio.start_server(handler(target, label), lh, int(lp)))
    open(os.path.join(OUT, "ready"), "w").close()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    await stop.wait()
    for s in servers:
        s.close()
    # give in-flight pumps a moment to flush
    await asyncio.sleep(0.2)


asyncio.run(main())
