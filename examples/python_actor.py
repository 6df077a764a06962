#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""An Ape-X actor for a shoal-learner, in Python, written from docs/actor-protocol.md.

It needs grpcio, protobuf and numpy only (Debian: python3-grpcio, python3-protobuf,
python3-numpy) plus, to make the stubs from proto/shoal.proto, protoc and
grpc_python_plugin (protobuf-compiler, protobuf-compiler-grpc). It runs CartPole-v1 in
numpy with Gymnasium's equations, acts epsilon-greedily with the network that
Params.arch describes, and pushes n-step-prioritised transitions.

    python3 examples/python_actor.py --target 127.0.0.1:PORT --run RUN --index 0 \\
        --actors 2 --num-envs 16

The run's settings it needs (dqn.n_step, dqn.gamma, actor.eps, ...) are flags with
configs/cartpole-apex.yaml's values as defaults; they must match the learner's config.
On exit it prints one JSON line: {"event":"actor_done", counts...}.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import grpc
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def load_stubs(proto, out_dir):
    """shoal_pb2 and shoal_pb2_grpc generated now from proto: the wire contract is the
    .proto file, never a copy of it."""
    inc = os.path.dirname(os.path.abspath(proto))
    plugin = "/usr/bin/grpc_python_plugin"
    subprocess.run(["protoc", f"-I{inc}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", os.path.abspath(proto)],
                   check=True)
    sys.path.insert(0, out_dir)
    import shoal_pb2  # noqa: E402
    import shoal_pb2_grpc  # noqa: E402
    return shoal_pb2, shoal_pb2_grpc


# ---- CartPole-v1 ---------------------------------------------------------------------

class CartPole:
    """E copies of Gymnasium's CartPole-v1 (classic_control/cartpole.py): explicit Euler
    with tau = 0.02 s, force +-10 N, terminated when |x| > 2.4 or |theta| > 12 degrees,
    reward 1 every step (the last one too), truncated at 500 steps (the TimeLimit of v1).
    Observations are float32 (x, x_dot, theta, theta_dot)."""

    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_limit = 12 * 2 * math.pi / 360
    x_limit = 2.4
    max_steps = 500

    def __init__(self, num_envs, rng):
        self.E = num_envs
        self.rng = rng
        self.state = np.zeros((num_envs, 4), np.float64)
        self.steps = np.zeros(num_envs, np.int64)
        for e in range(num_envs):
            self._reset(e)

    def _reset(self, e):
        self.state[e] = self.rng.uniform(-0.05, 0.05, 4)
        self.steps[e] = 0

    def obs(self):
        return self.state.astype(np.float32)

    def step(self, actions):
        """Steps every copy; an ended copy resets at once. Returns (reward, terminated,
        truncated, final_obs) where final_obs holds the last observation of the copies
        that ended (rows of the others are undefined)."""
        x, x_dot, th, th_dot = self.state.T
        force = np.where(actions == 1, self.force_mag, -self.force_mag)
        total = self.masspole + self.masscart
        pml = self.masspole * self.length
        cos, sin = np.cos(th), np.sin(th)
        temp = (force + pml * th_dot ** 2 * sin) / total
        th_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * cos ** 2 / total))
        x_acc = temp - pml * th_acc * cos / total
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        th = th + self.tau * th_dot
        th_dot = th_dot + self.tau * th_acc
        self.state = np.stack([x, x_dot, th, th_dot], 1)
        self.steps += 1
        term = (np.abs(x) > self.x_limit) | (np.abs(th) > self.theta_limit)
        trunc = ~term & (self.steps >= self.max_steps)
        final = self.obs()
        for e in np.nonzero(term | trunc)[0]:
            self._reset(e)
        return np.ones(self.E, np.float32), term, trunc, final


# ---- the network ---------------------------------------------------------------------

