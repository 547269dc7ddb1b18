"""First GPU check of the toolkit: build, check and time the chapter 4 final kernel."""
import argparse
import time, torch
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # finds kernels/ with no PYTHONPATH

from kernels.build.toolchain import require_gpus  # noqa: E402
from kernels import load, check, bench, get_loss
from kernels.losses import mse

argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
require_gpus(1, "bench/smoke.py")


t = time.perf_counter(); k = load("ch4_two_pass/v2_deterministic_tiles.cu"); print(k, f"{time.perf_counter()-t:.2f}s")
t = time.perf_counter(); k2 = load("ch4_two_pass/v2_deterministic_tiles.cu"); print("again", f"{time.perf_counter()-t:.4f}s")
for name, op in k.ops.items():
    check(op, name)
# poison works?
from kernels.measure.correctness import poison_allocator
poison_allocator(); x = torch.empty((), device="cuda"); print("poisoned 0-d:", x.item())
peak = bench.read_bandwidth(); print(f"read bw {peak:.0f} GB/s; copy {bench.copy_bandwidth():.0f} GB/s")
for name, op in k.ops.items():
    ref = get_loss(name).reference
    comp = torch.compile(ref)
    for n in (1 << 12, 1 << 20, 1 << 30):
        shape = bench.element_wise_shape(n, name)
        ms = bench.bench_loss({"eager": ref, "compile": comp, "v2": op}, name, shape, reps=50)
        print(name, n, "  ".join(f"{m.provider}={m.ms*1e3:.1f}us/{m.gbps:.0f}GB/s" for m in ms))
# determinism + accuracy at 2^30
g = torch.Generator(device="cuda").manual_seed(1)
p, t_ = get_loss("mse").make_inputs((1 << 30,), g)
outs = {k.mse(p, t_).item() for _ in range(20)}
ref = get_loss("mse").reference64((p, t_)).item()
print("distinct results over 20 runs:", len(outs), "rel err", abs(next(iter(outs)) - ref) / ref, "torch", abs(mse(p,t_).item()-ref)/ref)
