# SPDX-License-Identifier: Apache-2.0
"""Interop with the real peer libraries, from the peers' venv that
benchmarks/peers/setup.sh makes (SHOAL_PEERS_VENV, default ~/.cache/shoal-peers):

  tboard       TensorBoard's own event reader (EventAccumulator) reads the event file
               cli/tboard.c writes (tests/peers_ref tb) and gets every scalar: tag, step,
               value (float32, bit for bit) and wall time.
  safetensors  the safetensors package reads shoal's checkpoint (nn_model_save) and finds
               every tensor shoal has, with its values; torch 2 loads it into the same net
               and computes shoal's outputs; a file torch 2 writes with
               safetensors.torch.save_file loads into shoal (peers_ref load) and shoal
               computes torch's outputs.
  gym_checker  Gymnasium's env checker (gymnasium.utils.env_checker.check_env) passes on
               each copy of shoal's Python vector env seen as a gymnasium.Env, and the
               vector env's spaces, dtypes, seeding and same-step autoreset follow
               Gymnasium's vector API where the two overlap.

Run by ctest as test_peers_<check> (python/CMakeLists.txt): started by any python3; where
the venv is missing it prints SKIPPED and exits 77 (ctest's skip), else it re-runs itself
with the venv's python. Needs SHOAL_LIB (libshoal.so), SHOAL_PEERS_REF (tests/peers_ref)
and python/ on PYTHONPATH.
"""

import os
import subprocess
import sys
import tempfile
import unittest

VENV = os.environ.get("SHOAL_PEERS_VENV") or os.path.expanduser("~/.cache/shoal-peers")
VPY = os.path.join(VENV, "bin", "python")


def reexec_in_venv():
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        return
    if not os.access(VPY, os.X_OK):
        print(f"SKIPPED: no peers venv at {VENV} (make peers, or set SHOAL_PEERS_VENV)")
        sys.exit(77)
    os.execv(VPY, [VPY] + sys.argv)


def ref(*args):
    out = subprocess.run([os.environ["SHOAL_PEERS_REF"], *args], check=True,
                         capture_output=True, text=True).stdout
    return [line.split() for line in out.splitlines()]


def outputs(lines):
    import numpy as np
    return np.array([float(w[2]) for w in lines if w[0] == "y"], np.float32)


class TBoard(unittest.TestCase):
    def test_event_accumulator_reads_scalars(self):
        import numpy as np
        from tensorboard.backend.event_processing import event_accumulator as ea
        with tempfile.TemporaryDirectory() as d:
            written = ref("tb", d)
            files = os.listdir(d)
            self.assertEqual(len(files), 1, files)
            self.assertTrue(files[0].startswith("events.out.tfevents."), files)
            acc = ea.EventAccumulator(d, size_guidance={ea.SCALARS: 0})
            acc.Reload()
            want = {}
            for _, tag, step, value in written:
                want.setdefault(tag, []).append((int(step), np.float32(value)))
            self.assertEqual(sorted(acc.Tags()["scalars"]), sorted(want))
            for tag, rows in want.items():
                got = acc.Scalars(tag)
                self.assertEqual([e.step for e in got], [s for s, _ in rows], tag)
                # TensorBoard widens simple_value to a Python float: the same float32
                self.assertEqual([np.float32(e.value) for e in got], [v for _, v in rows], tag)
                self.assertEqual(got[0].wall_time, 1.8e9)

    def test_data_loader_reads_run_dir(self):
        """The loader behind `tensorboard --logdir` (directory watcher + event file
        loader) walks a runs/ folder holding a shoal tb/ folder."""
        from tensorboard.backend.event_processing import event_file_loader as efl
        from tensorboard.backend.event_processing import event_multiplexer as em
        with tempfile.TemporaryDirectory() as d:
            tb = os.path.join(d, "cartpole-1", "tb")
            written = ref("tb", tb)
            events = list(efl.EventFileLoader(os.path.join(tb, os.listdir(tb)[0])).Load())
            self.assertEqual(events[0].file_version, "brain.Event:2")
            self.assertEqual(len(events), 1 + len(written))
            mux = em.EventMultiplexer()
            mux.AddRunsFromDirectory(d)
            mux.Reload()
            runs = mux.Runs()
            self.assertEqual(list(runs), [os.path.join("cartpole-1", "tb")])
            self.assertEqual(len(mux.Scalars(os.path.join("cartpole-1", "tb"), "return100")),
                             sum(1 for w in written if w[1] == "return100"))