class Network:
    """The policy Params describes: arch (Params.arch, JSON) says the layers, layout says
    where each tensor lies in blob. Dense: y = x W^T + b, W (out, in) as torch's Linear;
    conv2d: W (out, in, kh, kw), cross-correlation as torch's Conv2d."""

    def __init__(self, params):
        if not params.arch:
            raise RuntimeError("the learner sent no Params.arch (an older shoal-learner?)")
        if params.dtype != 7:  # DTYPE_F32
            raise RuntimeError(f"Params.dtype {params.dtype}: only F32 is understood")
        self.arch = json.loads(params.arch)
        if self.arch.get("format") != 1:
            raise RuntimeError(f"Params.arch format {self.arch.get('format')}: expected 1")
        blob = np.frombuffer(params.blob, dtype="<f4")
        self.t = {}
        for e in params.layout:
            if e.offset + e.numel > blob.size:
                raise RuntimeError(f"tensor {e.name} lies outside the blob")
            self.t[e.name] = blob[e.offset:e.offset + e.numel].reshape(tuple(e.shape))
        self.version = params.version
        inp = self.arch["input"]
        self.scale = float(inp.get("scale", 1))
        # Check every tensor the description names against its stated size now, so a
        # blob that does not fit is reported here rather than mid-episode.
        for layer in self.arch["layers"] + [self.arch["head"]]:
            kind = layer.get("layer", layer["kind"])
            if kind not in ("dense", "conv2d", "flatten", "dueling", "q"):
                raise RuntimeError(f"the network has {kind} layers, a custom kind (dqn.layer) "
                                   "this actor does not implement; run shoal's own actors")
        for layer in self.arch["layers"]:
            if layer["kind"] == "dense":
                self._need(layer["name"], (layer["out"], layer["in"]))
            elif layer["kind"] == "conv2d":
                kh, kw = layer["kernel"]
                self._need(layer["name"], (layer["out"], layer["in"], kh, kw))
        head = self.arch["head"]
        if head["kind"] == "dueling":
            self._need(head["value"], (1, head["in"]))
            self._need(head["advantage"], (head["actions"], head["in"]))
        else:
            self._need(head["q"], (head["actions"], head["in"]))
        self.num_actions = head["actions"]

    def _need(self, name, wshape):
        w, b = self.t.get(name + ".weight"), self.t.get(name + ".bias")
        if w is None or b is None or w.shape != wshape or b.shape != (wshape[0],):
            raise RuntimeError(f"layer {name}: tensors do not match {wshape}")

    def _dense(self, name, x):
        return x @ self.t[name + ".weight"].T + self.t[name + ".bias"]

    def _conv(self, layer, x):
        w, b = self.t[layer["name"] + ".weight"], self.t[layer["name"] + ".bias"]
        s, p = layer["stride"], layer["padding"]
        if p:
            x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
        kh, kw = w.shape[2:]
        B, C, H, W = x.shape
        oh, ow = (H - kh) // s + 1, (W - kw) // s + 1
        win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
        win = win[:, :, ::s, ::s][:, :, :oh, :ow]  # (B, C, oh, ow, kh, kw)
        return np.einsum("bchwij,ocij->bohw", win, w, optimize=True) + b[None, :, None, None]

    def q(self, obs):
        """Q-values (B, A) of B observations."""
        x = obs.astype(np.float32) * np.float32(self.scale)
        for layer in self.arch["layers"]:
            k = layer["kind"]
            if k == "flatten":
                x = x.reshape(x.shape[0], -1)
            elif k == "dense":
                x = self._dense(layer["name"], x)
            elif k == "conv2d":
                x = self._conv(layer, x)
            else:
                raise RuntimeError(f"layer kind {k!r} is not known to this actor")
            if layer.get("activation") == "relu":
                x = np.maximum(x, 0)
            elif layer.get("activation") == "tanh":  # a model section's `activation: tanh`
                x = np.tanh(x)
        head = self.arch["head"]
        if head["kind"] == "dueling":
            v = self._dense(head["value"], x)
            a = self._dense(head["advantage"], x)
            return v + a - a.mean(1, keepdims=True)  # Wang et al. 2016, eq. 9
        return self._dense(head["q"], x)


# ---- n-step transitions ----------------------------------------------------------------

class Pending:
    """One env copy's steps not sent yet, in time order. A step is ready (its priority
    known) once n later steps of its episode were acted on, or its episode ended."""

    def __init__(self):
        self.steps = []  # dicts: obs, action, reward, term, trunc, q_sa, max_q, final, max_q_final

    def ready(self, n, gamma):
        """Removes and returns the ready prefix with each step's priority:
        |R_t + bootstrap - Q(s_t, a_t)|, R_t = sum_{k<m} gamma^k r_{t+k}."""
        out = []
        while self.steps:
            s = self.steps
            R, disc, boot = 0.0, 1.0, None
            for k in range(min(n, len(s))):
                R += disc * s[k]["reward"]
                disc *= gamma
                if s[k]["term"]:
                    boot = 0.0
                    break
                if s[k]["trunc"]:
                    boot = disc * s[k]["max_q_final"]
                    break
            if boot is None:
                if len(s) <= n:
                    break  # step t+n not acted on yet
                boot = disc * s[n]["max_q"]
            st = s.pop(0)
            st["priority"] = abs(R + boot - st["q_sa"])
            out.append(st)
        return out


