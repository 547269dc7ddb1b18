"""The course's figures: one style for every plot, and the throughput plot most chapters draw.

The book shows a cell's PNG at its own pixel width, shrunk to fit when it is wider than the
content column (about 820 px at a 1280 px window). A figure drawn wider is shown shrunk, and
its text with it (chapter 1's 13-inch grid was shown at 63%, its 8 pt legend 7 px high). So
every figure is drawn at the column's width, at 100 dpi, with text no smaller than the page's
small print: :func:`subplots` makes such a figure, and :data:`STYLE` is what it sets.
"""

from __future__ import annotations

import math
import re

from .results import select

# The book's content column at a 1280 px window is 819 px wide (tests/test_book.py measures what
# it shows). 8 inches at 100 dpi is 800 px, a little under it, so the PNG is shown at its own size.
DPI = 100
WIDTH = 8.0  # inches

# matplotlib settings of every course figure. At 100 dpi, 10 pt is 14 px, the size of the book's
# small print (tables, captions); nothing is smaller. The inline backend saves at the figure's dpi.
STYLE = {
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "savefig.pad_inches": 0.05,  # the inline backend crops to what is drawn, plus this margin
    "font.size": 11,
    "axes.titlesize": 12,
    "axes.labelsize": 11,
    "xtick.labelsize": 10,
    "ytick.labelsize": 10,
    "legend.fontsize": 10,
    "figure.titlesize": 13,
    "legend.frameon": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.markersize": 4,
}

# Lines that are PyTorch's or a library's rather than the course's kernels: drawn dashed.
BASELINES = ("eager", "torch.compile", "torch.sum x2", "Liger-Kernel")
# The colours of the lines: matplotlib's default cycle without its grey (C7), which is CONTEXT's.
# PyTorch's lines keep theirs in every plot, and version N of a chapter has the same colour in
# all the chapter's plots, whichever lines are left out.
COLOURS = [f"C{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8, 9)]
FIXED = {"eager": "C0", "torch.compile": "C1", "torch.sum x2": "C2", "Liger-Kernel": "C2"}


def colour(provider: str, i: int) -> str:
    """The colour of a provider's line; ``i`` is its place in the plot, for other names."""
    version = re.match(r"v(\d+)\b", provider)
    if provider in FIXED:
        return FIXED[provider]
    return COLOURS[(2 + int(version.group(1)) if version else i) % len(COLOURS)]


# Lines drawn for context only (``highlight`` of plot_throughput): thin, in one grey.
CONTEXT = {"color": "0.7", "linewidth": 1, "markersize": 2, "zorder": 1}


def subplots(nrows: int = 1, ncols: int = 1, height: float = 4.5, **kwargs):
    """``plt.subplots`` at the column's width in the course's style: ``(fig, axes)``.

    ``height`` is in inches; other keyword arguments go to ``plt.subplots``. The panels of a grid
    are narrow: share their axes (``sharex=True, sharey=True``, then ``ax.label_outer()``) so
    that the labels are drawn once and leave the panels room.

    The style applies to the whole notebook from the first figure on: matplotlib reads some
    settings (tick labels) only when it draws, after this function has returned.
    """
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    # Constrained layout keeps labels, titles and outside legends inside the figure, so the PNG
    # (cropped to what is drawn) is never wider than WIDTH.
    return plt.subplots(nrows, ncols, figsize=(WIDTH, height), layout="constrained", **kwargs)


def legend(where, ncols: int | None = None):
    """A legend off the data: right of one Axes, or below all the panels of a Figure.

    A figure's legend lists each label once (the panels of a grid share their lines' labels).
    It goes below the panels because above them it would collide with the figure's suptitle.
    """
    from matplotlib.figure import Figure

    if isinstance(where, Figure):
        entries = {}
        for ax in where.axes:
            for handle, label in zip(*ax.get_legend_handles_labels()):
                entries.setdefault(label, handle)
        return where.legend(entries.values(), entries.keys(), loc="outside lower center",
                            ncols=ncols or min(len(entries), 4))
    return where.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0,
                        ncols=ncols or 1)


def bandwidth_line(ax, peak: float):
    """The measured read bandwidth as a dotted line, labelled on the line at the left.

    The label sits on the line rather than in the legend: at the left of a throughput plot (small
    sizes, the launch floor) the curves are far below it, so it hides nothing.
    """
    ax.axhline(peak, color="black", linewidth=1, linestyle=":")
    ax.annotate(f"read bandwidth {peak:.0f} GB/s", xy=(0, peak), xycoords=("axes fraction", "data"),
                xytext=(4, 3), textcoords="offset points", va="bottom", fontsize=10)


def plot_throughput(rows, loss: str, providers=None, title: str | None = None, ax=None,
                    highlight=None, x=math.prod, show_legend: bool = True):
    """GB/s against elements (log x) for each provider, with the measured read bandwidth as a line.

    ``rows`` are results rows (``kernels.measure.results.read_rows``, a chapter's ``ch.rows()``);
    ``providers`` fixes the order and the subset of lines (default: all, in the order they first
    appear). ``highlight``, when given, names the lines that matter: the others are drawn thin
    and grey, with one legend entry, so that a panel never has more than a handful of colours.
    ``x`` maps a row's shape to its x value (default: the number of elements). Without ``ax``
    the plot is a figure of its own (:func:`subplots`) with its legend on the right; with ``ax``
    (a panel of a grid), the title is the loss alone, and ``show_legend=False`` leaves the legend
    to the caller (one for the whole grid: :func:`legend` of the figure).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator

    rows = select(rows, loss=loss)
    if not rows:
        raise ValueError(f"no results for loss {loss!r}")
    providers = providers or list(dict.fromkeys(r["provider"] for r in rows))
    own_figure = ax is None
    if own_figure:
        _, ax = subplots()
    context = [p for p in providers if highlight is not None and p not in highlight]
    for i, provider in enumerate(providers):
        mine = sorted(select(rows, provider=provider), key=lambda r: x(r["shape"]))
        if not mine:
            continue
        style = {"linestyle": "--" if provider in BASELINES else "-", "marker": "o"}
        if provider in context:
            # One legend entry for all the grey lines: "v1, v2, v3".
            label = ", ".join(context) if provider == context[0] else "_nolegend_"
            style.update(CONTEXT)
        else:
            label = provider
            style.update(color=colour(provider, i), linewidth=2, zorder=2)
        ax.plot([x(r["shape"]) for r in mine], [r["gbps"] for r in mine], label=label, **style)
    peak = rows[0]["peak_gbps"]
    bandwidth_line(ax, peak)
    ax.set_xscale("log", base=2)
    if x is math.prod:
        # The sizes are powers of 4 (bench.SIZES): ticks on them, labelled as powers of 2.
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"$2^{{{round(math.log2(v))}}}$"))
    ax.set_xlabel("elements")
    ax.set_ylabel("effective GB/s\n(bytes that must be read / time)")
    ax.set_ylim(0, peak * 1.12)
    # A panel of a grid is narrow: by default its title is the loss alone (the GPU, common to all
    # panels, goes in the figure's suptitle).
    ax.set_title(title or (f"{loss}: throughput against size on {rows[0]['gpu']}" if own_figure
                           else loss))
    if show_legend:
        legend(ax)
    return ax
