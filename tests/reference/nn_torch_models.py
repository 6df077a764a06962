#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Real PyTorch checkpoints for tests/test_nn_torch_models.c, from PyTorch 1.13
(Debian's python3-torch): nested nn.Sequential / nn.Module models with and without
biases, saved as safetensors exactly as their state_dict names them, and the outputs
torch computes with them.

    /usr/bin/python3 tests/reference/nn_torch_models.py             # rewrites nn_torch_models/
    /usr/bin/python3 tests/reference/nn_torch_models.py check FILE  # torch loads shoal's ResNet

torch 1.13 has no safetensors writer, so st_write below writes the format by its
specification from the tensors' own bytes (F32, F16, BF16, I64, F64 as torch holds them).

Files:
  dcgan_g.safetensors   DCGAN generator (conv-transpose, bias=False, batch norm) wrapped
                        in nn.DataParallel: every name starts with "module."
  dcgan_d.safetensors   DCGAN discriminator (conv, bias=False, leaky relu, batch norm)
  resnet.safetensors    a small ResNet: encoder.stem (Sequential), encoder.layer1.0 (a
                        BasicBlock module), encoder.proj (conv with a bias), head
                        (Sequential: Linear bias=False, Linear with a bias)
  resnet_f16.safetensors, resnet_bf16.safetensors
                        the same weights as torch's .half() / .bfloat16() hold them
                        (num_batches_tracked stays I64)
  resnet_f16_f32.safetensors, resnet_bf16_f32.safetensors
                        those rounded weights widened back to F32 by torch
  detector.safetensors  the ResNet's encoder under "backbone." beside a head of other
                        dtypes (F64, I32) that a backbone-only load skips
  expected.txt          inputs and outputs, "name count v0 v1 ..." (9 significant
                        digits, exact for float32), and checksums of torch's F16 -> F32
                        and BF16 -> F32 conversion of all 65536 bit patterns
"""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "nn_torch_models")

DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
          torch.int64: "I64", torch.float64: "F64", torch.int32: "I32"}


def tensor_bytes(t):
    """The little-endian bytes of t as torch holds it (bfloat16 has no numpy dtype, so
    every dtype goes through its bits as an integer array of its width)."""
    t = t.detach().contiguous().cpu()
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    a = t.view(width).numpy() if t.dim() else t.reshape(1).view(width).numpy()
    return a.astype(a.dtype.newbyteorder("<")).tobytes()


def st_write(path, tensors, metadata=None):
    """safetensors: u64 header length, JSON header padded to 8, raw data. Data in
    reversed name order, unlike shoal's own layout."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name in sorted(tensors, reverse=True):
        t = tensors[name]
        b = tensor_bytes(t)
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class Fixture:
    def __init__(self):
        self.lines = []

    def put(self, name, values):
        a = np.asarray(values.detach().double() if torch.is_tensor(values) else values,
                       dtype=np.float64).ravel()
        assert np.all(np.isfinite(a)), name
        self.lines.append(name + " " + str(a.size) + " " + " ".join("%.9g" % v for v in a))

    def write(self, path):
        with open(path, "w") as f:
            f.write("\n".join(self.lines) + "\n")


def randomize(module, gen, scale=0.3):
    """Parameters away from their init, batch-norm statistics away from 0 and 1."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * scale)
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=gen) * 0.2)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=gen) + 0.5)
            elif name.endswith("num_batches_tracked"):
                b.fill_(7)


# ---- DCGAN (Radford et al. 2016; the PyTorch tutorial's layout, narrower) -----------

class Generator(nn.Module):
    def __init__(self, nz=8, ngf=4, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False), nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, nc, 4, 2, 1, bias=False), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, nc=3, ndf=4):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())

    def forward(self, x):
        return self.main(x)


# ---- a small ResNet (He et al. 2016's BasicBlock) ------------------------------------

class BasicBlock(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(y)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU())
        self.layer1 = nn.Sequential(BasicBlock(8))
        self.proj = nn.Conv2d(8, 6, 1)  # with a bias

    def forward(self, x):
        return self.proj(self.layer1(self.stem(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.pool = nn.AvgPool2d(2)
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(6 * 4 * 4, 16, bias=False), nn.ReLU(),
                                  nn.Linear(16, 5))

    def forward(self, x):
        return self.head(self.pool(self.encoder(x)))


def rounded(model, dtype):
    """A copy whose floats are what dtype holds, widened back to float32 by torch."""
    m = ResNet()
    m.load_state_dict({k: (v.to(dtype).float() if v.is_floating_point() else v)
                       for k, v in model.state_dict().items()})
    return m.eval()


def half_table(dtype):
    """torch's dtype -> float32 of all 65536 bit patterns: FNV-1a (32-bit) over the
    float bits, NaNs written as 0x7fc00000 with their sign (payloads aside)."""
    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    f = bits.view(dtype).float()
    u = f.view(torch.int32).numpy().astype(np.uint32)
    nan = np.isnan(f.numpy())
    u = np.where(nan, (u & np.uint32(0x80000000)) | np.uint32(0x7fc00000), u)
    h = 0x811c9dc5
    for v in u.tolist():
        h = ((h ^ v) * 0x01000193) & 0xffffffff
    return [h >> 16, h & 0xffff]


def check(path):
    """Loads a ResNet checkpoint that shoal wrote (test_nn_torch_models.c) into torch's
    ResNet with strict names, and checks its outputs against r.y: shoal's names are
    torch's. Exits non-zero on any difference."""
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = raw[8 + n:]
    sd = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", (name, info["dtype"])
        b, e = info["data_offsets"]
        t = torch.from_numpy(np.frombuffer(data[b:e], dtype="<f4").copy()).reshape(info["shape"])
        sd[name] = t.long() if name.endswith("num_batches_tracked") else t
    net = ResNet()
    net.load_state_dict(sd, strict=True)  # raises on a missing or unexpected name
    net.eval()
    ref = {}
    with open(os.path.join(OUT, "expected.txt")) as f:
        for line in f:
            parts = line.split()
            ref[parts[0]] = np.array([float(v) for v in parts[2:]])
    x = torch.tensor(ref["r.x"], dtype=torch.float32).reshape(2, 3, 8, 8)
    diff = np.abs(net(x).detach().numpy().ravel() - ref["r.y"]).max()
    print("torch loaded %d tensors from %s; largest |y - r.y| %.3g" % (len(sd), path, diff))
    sys.exit(0 if diff <= 1e-5 else 1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
        return
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    gen = torch.Generator().manual_seed(2022)
    fx = Fixture()
    meta = {"format": "pt", "producer": "tests/reference/nn_torch_models.py"}

    g = Generator()
    randomize(g, gen)
    g.eval()
    dp = nn.DataParallel(g)  # on the CPU it runs g; its state_dict adds "module."
    z = torch.randn(2, 8, 1, 1, generator=gen)
    st_write(os.path.join(OUT, "dcgan_g.safetensors"), dp.state_dict(), meta)
    fx.put("g.x", z)
    fx.put("g.y", dp(z))

    d = Discriminator()
    randomize(d, gen)
    d.eval()
    x = torch.randn(3, 3, 16, 16, generator=gen)
    st_write(os.path.join(OUT, "dcgan_d.safetensors"), d.state_dict(), meta)
    fx.put("d.x", x)
    fx.put("d.y", d(x))

    r = ResNet()
    randomize(r, gen)
    r.eval()
    x = torch.randn(2, 3, 8, 8, generator=gen)
    st_write(os.path.join(OUT, "resnet.safetensors"), r.state_dict(), meta)
    fx.put("r.x", x)
    fx.put("r.y", r(x))
    fx.put("r.features", r.encoder(x))
    for dtype, tag in ((torch.float16, "f16"), (torch.bfloat16, "bf16")):
        sd = {k: (v.to(dtype) if v.is_floating_point() else v) for k, v in r.state_dict().items()}
        st_write(os.path.join(OUT, "resnet_%s.safetensors" % tag), sd, meta)
        rr = rounded(r, dtype)
        st_write(os.path.join(OUT, "resnet_%s_f32.safetensors" % tag), rr.state_dict(), meta)
        fx.put("r.y_" + tag, rr(x))
        fx.put(tag + ".hash", half_table(dtype))

    # a detector's checkpoint: the encoder as "backbone." and a head in other dtypes
    det = {"backbone." + k: v for k, v in r.encoder.state_dict().items()}
    det["cls_head.weight"] = torch.randn(4, 6, generator=gen).double()
    det["cls_head.anchors"] = torch.arange(8, dtype=torch.int32)
    st_write(os.path.join(OUT, "detector.safetensors"), det, meta)

    fx.write(os.path.join(OUT, "expected.txt"))
    for f in sorted(os.listdir(OUT)):
        print("wrote", os.path.join(OUT, f), os.path.getsize(os.path.join(OUT, f)), "bytes")


if __name__ == "__main__":
    main()
