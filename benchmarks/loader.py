"""The file loaders: validation time of a large header, and the cost of the whole-file checksum.

    python benchmarks/loader.py [--header-mb 41] [--data-mib 200] [--repeat 3]

1. A program whose header is about 41 MB (a small transformer-block stack exported, its
   nodes tiled to ~150k ops, every node validated by the loader: schema, shape rules, the
   executor's plan), static and with a dynamic batch size (whose size table the loader also
   re-verifies at a probe size), and a checkpoint whose header is about 41 MB (180k small
   tensors): `eagerc.runtime.load` / `eagerc.load` from a file in the page cache. Target
   (issue 10): well under 2 s (it took 8-15 s before).
2. A 200 MiB program and a 200 MiB checkpoint: save and load times, sealed (format 2: SHA-256
   of every byte) against the same file without a checksum (format 1, loaded by the same code),
   and SHA-256 alone over 200 MiB in memory.
Best of --repeat runs; one BLAS thread.
"""
import argparse
import hashlib
import io
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import eagerc  # noqa: E402
from eagerc import nn  # noqa: E402
from eagerc.runtime import load as load_program, safetensors_io as st  # noqa: E402


class Block(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.fc = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).split(x.shape[-1], dim=-1)
        att = (q @ k.transpose(-1, -2) * 0.25).softmax(-1)
        x = x + self.proj(att @ v)
        return x + self.out(self.fc(x).relu())


def big_program(header_mb, dynamic):
    """(tensors, metadata) of a program whose graph is an exported 2-block stack tiled until the
    header holds about header_mb MB: tile k reads tile k-1's output and the same weights."""
    eagerc.manual_seed(0)
    model = nn.Sequential(Block(), Block())
    prog = eagerc.export(model, (eagerc.randn(2, 4, 16),), dynamic_shapes=({0: "batch"},) if dynamic else None)
    tensors, meta = prog.parts()
    g = json.loads(meta["graph"])
    dyn = json.loads(meta["dynamic"])
    nodes0, out0 = g["nodes"], g["outputs"][0]
    arg = next(i["name"] for i in g["inputs"] if i["kind"] == "arg")
    node_patches = [p for p in dyn["patches"] if p[0][0] == "nodes"]
    # a tile's share of the header: its nodes and size-table rows, escaped inside the header
    per_tile = (len(json.dumps(nodes0)) + len(json.dumps(node_patches))) * 1.25
    tiles = max(1, int(header_mb * 1e6 / per_tile))
    nodes, patches, prev = [], [], arg
    for k in range(tiles):
        rename = {n["out"]["name"]: f"{n['out']['name']}_{k}" for n in nodes0}
        rename[arg] = prev
        for p in node_patches:
            patches.append([["nodes", p[0][1] + k * len(nodes0)] + p[0][2:]] + p[1:])
        for n in nodes0:
            n = json.loads(json.dumps(n))
            n["out"]["name"] = rename[n["out"]["name"]]
            n["inputs"] = [{"value": rename.get(x["value"], x["value"])} if "value" in x else x for x in n["inputs"]]
            nodes.append(n)
        prev = rename[out0]
    g["nodes"], g["outputs"] = nodes, [prev]
    dyn["patches"] = [p for p in dyn["patches"] if p[0][0] != "nodes"] + patches
    meta = dict(meta, graph=json.dumps(g, sort_keys=True), dynamic=json.dumps(dyn, sort_keys=True))
    return tensors, meta, len(nodes)


def best(fn, repeat):
    """Best wall time of `fn` over `repeat` calls (what it returns is freed after the clock stops:
    a load is timed, not the release of what it loaded)."""
    return best_times(fn, repeat)[0]


def best_times(fn, repeat):
    """(best wall, best CPU time of this process) of `fn`; the CPU time is the steadier figure on
    a shared machine (loading runs on one thread)."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        kept = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
        del kept
    return min(wall), min(cpu)


def header_bytes(path):
    with open(path, "rb") as f:
        return int.from_bytes(f.read(8), "little")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--header-mb", type=float, default=41)
    ap.add_argument("--data-mib", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    d = tempfile.mkdtemp(prefix="eagerc-loader-bench-")
    rows = []

    for dynamic in (False, True):
        tensors, meta, n = big_program(args.header_mb, dynamic)
        path = os.path.join(d, f"big{'-dynamic' if dynamic else ''}.eagerc")
        st.save_file(path, tensors, meta, checksum_key="checksum")
        t = best_times(lambda: load_program(path), args.repeat)
        rows.append((f"program, {n:,} ops{', dynamic batch' if dynamic else ''}", header_bytes(path) / 1e6, t))

    count = int(args.header_mb * 1e6 / 210)
    obj = {"model": {f"layers.{i}.weight": np.full(2, i, np.float32) for i in range(count)}, "step": 7}
    path = os.path.join(d, "big.safetensors")
    eagerc.save(obj, path)
    t = best_times(lambda: eagerc.load(path), args.repeat)
    rows.append((f"checkpoint, {count:,} tensors", header_bytes(path) / 1e6, t))
    print("validation of a large header (load from a file in the page cache, best of "
          f"{args.repeat}; CPU = this process's CPU time):")
    for what, mb, (wall, cpu) in rows:
        print(f"  {what:<40} header {mb:6.1f} MB   load {wall:6.2f} s   CPU {cpu:6.2f} s")

    # ---------------------------------------------------------------- the checksum's cost
    side = int((args.data_mib * 2 ** 20 / 4) ** 0.5)
    eagerc.manual_seed(0)
    lin = nn.Linear(side, side, bias=False)
    x = np.zeros((1, side), np.float32)
    prog = eagerc.export(lin, (eagerc.zeros(1, side),))
    tensors, meta = prog.parts()
    sealed, plain = os.path.join(d, "w2.eagerc"), os.path.join(d, "w1.eagerc")
    mib = sum(a.nbytes for a in tensors.values()) / 2 ** 20
    save2 = best(lambda: st.save_file(sealed, tensors, meta, checksum_key="checksum"), args.repeat)
    save1 = best(lambda: st.save_file(plain, tensors, dict(meta, format_version="1")), args.repeat)
    load2 = best(lambda: load_program(sealed)(x), args.repeat)
    load1 = best(lambda: load_program(plain)(x), args.repeat)
    state = {"w": lin.weight.detach()}
    ck = os.path.join(d, "w.safetensors")
    csave = best(lambda: eagerc.save(state, ck), args.repeat)
    cload = best(lambda: eagerc.load(ck), args.repeat)
    data = tensors["weight"].tobytes()
    sha = best(lambda: hashlib.sha256(data).digest(), args.repeat)
    print(f"\nthe whole-file checksum on {mib:.0f} MiB of weights (best of {args.repeat}; saves include fsync):")
    print(f"  program save   sealed {save2:6.2f} s   without checksum {save1:6.2f} s")
    print(f"  program load   sealed {load2:6.2f} s   without checksum {load1:6.2f} s   (load + one call)")
    print(f"  checkpoint     save {csave:6.2f} s   load {cload:6.2f} s (sealed)")
    print(f"  sha256 alone over {mib:.0f} MiB in memory: {sha:.3f} s")
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)


if __name__ == "__main__":
    main()