def make_batch(pb, ready, num_envs, obs_shape, obs_dtype):
    """A SampleBatch from {env: [steps]}: per copy its steps in time order, then one tail
    row per step that ended an episode, holding that episode's final observation."""
    obs, act, rew, term, trunc, prio, env, tail = [], [], [], [], [], [], [], []
    for e in range(num_envs):
        steps = ready.get(e) or []
        for st in steps:
            obs.append(st["obs"])
            act.append(st["action"])
            rew.append(st["reward"])
            term.append(st["term"])
            trunc.append(st["trunc"])
            prio.append(st["priority"])
            env.append(e)
            tail.append(0)
        for st in steps:
            if st["term"] or st["trunc"]:
                obs.append(st["final"])
                act.append(0)
                rew.append(0.0)
                term.append(0)
                trunc.append(0)
                prio.append(0.0)
                env.append(e)
                tail.append(1)
    n = len(obs)
    if n == 0:
        return None

    def col(name, dtype, pbtype, values, shape=()):
        arr = np.asarray(values, dtype=dtype)
        return pb.Column(name=name, dtype=pbtype, shape=list(shape), data=arr.tobytes())

    ob_pb = pb.DTYPE_U8 if obs_dtype == "u8" else pb.DTYPE_F32
    cols = [col("obs", "u1" if obs_dtype == "u8" else "<f4", ob_pb, np.stack(obs), obs_shape),
            col("action", "<i4", pb.DTYPE_I32, act),
            col("reward", "<f4", pb.DTYPE_F32, rew),
            col("terminated", "u1", pb.DTYPE_U8, term),
            col("truncated", "u1", pb.DTYPE_U8, trunc),
            col("priority", "<f4", pb.DTYPE_F32, prio),
            col("env", "<i4", pb.DTYPE_I32, env),
            col("tail", "u1", pb.DTYPE_U8, tail)]
    return n, cols


# ---- the actor -------------------------------------------------------------------------

class Stopped(Exception):
    """The learner is gone for good (stopped, or refused this actor)."""