class SafeTensors(unittest.TestCase):
    def torch_net(self):
        import torch
        net = torch.nn.Sequential()
        net.add_module("fc1", torch.nn.Linear(5, 7))
        net.add_module("bn1", torch.nn.BatchNorm1d(7, eps=1e-5, momentum=0.1))
        net.add_module("act", torch.nn.Tanh())
        net.add_module("out", torch.nn.Linear(7, 3))
        return net

    def x(self):
        import numpy as np
        b, i = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
        return (2.0 * np.sin(1.0 + 0.7 * b + 1.3 * i)).astype(np.float32)

    def test_package_reads_shoal_checkpoint(self):
        import numpy as np
        import torch
        from safetensors import safe_open
        from safetensors.numpy import load_file
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "shoal.safetensors")
            lines = ref("save", path)
            dump = {w[1]: np.array([float(v) for v in w[3:]], np.float32)
                    for w in lines if w[0] == "tensor"}
            tensors = load_file(path)
            self.assertEqual(sorted(tensors), sorted(dump))
            for name, vals in dump.items():
                t = tensors[name]
                self.assertEqual(t.size, vals.size, name)
                self.assertTrue(np.array_equal(t.reshape(-1).astype(np.float32), vals), name)
            self.assertEqual(tensors["fc1.weight"].shape, (7, 5))
            self.assertEqual(tensors["out.weight"].shape, (3, 7))
            with safe_open(path, framework="pt") as f:
                meta = f.metadata()
                self.assertEqual(sorted(f.keys()), sorted(dump))
            self.assertTrue(meta is None or isinstance(meta, dict))
            # torch 2 loads it into the same net and computes shoal's outputs
            from safetensors.torch import load_file as load_pt
            net = self.torch_net()
            net.load_state_dict(load_pt(path), strict=True)
            net.eval()
            with torch.no_grad():
                y = net(torch.from_numpy(self.x())).numpy().reshape(-1)
            np.testing.assert_allclose(y, outputs(lines), rtol=1e-5, atol=1e-5)

    def test_shoal_reads_torch_file(self):
        import numpy as np
        import torch
        from safetensors.torch import save_file
        torch.manual_seed(7)
        net = self.torch_net()
        net.train()
        with torch.no_grad():
            for _ in range(3):
                net(torch.randn(16, 5) * 1.5 + 0.5)  # move the running statistics
        net.eval()
        with torch.no_grad():
            y = net(torch.from_numpy(self.x())).numpy().reshape(-1)
        sd = {k: v.contiguous() for k, v in net.state_dict().items()}
        self.assertEqual(sd["bn1.num_batches_tracked"].dtype, torch.int64)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "torch.safetensors")
            save_file(sd, path, metadata={"format": "pt"})
            got = outputs(ref("load", path))
        np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5)


