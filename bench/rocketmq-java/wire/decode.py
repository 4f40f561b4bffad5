#!/usr/bin/env python3
"""Decode captures written by proxy.py.

    decode.py CAPDIR [--out FILE.txt] [--jsonl FILE.jsonl]

For every NNN-LABEL.{c2s,s2c}.bin pair: split into frames (4-byte big-endian length, then 4 bytes whose high
byte is the serialize type (0 JSON, 1 ROCKETMQ) and low 3 bytes the header length, header, body), decode the
header (JSON or RocketMQ binary), name request/response codes, and summarise the body: JSON bodies printed,
pull-response / send bodies decoded as message records. Requests and responses are paired by opaque.
"""
import json
import os
import re
import struct
import sys
import glob

K = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(K, "src/rmq")


def _codes(path):
    out = {}
    for m in re.finditer(r"public static final int (\w+) = (-?\d+);", open(path).read()):
        out.setdefault(int(m.group(2)), m.group(1))
    return out


REQ = _codes(os.path.join(SRC, "common/src/main/java/org/apache/rocketmq/common/protocol/RequestCode.java"))
RESP = _codes(os.path.join(SRC, "common/src/main/java/org/apache/rocketmq/common/protocol/ResponseCode.java"))
RESP.update(_codes(os.path.join(SRC, "remoting/src/main/java/org/apache/rocketmq/remoting/protocol/RemotingSysResponseCode.java")))
LANG = ["JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO", "PHP", "OMS", "RUST"]


def split_frames(data):
    pos = 0
    frames = []
    while pos + 4 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        if pos + 4 + length > len(data):
            frames.append({"truncated": True, "offset": pos, "length": length, "have": len(data) - pos - 4})
            break
        raw = data[pos:pos + 4 + length]
        frames.append(decode_frame(raw, pos))
        pos += 4 + length
    return frames


def decode_binary_header(h):
    code, lang, version, opaque, flag = struct.unpack_from(">hbhii", h, 0)
    p = 13
    (rlen,) = struct.unpack_from(">i", h, p); p += 4
    remark = h[p:p + rlen].decode("utf-8") if rlen > 0 else None; p += max(rlen, 0)
    (elen,) = struct.unpack_from(">i", h, p); p += 4
    ext = {}
    end = p + elen
    while p < end:
        (kl,) = struct.unpack_from(">h", h, p); p += 2
        k = h[p:p + kl].decode(); p += kl
        (vl,) = struct.unpack_from(">i", h, p); p += 4
        v = h[p:p + vl].decode(); p += vl
        ext[k] = v
    d = {"code": code, "language": LANG[lang] if 0 <= lang < len(LANG) else lang, "version": version,
         "opaque": opaque, "flag": flag}
    if remark is not None:
        d["remark"] = remark
    d["extFields"] = ext
    return d


def decode_frame(raw, offset):
    (length, ori) = struct.unpack_from(">ii", raw, 0)
    st = (ori >> 24) & 0xFF
    hlen = ori & 0xFFFFFF
    header = raw[8:8 + hlen]
    body = raw[8 + hlen:]
    if st == 0:
        hdr = json.loads(header.decode("utf-8"))
        hdr_raw = header.decode("utf-8")
    else:
        hdr = decode_binary_header(header)
        hdr_raw = header.hex()
    return {"offset": offset, "length": length, "serialize": "JSON" if st == 0 else "ROCKETMQ", "headerLength": hlen,
            "header": hdr, "headerRaw": hdr_raw, "body": body}


def decode_records(body):
    """Stored message records (pull response body)."""
    out = []
    p = 0
    while p + 8 <= len(body):
        total, magic = struct.unpack_from(">ii", body, p)
        if total <= 0 or p + total > len(body):
            out.append({"bad": True, "at": p, "total": total})
            break
        r = body[p:p + total]
        q = 8
        crc, qid, flag, qoff, phys, sysflag, born = struct.unpack_from(">iiiqqiq", r, q); q += 4 + 4 + 4 + 8 + 8 + 4 + 8
        bh = 16 if sysflag & 0x10 else 4
        born_host = r[q:q + bh]; q += bh
        (born_port,) = struct.unpack_from(">i", r, q); q += 4
        (store_ts,) = struct.unpack_from(">q", r, q); q += 8
        sh = 16 if sysflag & 0x20 else 4
        store_host = r[q:q + sh]; q += sh
        (store_port,) = struct.unpack_from(">i", r, q); q += 4
        recon, prep = struct.unpack_from(">iq", r, q); q += 12
        (blen,) = struct.unpack_from(">i", r, q); q += 4
        b = r[q:q + blen]; q += blen
        tlen = r[q]; q += 1
        topic = r[q:q + tlen].decode(); q += tlen
        (plen,) = struct.unpack_from(">h", r, q); q += 2
        props = r[q:q + plen].decode("utf-8", "replace")
        out.append({"totalSize": total, "magic": "%08x" % (magic & 0xffffffff), "bodyCRC": crc, "queueId": qid,
                    "flag": flag, "queueOffset": qoff, "physicalOffset": phys, "sysFlag": sysflag,
                    "bornTimestamp": born, "bornHost": ".".join(map(str, born_host)) + ":%d" % born_port,
                    "storeTimestamp": store_ts, "storeHost": ".".join(map(str, store_host)) + ":%d" % store_port,
                    "reconsumeTimes": recon, "preparedTransactionOffset": prep, "body": _short(b), "topic": topic,
                    "properties": props.replace("\x01", "=").replace("\x02", "; ")})
        p += total
    return out