class Actor:
    def __init__(self, a, pb, pbg):
        self.a, self.pb = a, pb
        opts = [("grpc.max_send_message_length", 64 << 20),
                ("grpc.max_receive_message_length", 256 << 20)]
        self.channel = grpc.insecure_channel(a.target, options=opts)
        self.stub = pbg.LearnerStub(self.channel)
        token = a.token or os.environ.get("SHOAL_TOKEN", "")
        self.md = [("authorization", f"Bearer {token}")] if token else None
        self.incarnation = int.from_bytes(os.urandom(8), "little")
        self.seq = 0
        self.counts = {"batches": 0, "samples": 0, "invalid": 0, "exhausted": 0,
                       "duplicates": 0, "resends": 0, "pulls": 0, "episodes": 0}

    def pull(self, have):
        """PullParams; None when not newer. Retries while the learner starts."""
        req = self.pb.ParamsRequest(actor_id=self.a.index, run_id=self.a.run, have_version=have)
        delay, t0 = 0.05, time.monotonic()
        while True:
            try:
                p = self.stub.PullParams(req, metadata=self.md, timeout=30)
                self.counts["pulls"] += 1
                return None if p.not_newer else p
            except grpc.RpcError as ex:
                self._fatal(ex)
                if time.monotonic() - t0 > self.a.connect_s:
                    raise Stopped(f"no params after {self.a.connect_s} s: {ex.code().name}")
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _fatal(self, ex):
        code = ex.code()
        if code == grpc.StatusCode.UNAUTHENTICATED:
            raise Stopped("UNAUTHENTICATED: the token is wrong")
        if code == grpc.StatusCode.FAILED_PRECONDITION:
            raise Stopped("FAILED_PRECONDITION: this actor belongs to another run")

    def push(self, n, cols, version):
        """Sends one batch on a stream of its own and waits for its acknowledgement
        (PushSummary.last_seq): simple, and a blocked push is the backpressure."""
        self.seq += 1
        b = self.pb.SampleBatch(actor_id=self.a.index, run_id=self.a.run, policy_version=version,
                                seq=self.seq, n=n, columns=cols, incarnation=self.incarnation)
        delay, t0 = 0.01, time.monotonic()
        while True:
            try:
                s = self.stub.Push(iter([b]), metadata=self.md, timeout=60)
                if s.last_seq < self.seq:
                    raise Stopped(f"seq {self.seq} not acknowledged (last_seq {s.last_seq})")
                self.counts["duplicates"] += s.duplicate_batches
                self.counts["batches"] += 1
                self.counts["samples"] += n
                return
            except grpc.RpcError as ex:
                self._fatal(ex)
                trail = dict(ex.trailing_metadata() or ())
                code = ex.code()
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    # Never taken: drop it, go on with the next seq.
                    self.counts["invalid"] += 1
                    print(f"python_actor: batch {self.seq} refused: {ex.details()} "
                          f"(shoal-bad-seq {trail.get('shoal-bad-seq')})", file=sys.stderr)
                    return
                if int(trail.get("shoal-last-seq", 0) or 0) >= self.seq:
                    self.counts["batches"] += 1  # taken before the stream broke
                    self.counts["samples"] += n
                    return
                if trail.get("shoal-stopping") == "1":
                    raise Stopped("the learner is stopping")
                if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self.counts["exhausted"] += 1  # behind its replay ratio: resend later
                else:
                    self.counts["resends"] += 1
                if time.monotonic() - t0 > self.a.connect_s:
                    raise Stopped(f"push: {code.name} for {self.a.connect_s} s")
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def run(self):
        a = self.a
        rng = np.random.default_rng(self.incarnation % (1 << 63))
        # Ape-X's per-actor epsilon (Horgan et al. 2018): eps^(1 + alpha i / (N - 1)).
        eps = a.eps if a.actors <= 1 else a.eps ** (1 + a.eps_alpha * a.index / (a.actors - 1))
        p = self.pull(-1)
        net = Network(p)
        obs_dtype = net.arch["input"]["dtype"]
        obs_shape = tuple(net.arch["input"]["shape"])
        if obs_shape != (4,) or net.num_actions != 2:
            raise Stopped(f"this actor runs CartPole-v1; the learner's net takes {obs_shape}")
        env = CartPole(a.num_envs, rng)
        pend = [Pending() for _ in range(a.num_envs)]
        ready = {}
        o = env.obs()
        step, t0 = 0, time.monotonic()
        while a.max_steps <= 0 or step * a.num_envs < a.max_steps:
            q = net.q(o)
            greedy = q.argmax(1)  # lowest index on ties
            explore = rng.random(a.num_envs) < eps
            act = np.where(explore, rng.integers(0, net.num_actions, a.num_envs), greedy)
            max_q = q.max(1)
            q_sa = q[np.arange(a.num_envs), act]
            r, term, trunc, final = env.step(act)
            ended = np.nonzero(term | trunc)[0]
            # Q(s_final) for a truncated episode's bootstrap.
            q_final = net.q(final[ended]).max(1) if ended.size else None
            for e in range(a.num_envs):
                st = {"obs": o[e], "action": int(act[e]), "reward": float(r[e]),
                      "term": int(term[e]), "trunc": int(trunc[e]), "q_sa": float(q_sa[e]),
                      "max_q": float(max_q[e]), "final": None, "max_q_final": 0.0}
                pend[e].steps.append(st)
            for j, e in enumerate(ended):
                pend[e].steps[-1]["final"] = final[e]
                pend[e].steps[-1]["max_q_final"] = float(q_final[j])
                self.counts["episodes"] += 1
            o = env.obs()
            step += 1
            if step % a.send_steps == 0:
                for e in range(a.num_envs):
                    ready.setdefault(e, []).extend(pend[e].ready(a.n_step, a.gamma))
                made = make_batch(self.pb, ready, a.num_envs, obs_shape, obs_dtype)
                ready = {}
                if made:
                    self.push(made[0], made[1], net.version)
            if step % a.pull_steps == 0:
                p = self.pull(net.version)
                if p is not None:
                    net = Network(p)
        self.counts["seconds"] = round(time.monotonic() - t0, 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--target", required=True, help="the learner's host:port")
    ap.add_argument("--run", required=True, help="the learner's --run")
    ap.add_argument("--index", type=int, default=0, help="actor id, 0 <= id < actors")
    ap.add_argument("--actors", type=int, default=2, help="the config's actors")
    ap.add_argument("--num-envs", type=int, default=16, help="env.num_envs")
    ap.add_argument("--send-steps", type=int, default=16, help="actor.send_steps")
    ap.add_argument("--pull-steps", type=int, default=100, help="actor.pull_steps")
    ap.add_argument("--eps", type=float, default=0.4, help="actor.eps")
    ap.add_argument("--eps-alpha", type=float, default=7, help="actor.eps_alpha")
    ap.add_argument("--n-step", type=int, default=3, help="dqn.n_step")
    ap.add_argument("--gamma", type=float, default=0.99, help="dqn.gamma")
    ap.add_argument("--token", default="", help="learner.token (else $SHOAL_TOKEN)")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after this many env steps")
    ap.add_argument("--connect-s", type=float, default=20,
                    help="give up after the learner was unreachable this long")
    ap.add_argument("--proto", default=os.path.join(HERE, "..", "proto", "shoal.proto"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pb, pbg = load_stubs(a.proto, tmp)
        actor = Actor(a, pb, pbg)
        reason = "max_steps"
        try:
            actor.run()
        except Stopped as ex:
            reason = str(ex)
        actor.channel.close()
    print(json.dumps({"event": "actor_done", "index": a.index, "reason": reason, **actor.counts}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
