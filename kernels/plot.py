"""The course's one plot: effective bandwidth against problem size, one line per provider."""

from __future__ import annotations

import math

from .results import select


def plot_throughput(rows, loss: str, providers=None, title: str | None = None, ax=None):
    """GB/s against elements (log x) for each provider, with the measured read bandwidth as a line.

    ``rows`` are results rows (``kernels.results.load``); ``providers`` fixes the order and the
    subset of lines (default: all, in the order they first appear).
    """
    import matplotlib.pyplot as plt

    rows = select(rows, loss=loss)
    if not rows:
        raise ValueError(f"no results for loss {loss!r}")
    providers = providers or list(dict.fromkeys(r["provider"] for r in rows))
    if ax is None:
        _, ax = plt.subplots(figsize=(8, 4.5))
    for provider in providers:
        mine = sorted(select(rows, provider=provider), key=lambda r: math.prod(r["shape"]))
        if not mine:
            continue
        dashed = provider in ("eager", "torch.compile")
        ax.plot([math.prod(r["shape"]) for r in mine], [r["gbps"] for r in mine],
                "--" if dashed else "-", marker="o", markersize=3, label=provider)
    peak = rows[0]["peak_gbps"]
    ax.axhline(peak, color="black", linewidth=1, linestyle=":",
               label=f"read bandwidth (torch.sum, 4 GiB): {peak:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("elements")
    ax.set_ylabel("effective GB/s (bytes that must be read / time)")
    ax.set_ylim(0, peak * 1.08)
    ax.set_title(title or f"{loss}: throughput against size on {rows[0]['gpu']}")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    return ax