class GymChecker(unittest.TestCase):
    ENVS = ["CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0",
            "MountainCarContinuous-v0", "MinAtar/Breakout-v1"]

    @staticmethod
    def gym_space(sp):
        import gymnasium as gym
        import shoal
        if isinstance(sp, shoal.Discrete):
            return gym.spaces.Discrete(sp.n)
        return gym.spaces.Box(sp.low, sp.high, sp.shape, sp.dtype)

    def one_env(self, env_id):
        """Copy 0 of a one-copy shoal vector env as a gymnasium.Env."""
        import gymnasium as gym
        import numpy as np
        import shoal
        space = self.gym_space

        class ShoalEnv(gym.Env):
            metadata = {"render_modes": []}

            def __init__(self):
                self.v = shoal.make_vec(env_id, 1, copy=True)
                self.observation_space = space(self.v.single_observation_space)
                self.action_space = space(self.v.single_action_space)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                if seed is None:
                    seed = int(self.np_random.integers(0, 2**62))
                obs, info = self.v.reset(seed=seed)
                return obs[0], info

            def step(self, action):
                a = np.asarray(action, self.v.single_action_space.dtype)[None]
                obs, rew, term, trunc, info = self.v.step(a)
                if term[0] or trunc[0]:
                    return info["final_obs"][0], float(rew[0]), bool(term[0]), bool(trunc[0]), {}
                return obs[0], float(rew[0]), bool(term[0]), bool(trunc[0]), {}

            def close(self):
                self.v.close()

        return ShoalEnv()

    @staticmethod
    def checker_warnings(env):
        """The messages of the warnings check_env gives on env (they are advice)."""
        import warnings
        from gymnasium.utils.env_checker import check_env
        with warnings.catch_warnings(record=True) as ws:
            warnings.simplefilter("always")
            check_env(env, skip_render_check=True)
        return {str(w.message) for w in ws}

    def test_check_env(self):
        """check_env passes (it raises on a failed check); of its advisory warnings, shoal's
        env may only give those Gymnasium's own env gives (CartPole's infinite velocity
        bounds, Pendulum's [-2, 2] action range, ...), and none for MinAtar."""
        import gymnasium as gym
        for env_id in self.ENVS:
            with self.subTest(env=env_id):
                env = self.one_env(env_id)
                mine = self.checker_warnings(env)
                env.close()
                theirs = set()
                if not env_id.startswith("MinAtar/"):
                    g = gym.make(env_id).unwrapped
                    theirs = self.checker_warnings(g)
                    g.close()
                self.assertLessEqual(mine, theirs, env_id)

    def test_spaces_match_gymnasium(self):
        """Same observation and action spaces as Gymnasium's own envs (the classic ones
        Gymnasium ships)."""
        import gymnasium as gym
        import numpy as np
        import shoal
        for env_id in self.ENVS[:5]:
            with self.subTest(env=env_id):
                g = gym.make(env_id)
                v = shoal.make_vec(env_id, 4)
                so, sa = self.gym_space(v.single_observation_space), self.gym_space(
                    v.single_action_space)
                go, ga = g.observation_space, g.action_space
                self.assertEqual(type(so), type(go))
                self.assertEqual(so.shape, go.shape)
                self.assertEqual(so.dtype, go.dtype)
                if isinstance(go, gym.spaces.Box):
                    np.testing.assert_allclose(so.low, go.low, rtol=1e-6)
                    np.testing.assert_allclose(so.high, go.high, rtol=1e-6)
                if isinstance(ga, gym.spaces.Discrete):
                    self.assertEqual(sa.n, ga.n)
                else:
                    self.assertEqual(sa.shape, ga.shape)
                    np.testing.assert_array_equal(sa.low, ga.low)
                    np.testing.assert_array_equal(sa.high, ga.high)
                self.assertEqual(v.max_episode_steps, g.spec.max_episode_steps)
                v.close()
                g.close()

    def test_vector_api(self):
        """What gymnasium.vector.VectorEnv promises: batched spaces, obs in the single
        space, dtypes, seeding reproducible, SAME_STEP autoreset with final_obs."""
        import gymnasium as gym
        import numpy as np
        import shoal
        B = 8
        v = shoal.make_vec("CartPole-v1", B)
        # Gymnasium names the mode with its AutoresetMode enum; shoal (which does not
        # import gymnasium) with the string of the same mode.
        self.assertEqual(gym.vector.AutoresetMode.SAME_STEP.name.lower(), v.metadata["autoreset_mode"])
        single = self.gym_space(v.single_observation_space)
        batched = gym.vector.utils.batch_space(single, B)
        obs, info = v.reset(seed=3)
        self.assertTrue(batched.contains(obs.copy()))
        first = obs.copy()
        self.assertTrue(np.array_equal(v.reset(seed=3)[0], first))
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(600):
            obs, rew, term, trunc, info = v.step(rng.integers(0, 2, B, dtype=np.int32))
            self.assertEqual(rew.shape, (B,))
            self.assertEqual(term.dtype, np.bool_)
            self.assertTrue(batched.contains(obs.copy()))
            done = term | trunc
            if done.any():
                ended += int(done.sum())
                np.testing.assert_array_equal(info["_final_obs"], done)
                for i in np.flatnonzero(done):
                    # the finished episode's last observation, outside the bounds CartPole
                    # terminates at, or truncated by the time limit
                    self.assertTrue(term[i] or trunc[i])
                    self.assertEqual(info["final_obs"][i].shape, single.shape)
        self.assertGreater(ended, 0)
        v.close()


if __name__ == "__main__":
    reexec_in_venv()
    which = sys.argv[1:] or ["tboard", "safetensors", "gym_checker"]
    cls = {"tboard": TBoard, "safetensors": SafeTensors, "gym_checker": GymChecker}
    suite = unittest.TestSuite()
    for w in which:
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(cls[w]))
    res = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if res.wasSuccessful() else 1)
