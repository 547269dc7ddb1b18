# ---
# jupyter:
#   jupytext:
#     text_representation: {extension: .py, format_name: percent}
#   kernelspec: {display_name: Python 3, language: python, name: python3}
# ---

# %% tags=["remove-cell"]
# Setup: make the course's toolkit importable (in the repository, or on Colab after cloning it).
import os, subprocess, sys
REPOSITORY = "https://github.com/loss-kernels/loss-kernels"
COLAB = "google.colab" in sys.modules
if COLAB and not os.path.isdir("/content/loss-kernels"):
    subprocess.run(["git", "clone", "--depth=1", REPOSITORY, "/content/loss-kernels"], check=True)
ROOT = next((p for p in (os.getcwd(), os.path.dirname(os.getcwd()), "/content/loss-kernels")
             if os.path.isfile(os.path.join(p, "kernels", "__init__.py"))), None)
if ROOT is None:  # a notebook opened outside the repository, or copied out of it
    raise FileNotFoundError("the course's repository is not here: clone " + REPOSITORY
                            + " and open this notebook from the clone's chapters/ or"
                            " solutions/ folder")
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if COLAB:  # a GPU runtime, ninja, an nvcc that PyTorch accepts; where your files are
    from kernels.course.colab import prepare_colab
    prepare_colab(ROOT)

# %% [markdown]
# # Solutions: chapter 1
#
# The answers to the exercises of {doc}`chapter 1 <../chapters/01_naive_pytorch>`. They are
# computed from the chapter's measurements, `book/results/ch1.csv`, and checked with the same
# checks as in the chapter, which print PASS.
#
# Each answer, its explanation and its code, is folded: open it once you have tried the exercise.

# %% tags=["nbval-ignore-output"]
import math

import torch

from kernels import Chapter, get_loss, results
from kernels.exercises.ch1_checks import (check_ce_roofline, check_mse_model,
                                          check_smooth_l1_bytes)

rows = Chapter("ch1").published_rows()  # the measurements the book publishes
peak = rows[0]["peak_gbps"]


def by_size(loss, provider):
    return sorted(results.select(rows, loss=loss, provider=provider),
                  key=lambda r: math.prod(r["shape"]))


def at(loss, provider, shape):
    return results.select(rows, loss=loss, provider=provider, shape=tuple(shape))[0]

# %% [markdown]
# ```{solution-start} ch1-smooth-l1-bytes
# :class: dropdown
# ```
#
# Eager Smooth L1 runs **two** kernels that move data, and a tiny memset before the mean, which
# the profiler's count below includes (at $2^{30}$ elements each of the two is launched twice,
# on the two halves of the tensor): an element-wise kernel that computes the loss of every
# element into a temporary, and the mean. (`smooth_l1_loss` is one ATen
# operator, but inside it writes the per-element losses to a full-size tensor and then calls
# `mean` on it.) With $n$ float32 elements:
#
# | kernel | reads | writes |
# |---|---|---|
# | element-wise Smooth L1 | $2n$ | $n$ |
# | mean | $n$ | 1 |
# | **total** | $3n$ | $n$ |
#
# That is $4n$ elements, $16n$ bytes: twice the $8n$ it must read, so eager Smooth L1 should
# take about twice the time of a fused kernel, and its predicted time is the bytes over the
# read bandwidth. The cells below compute both and compare them with the measurements.

# %% tags=["gpu", "nbval-ignore-output"]
# The kernels, seen by the profiler (a smaller size is enough to count them).
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

inputs = get_loss("smooth_l1").make_inputs(
    (1 << 24,), torch.Generator(device="cuda").manual_seed(0), "cuda")
get_loss("smooth_l1").reference(*inputs)
torch.cuda.synchronize()
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    get_loss("smooth_l1").reference(*inputs)
    torch.cuda.synchronize()
found = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
print(f"{len(found)} kernels:")
for name in found:
    print("  " + name.split("(")[0][:90])
del inputs