def decode_batch(body):
    """Client batch body (MessageDecoder.encodeMessages)."""
    out = []
    p = 0
    while p + 4 <= len(body):
        (total,) = struct.unpack_from(">i", body, p)
        r = body[p:p + total]
        magic, crc, flag, blen = struct.unpack_from(">iiii", r, 4)
        b = r[20:20 + blen]
        (plen,) = struct.unpack_from(">h", r, 20 + blen)
        props = r[22 + blen:22 + blen + plen].decode("utf-8", "replace")
        out.append({"totalSize": total, "magic": magic, "bodyCRC": crc, "flag": flag, "body": _short(b),
                    "properties": props.replace("\x01", "=").replace("\x02", "; ")})
        p += total
    return out


def _short(b, n=120):
    try:
        s = b.decode("utf-8")
        return s if len(s) <= n else s[:n] + "...(%d bytes)" % len(b)
    except UnicodeDecodeError:
        return "hex:" + (b[:n // 2].hex() + ("...(%d bytes)" % len(b) if len(b) > n // 2 else ""))


def describe_body(code, is_resp, req_code, body):
    if not body:
        return None
    if is_resp and req_code in (11, 361) and body[:1] != b"{":  # PULL_MESSAGE
        return {"records": decode_records(body)}
    if is_resp and req_code in (12, 33, 34) and body[:1] != b"{":  # QUERY_MESSAGE, VIEW_MESSAGE_BY_ID
        return {"records": decode_records(body)}
    if not is_resp and code == 320:  # SEND_BATCH_MESSAGE
        return {"batch": decode_batch(body)}
    if body[:1] in (b"{", b"["):
        try:
            return {"json": body.decode("utf-8")}
        except UnicodeDecodeError:
            pass
    return {"raw": _short(body, 400)}


def main():
    cap = sys.argv[1]
    outp = sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else os.path.join(cap, "decoded.txt")
    jsonp = sys.argv[sys.argv.index("--jsonl") + 1] if "--jsonl" in sys.argv else os.path.join(cap, "frames.jsonl")
    with open(outp, "w") as out, open(jsonp, "w") as js:
        for c2s in sorted(glob.glob(os.path.join(cap, "*.c2s.bin"))):
            base = c2s[:-len(".c2s.bin")]
            name = os.path.basename(base)
            s2c = base + ".s2c.bin"
            reqs = split_frames(open(c2s, "rb").read())
            resps = split_frames(open(s2c, "rb").read()) if os.path.exists(s2c) else []
            out.write("=" * 100 + "\n## connection %s\n" % name)
            frames = [("c2s", f) for f in reqs] + [("s2c", f) for f in resps]
            req_code_of = {}
            responses = {}
            for direction, f in frames:
                if f.get("truncated"):
                    continue
                h = f["header"]
                if h["flag"] & 1:
                    responses.setdefault((direction, h["opaque"]), []).append(f)
                else:
                    req_code_of[(direction, h["opaque"])] = h["code"]
            ordered = []
            for direction, f in frames:
                if f.get("truncated"):
                    ordered.append((direction, f))
                    continue
                h = f["header"]
                if h["flag"] & 1:
                    continue
                ordered.append((direction, f))
                other = "s2c" if direction == "c2s" else "c2s"
                for r in responses.pop((other, h["opaque"]), []):
                    ordered.append((other, r))
            for key, rs in responses.items():
                for r in rs:
                    ordered.append((key[0], r))
            for direction, f in ordered:
                other = "s2c" if direction == "c2s" else "c2s"
                if f.get("truncated"):
                    out.write("%s TRUNCATED frame at %d: %s\n" % (direction, f["offset"], f))
                    continue
                h = f["header"]
                is_resp = bool(h["flag"] & 1)
                oneway = bool(h["flag"] & 2)
                req_code = req_code_of.get((other, h["opaque"])) if is_resp else h["code"]
                if is_resp:
                    cname = "RESPONSE %s (%d) to %s (%s)" % (RESP.get(h["code"], "?"), h["code"], REQ.get(req_code, "?"), req_code)
                else:
                    cname = "REQUEST %s (%d)%s" % (REQ.get(h["code"], "?"), h["code"], " ONEWAY" if oneway else "")
                bd = describe_body(h["code"], is_resp, req_code, f["body"])
                out.write("-- %s @%d len=%d %s hlen=%d body=%d: %s\n" % (direction, f["offset"], f["length"], f["serialize"],
                                                                      f["headerLength"], len(f["body"]), cname))
                out.write("   header: %s\n" % (f["headerRaw"] if f["serialize"] == "JSON" else json.dumps(h)))
                if bd:
                    out.write("   body: %s\n" % json.dumps(bd, ensure_ascii=False)[:6000])
                js.write(json.dumps({"conn": name, "dir": direction, "offset": f["offset"], "length": f["length"],
                                     "serialize": f["serialize"], "header": h, "codeName": cname,
                                     "requestCode": req_code, "bodyLen": len(f["body"]), "body": bd},
                                    ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
