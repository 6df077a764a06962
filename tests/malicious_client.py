#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A hostile peer of shoal's learner server, run by tests/test_malicious.c while an
honest actor pushes beside it. Each case sends what a broken or malicious client might
and checks that the server refuses it with the documented status, promptly:

  wrong or missing token, an unknown method, huge declared sample counts, huge,
  negative and overflowing shapes, a decompressed size of a terabyte, a frame count of
  four billion, garbage bytes, a message over the size limit, a wrong run, NaN floods
  (hundreds of streams at once), oversized metadata, Push streams opened and never
  written (slow loris), messages trickled byte by byte over raw HTTP/2 (slow loris),
  and idle or half-open TCP connections that never finish the handshake.

The server's spec (tests/test_malicious.c): run RUN, max_items 64, columns obs f32 (4),
action i32, frames u8 (4, 8, 8) frame-stacked; token as given; idle_call_s 1.5,
handshake_timeout_s 2. Prints one line per case, "CASE <name> ok <figures>", and exits
non-zero at the first case that does not behave.
"""
import argparse
import math
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import grpc

IDLE_LIMIT_S = 1.5  # the server's idle_call_s
HANDSHAKE_S = 2.0  # the server's handshake_timeout_s


def load_pb2(tmp):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
    subprocess.run(["protoc", f"-I{src}", f"--python_out={tmp}", os.path.join(src, "shoal.proto")],
                   check=True)
    sys.path.insert(0, tmp)
    import shoal_pb2  # noqa: E402

    return shoal_pb2


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    sys.exit(1)


def ok(name, extra=""):
    print(f"CASE {name} ok {extra}".rstrip(), flush=True)


class Client:
    def __init__(self, pb, port, token, run):
        self.pb, self.port, self.token, self.run = pb, port, token, run
        # a connection of its own (grpcio shares one between like channels otherwise)
        self.ch = grpc.insecure_channel(f"127.0.0.1:{port}",
                                        options=[("grpc.max_send_message_length", 64 << 20),
                                                 ("grpc.max_receive_message_length", 64 << 20),
                                                 ("grpc.use_local_subchannel_pool", 1)])
        ident = lambda m: m if isinstance(m, bytes) else m.SerializeToString()  # noqa: E731
        self.push = self.ch.stream_unary("/shoal.v1.Learner/Push", request_serializer=ident,
                                         response_deserializer=pb.PushSummary.FromString)
        self.pull = self.ch.unary_unary("/shoal.v1.Learner/PullParams", request_serializer=ident,
                                        response_deserializer=pb.Params.FromString)
        self.status = self.ch.unary_unary("/shoal.v1.Learner/Status", request_serializer=ident,
                                          response_deserializer=pb.Status.FromString)
        self.bogus = self.ch.unary_unary("/shoal.v1.Learner/DropTables",
                                         request_serializer=ident,
                                         response_deserializer=lambda b: b)

    def md(self, token=None):
        t = self.token if token is None else token
        return [("authorization", f"Bearer {t}")] if t else []

    def batch(self, n=8, seq=1, nan=False, run=None, actor=900):
        pb = self.pb
        b = pb.SampleBatch(actor_id=actor, run_id=self.run if run is None else run,
                           policy_version=1, seq=seq, n=n, incarnation=77)
        obs = [0.5] * (4 * n)
        if nan:
            obs[len(obs) // 2] = math.nan
        b.columns.add(name="obs", dtype=pb.DTYPE_F32, shape=[4], data=struct.pack(f"<{4*n}f", *obs))
        b.columns.add(name="action", dtype=pb.DTYPE_I32, shape=[], data=bytes(4 * n))
        b.columns.add(name="frames", dtype=pb.DTYPE_U8, shape=[4, 8, 8], data=bytes(256 * n))
        return b

    def expect_push(self, name, msgs, code, token=None, timeout=10):
        try:
            self.push(iter(msgs), metadata=self.md(token), timeout=timeout)
        except grpc.RpcError as e:
            if e.code() != code:
                fail(f"{name}: status {e.code()} ({e.details()}), expected {code}")
            return e.details()
        fail(f"{name}: accepted, expected {code}")


def case_auth(c):
    pb = c.pb
    c.expect_push("wrong token", [c.batch()], grpc.StatusCode.UNAUTHENTICATED, token="not-it")
    c.expect_push("no token", [c.batch()], grpc.StatusCode.UNAUTHENTICATED, token="")
    # a token that is a prefix of the right one, and one a byte longer
    c.expect_push("prefix token", [c.batch()], grpc.StatusCode.UNAUTHENTICATED,
                  token=c.token[:-1] if c.token else "x")
    c.expect_push("longer token", [c.batch()], grpc.StatusCode.UNAUTHENTICATED,
                  token=(c.token or "") + "x")
    for name, rpc, req in (("pull", c.pull, pb.ParamsRequest(run_id=c.run, have_version=-1)),
                           ("status", c.status, pb.StatusRequest())):
        try:
            rpc(req, metadata=c.md("not-it"), timeout=10)
            fail(f"{name} with a wrong token was answered")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAUTHENTICATED:
                fail(f"{name} wrong token: {e.code()}")
    ok("wrong_token", "push/pull/status x6")


def case_unknown_method(c):
    try:
        c.bogus(b"\x08\x01", metadata=c.md(), timeout=10)
        fail("unknown method answered")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.UNIMPLEMENTED:
            fail(f"unknown method: {e.code()}")
    ok("unknown_method")


def case_bad_shapes(c):
    pb = c.pb
    bad = []
    b = c.batch()
    b.n = 0xFFFFFFFF
    bad.append(("huge n", b))
    b = c.batch()
    del b.columns[0].shape[:]
    b.columns[0].shape.extend([1 << 62, 4])
    bad.append(("huge shape", b))
    b = c.batch()
    del b.columns[0].shape[:]
    b.columns[0].shape.extend([-4])
    bad.append(("negative shape", b))
    b = c.batch()
    del b.columns[2].shape[:]
    b.columns[2].shape.extend([1 << 32, 1 << 32, 16])
    bad.append(("overflowing shape", b))
    b = c.batch()
    del b.columns[0].shape[:]
    b.columns[0].shape.extend([2] * 7)
    bad.append(("too many dims", b))
    b = c.batch()
    b.columns[0].codec = pb.CODEC_LZ4
    b.columns[0].raw_size = 1 << 40
    bad.append(("terabyte raw_size", b))
    b = c.batch()
    b.columns[0].codec = pb.CODEC_ZSTD
    b.columns[0].raw_size = 128
    bad.append(("bad zstd", b))
    b = c.batch()
    b.columns[2].layout = pb.LAYOUT_FRAME_STACK
    b.columns[2].frames = 0xFFFFFFFF
    b.columns[2].frame_index = bytes(4 * 4 * 8)
    bad.append(("four billion frames", b))
    b = c.batch()
    b.columns[2].layout = pb.LAYOUT_FRAME_STACK
    b.columns[2].frames = 2
    b.columns[2].data = bytes(128)
    b.columns[2].frame_index = struct.pack("<32I", *([0xFFFFFFF0] * 32))
    bad.append(("frame index out of range", b))
    b = c.batch()
    b.columns[1].data = bytes(3)
    bad.append(("short column", b))
    b = c.batch()
    b.columns[0].dtype = 99
    bad.append(("unknown dtype", b))
    b = c.batch()
    b.columns.add(name="obs", dtype=pb.DTYPE_F32, shape=[4], data=bytes(16 * 8))
    bad.append(("duplicate column", b))
    for name, b in bad:
        c.expect_push(name, [b], grpc.StatusCode.INVALID_ARGUMENT)
    for name, raw in (("garbage", os.urandom(4096)), ("truncated varint", b"\x08\xff\xff\xff"),
                      ("length past end", b"\x32\xff\xff\xff\xff\x0f\x0a"),
                      ("group wire type", b"\x0b\x0c")):
        c.expect_push(name, [raw], grpc.StatusCode.INVALID_ARGUMENT)
    c.expect_push("wrong run", [c.batch(run="another-run")], grpc.StatusCode.FAILED_PRECONDITION)
    # over the server's message limit (about 22 KiB for this spec): refused by gRPC
    c.expect_push("oversize", [b"\x00" * (8 << 20)], grpc.StatusCode.RESOURCE_EXHAUSTED)
    ok("bad_shapes", f"{len(bad) + 6} kinds")


def case_nan_flood(c, streams=400, threads=8):
    errors = []
    counts = [0] * threads

    def worker(k):
        for i in range(streams // threads):
            try:
                c.push(iter([c.batch(seq=1 + i, nan=True, actor=1000 + k)] * 3),
                       metadata=c.md(), timeout=20)
                errors.append("accepted")
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    errors.append(str(e.code()))
                else:
                    counts[k] += 1

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    t0 = time.time()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        fail(f"nan flood: {errors[:3]}")
    # one stream that sends valid batches and then NaN: the valid ones count, the NaN ends it
    d = c.expect_push("nan after valid", [c.batch(seq=1, actor=1999), c.batch(seq=2, actor=1999, nan=True)],
                      grpc.StatusCode.INVALID_ARGUMENT)
    if "not finite" not in d:
        fail(f"nan message: {d}")
    ok("nan_flood", f"{sum(counts)} streams in {time.time() - t0:.1f} s")


def case_big_metadata(c):
    try:
        c.push(iter([c.batch()]), metadata=c.md() + [("x-junk", "a" * 40000)], timeout=10)
        fail("40 KB of metadata accepted")
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.OK:
            fail("big metadata: OK")
    ok("big_metadata")


def case_idle_streams(c, channels=10, per_channel=8):
    """Push streams that are opened and never written, 80 at once over 10 connections
    (more than the server's max_calls of 64): the server refuses the calls over its limit
    at once and cancels the others once they have waited idle_call_s for a message."""
    release = threading.Event()

    def never():
        release.wait()
        return
        yield  # noqa: unreachable: makes this a generator

    t0 = time.time()
    clients = [Client(c.pb, c.port, c.token, c.run) for _ in range(channels)]
    futs = [k.push.future(never(), metadata=c.md(), timeout=60)
            for k in clients for _ in range(per_channel)]
    n = len(futs)
    ends = []
    codes = {}
    for f in futs:
        try:
            f.result(timeout=30)
            fail("an idle stream got a summary")
        except grpc.FutureTimeoutError:
            fail("an idle stream was not closed by the server within 30 s")
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.RESOURCE_EXHAUSTED):
                fail(f"idle stream: {e.code()} {e.details()}")
            ends.append(time.time() - t0)
            codes[e.code().name] = codes.get(e.code().name, 0) + 1
    release.set()
    for k in clients:
        k.ch.close()
    ok("idle_streams", f"{n} streams closed after at most {max(ends):.1f} s {codes}")


# ---- raw HTTP/2, for what grpcio will not do: a message trickled byte by byte --------

def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    def s(x):
        x = x.encode()
        assert len(x) < 127
        return bytes([len(x)]) + x
    return b"\x00" + s(name) + s(value)  # literal without indexing, new name, no Huffman


class Trickler:
    """One connection, one Push stream, a gRPC message sent one byte at a time."""

    def __init__(self, port, token):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.buf = b""
        self.ended = None
        hdrs = b"".join(hpack_literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", "/shoal.v1.Learner/Push"),
            (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
            ("te", "trailers"), ("authorization", f"Bearer {token}")))
        self.send(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(1, 4, 1, hdrs))
        # a 1000-byte message is declared; its bytes will come one by one
        self.pending = b"\x00" + struct.pack(">I", 1000) + b"\x08" * 1000

    def send(self, data):
        self.sock.setblocking(True)
        self.sock.sendall(data)
        self.sock.setblocking(False)

    def poll(self):
        """Reads what the server sent; answers SETTINGS and PING; notes the stream's end."""
        try:
            while True:
                d = self.sock.recv(65536)
                if not d:
                    self.ended = self.ended or "connection closed"
                    return
                self.buf += d
        except BlockingIOError:
            pass
        except OSError as e:
            self.ended = self.ended or f"connection error {e}"
            return
        while len(self.buf) >= 9:
            n = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + n:
                break
            ftype, flags = self.buf[3], self.buf[4]
            sid = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload = self.buf[9:9 + n]
            self.buf = self.buf[9 + n:]
            try:
                if ftype == 4 and not flags & 1:
                    self.send(frame(4, 1, 0))
                elif ftype == 6 and not flags & 1:
                    self.send(frame(6, 1, 0, payload))
            except OSError:
                self.ended = self.ended or "connection closed"
            if ftype == 3 and sid == 1:
                self.ended = self.ended or "RST_STREAM"
            elif ftype == 1 and sid == 1 and flags & 1:
                self.ended = self.ended or "trailers"
            elif ftype == 7:
                self.ended = self.ended or "GOAWAY"

    def trickle(self):
        if self.ended or not self.pending:
            return
        try:
            self.send(frame(0, 0, 1, self.pending[:1]))
            self.pending = self.pending[1:]
        except OSError:
            self.ended = self.ended or "connection closed"


def case_trickle(port, token, n=20):
    ts = [Trickler(port, token) for _ in range(n)]
    t0 = time.time()
    while time.time() - t0 < 20:
        for t in ts:
            t.poll()
            t.trickle()
        if all(t.ended for t in ts):
            break
        time.sleep(0.1)
    dt = time.time() - t0
    alive = [t for t in ts if not t.ended]
    if alive:
        fail(f"slow loris: {len(alive)} of {n} trickled streams still open after {dt:.0f} s")
    sent = max(1005 - len(t.pending) for t in ts)
    for t in ts:
        t.sock.close()
    ok("trickle", f"{n} connections cut after {dt:.1f} s, at most {sent} of 1005 bytes sent")


def case_idle_connections(port, n=100):
    """TCP connections that never start HTTP/2, and ones that stop half way through the
    preface: the server closes them after its handshake timeout."""
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        if i % 2:
            s.sendall(b"PRI * HTTP/2.0\r\n")
        socks.append(s)
    t0 = time.time()
    open_ = set(range(n))
    while open_ and time.time() - t0 < 20:
        r, _, _ = select.select([socks[i] for i in open_], [], [], 0.5)
        for s in r:
            try:
                d = s.recv(65536)
            except OSError:
                d = b""
            if not d:
                open_.discard(socks.index(s))
    dt = time.time() - t0
    for s in socks:
        s.close()
    if open_:
        fail(f"idle connections: {len(open_)} of {n} still open after {dt:.0f} s")
    ok("idle_connections", f"{n} closed after {dt:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--run", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb = load_pb2(tmp)
        c = Client(pb, a.port, a.token, a.run)
        grpc.channel_ready_future(c.ch).result(timeout=10)
        case_auth(c)
        case_unknown_method(c)
        case_bad_shapes(c)
        case_nan_flood(c)
        case_big_metadata(c)
        case_idle_streams(c)
        case_trickle(a.port, a.token)
        case_idle_connections(a.port)
        # and the server still answers
        st = c.status(pb.StatusRequest(), metadata=c.md(), timeout=10)
        ok("still_serving", f"rejected {st.rejected} unauthenticated {st.unauthenticated}")
    print("ALL OK", flush=True)


if __name__ == "__main__":
    main()