# %%
n = 1 << 30
# element-wise: read p, t, write the losses; mean: read them
smooth_l1_bytes = (2 * n + n) * 4 + n * 4
check_smooth_l1_bytes(smooth_l1_bytes)

# %% tags=["nbval-ignore-output"]
# The largest size measured: 2^30, or less where chapter 1 ran on a GPU that cannot
# hold it.
m = max(r["shape"][0] for r in rows
        if r["loss"] == "smooth_l1" and r["provider"] == "torch.compile")
eager = at("smooth_l1", "eager", (m,))
compiled = at("smooth_l1", "torch.compile", (m,))
predicted_ms = smooth_l1_bytes * (m / n) / peak / 1e6
print(f"predicted {predicted_ms:.3f} ms (bytes / read bandwidth), "
      f"measured {eager['ms']:.3f} ms: "
      f"{eager['ms'] / predicted_ms:.2f}x the prediction")
print(f"eager / torch.compile: {eager['ms'] / compiled['ms']:.2f}x "
      "(bytes predict 2.00x)")

# %% [markdown]
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch1-launch-crossover
# :class: dropdown
# ```
#
# Eager MSE moves $24$ bytes per element: `pred - target` reads $8$ and writes $4$, `** 2`
# reads $4$ and writes $4$, `mean` reads $4$. The fixed cost is the time at the smallest size,
# where those bytes take well under a microsecond. The model is that cost plus the bytes at the
# read bandwidth.

# %%
eager_mse_bytes_per_element = 24
launch_floor_ms = by_size("mse", "eager")[0]["ms"]


def eager_mse_model_ms(n):
    return launch_floor_ms + eager_mse_bytes_per_element * n / (peak * 1e6)


check_mse_model(eager_mse_bytes_per_element, eager_mse_model_ms, rows)

# %% [markdown]
# Against every measured size (the ratio measured / model):

# %% tags=["nbval-ignore-output"]
for r in by_size("mse", "eager"):
    n = math.prod(r["shape"])
    print(f"2^{n.bit_length() - 1:<2}: measured {r['ms'] * 1e3:8.1f} us, model "
          f"{eager_mse_model_ms(n) * 1e3:8.1f} us, "
          f"ratio {r['ms'] / eager_mse_model_ms(n):.2f}")

# %% [markdown]
# The ratios above put the model's worst error between the two ends. Most likely because there
# each of the three kernels is too small to keep memory busy (a few blocks per SM, each paying the
# full memory latency) yet large enough that its bytes are no longer free, and the next kernel
# cannot start before it ends. A better model gives each kernel its own floor and its own bandwidth curve, which is
# what the chapter's plot of GB/s against size shows.
#
# ```{solution-end}
# ```

# %% [markdown]
# ```{solution-start} ch1-ce-roofline
# :class: dropdown
# ```
#
# The logits are $32768 \times 4096 = 2^{27}$ float32 values ($2^{29}$ bytes) and the targets
# $32768$ int64 values ($2^{18}$ bytes). At 4 flops per logit the intensity is
# $4 \cdot 2^{27} / (2^{29} + 2^{18}) \approx 1$ flop/byte, far below the ridge point computed
# in the chapter: cross-entropy is memory-bound like the others. Its roofline time is the
# bytes over the read bandwidth; the cell below compares it with PyTorch's times.

# %%
shape = (32768, 4096)
ce_bytes = get_loss("cross_entropy").min_bytes(shape)
ce_intensity = 4 * math.prod(shape) / ce_bytes
ce_roofline_ms = ce_bytes / (peak * 1e9) * 1e3
check_ce_roofline(ce_intensity, ce_roofline_ms, peak)

# %% tags=["nbval-ignore-output"]
print(f"roofline {ce_roofline_ms:.3f} ms at {peak:.0f} GB/s")
for provider in ("eager", "torch.compile"):
    r = at("cross_entropy", provider, shape)
    print(f"{provider}: {r['ms']:.3f} ms, "
          f"{100 * ce_roofline_ms / r['ms']:.0f}% of the roofline")

# %% [markdown]
# ```{solution-end}
# ```
