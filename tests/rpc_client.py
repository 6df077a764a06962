#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A standard gRPC client (Debian's python3-grpcio, messages from protoc --python_out)
against shoal's C learner server: proves wire compatibility and that bad requests get
the documented status codes. Run by tests/test_rpc.c, which checks the server's counters
afterwards; exits non-zero on the first scenario that does not behave.

The server's spec (tests/test_rpc.c): run RUN, max_items 64, columns obs f32 (4),
action i32, reward f32, done bool; token as given; params version 5 = floats 1..6.
"""
import argparse
import math
import os
import struct
import subprocess
import sys
import tempfile

import grpc


def load_pb2(tmp):
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
    subprocess.run(["protoc", f"-I{src}", f"--python_out={tmp}", os.path.join(src, "shoal.proto")],
                   check=True)
    sys.path.insert(0, tmp)
    import shoal_pb2  # noqa: E402

    return shoal_pb2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", default="")
    ap.add_argument("--run", required=True)
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        pb = load_pb2(tmp)
        ch = grpc.insecure_channel(f"127.0.0.1:{a.port}")
        md = [("authorization", f"Bearer {a.token}")] if a.token else []
        push = ch.stream_unary("/shoal.v1.Learner/Push",
                               request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
                               response_deserializer=pb.PushSummary.FromString)
        pull = ch.unary_unary("/shoal.v1.Learner/PullParams",
                              request_serializer=pb.ParamsRequest.SerializeToString,
                              response_deserializer=pb.Params.FromString)
        status = ch.unary_unary("/shoal.v1.Learner/Status",
                                request_serializer=pb.StatusRequest.SerializeToString,
                                response_deserializer=pb.Status.FromString)
        N = 8

        def batch(actor, seq, run=a.run, obs_shape=(4,), nan=False):
            b = pb.SampleBatch(actor_id=actor, run_id=run, policy_version=5, seq=seq, n=N,
                               incarnation=1)
            width = obs_shape[0]
            obs = []
            for i in range(N):
                row = [float(actor), float(seq), float(i), 0.5][:width] + [0.0] * max(0, width - 4)
                obs += row
            if nan:
                obs[1] = math.nan
            b.columns.add(name="obs", dtype=pb.DTYPE_F32, shape=list(obs_shape),
                          data=struct.pack(f"<{len(obs)}f", *obs))
            b.columns.add(name="action", dtype=pb.DTYPE_I32,
                          data=struct.pack(f"<{N}i", *[i % 3 for i in range(N)]))
            b.columns.add(name="reward", dtype=pb.DTYPE_F32, data=struct.pack(f"<{N}f", *[1.0] * N))
            b.columns.add(name="done", dtype=pb.DTYPE_BOOL, data=bytes([0] * (N - 1) + [1]))
            return b

        def expect(name, code, fn):
            try:
                r = fn()
            except grpc.RpcError as e:
                if e.code() != code:
                    print(f"FAIL {name}: {e.code()} {e.details()}, expected {code}")
                    sys.exit(1)
                print(f"OK {name}: {e.code().name} ({e.details()})")
                return None
            if code != grpc.StatusCode.OK:
                print(f"FAIL {name}: succeeded, expected {code}")
                sys.exit(1)
            print(f"OK {name}")
            return r

        s = expect("push 20", grpc.StatusCode.OK,
                   lambda: push(iter([batch(100, q) for q in range(1, 21)]), metadata=md))
        assert s.accepted_batches == 20 and s.accepted_samples == 20 * N and s.last_seq == 20, s
        # A reconnect that resends 1..20 before 21..40: the first 20 are duplicates.
        s = expect("resend + 20 more", grpc.StatusCode.OK,
                   lambda: push(iter([batch(100, q) for q in range(1, 41)]), metadata=md))
        assert s.accepted_batches == 20 and s.duplicate_batches == 20 and s.last_seq == 40, s

        bad = grpc.StatusCode.INVALID_ARGUMENT
        expect("malformed bytes", bad, lambda: push(iter([b"\xff\xff\xff\x0f"]), metadata=md))
        expect("wrong shape", bad, lambda: push(iter([batch(101, 1, obs_shape=(3,))]), metadata=md))
        expect("NaN", bad, lambda: push(iter([batch(102, 1, nan=True)]), metadata=md))
        expect("wrong run", grpc.StatusCode.FAILED_PRECONDITION,
               lambda: push(iter([batch(103, 1, run="not-" + a.run)]), metadata=md))
        expect("oversize", grpc.StatusCode.RESOURCE_EXHAUSTED,
               lambda: push(iter([b"\x0a" + b"\x00" * (1 << 20)]), metadata=md))
        expect("wrong token", grpc.StatusCode.UNAUTHENTICATED,
               lambda: push(iter([batch(104, 1)]), metadata=[("authorization", "Bearer nope")]))
        expect("no token", grpc.StatusCode.UNAUTHENTICATED,
               lambda: status(pb.StatusRequest()))

        p = expect("pull params", grpc.StatusCode.OK,
                   lambda: pull(pb.ParamsRequest(actor_id=100, run_id=a.run, have_version=-1),
                                metadata=md))
        assert p.version == 5 and not p.not_newer, p
        assert struct.unpack("<6f", p.blob) == (1, 2, 3, 4, 5, 6), p.blob
        assert p.layout[0].name == "w" and list(p.layout[0].shape) == [2, 3]
        p = expect("pull params, not newer", grpc.StatusCode.OK,
                   lambda: pull(pb.ParamsRequest(actor_id=100, run_id=a.run, have_version=5),
                                metadata=md))
        assert p.not_newer and p.version == 5 and len(p.blob) == 0, p

        st = expect("status", grpc.StatusCode.OK, lambda: status(pb.StatusRequest(), metadata=md))
        assert st.run_id == a.run and st.batches == 40 and st.duplicates == 20, st
        assert st.policy_version == 5
        ch.close()
    print("rpc_client.py: all scenarios behaved")


if __name__ == "__main__":
    main()
