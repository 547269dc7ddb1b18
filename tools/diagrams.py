"""Draw the course's concept diagrams into book/images/ (SVG), from the kernels' own parameters.

Usage: .venv/bin/python tools/diagrams.py [OUTDIR]

Every number a diagram shows (block sizes, threads per row, slice and chunk sizes, bytes per row,
active threads per round, bank conflicts) is read from the kernel sources under kernels/ (their
`constexpr` lines), from the toolkit (`kernels.ops.llm_head.default_chunk_rows`) or from the
chapter's own code (`strided_rounds` in chapters/03_block_reduction.py), then computed here: none is
typed. Change a kernel's parameter and rerun this script; tests/test_diagrams.py checks that the
committed files are what it draws.

The SVG files keep their text as text (svg.fonttype "none") and carry no date, so two runs give
the same bytes. Every figure is drawn at the width the book shows it (WIDTH, the content column)
with no text under MIN_FONT points, so its smallest text reads at 12 px or more in the column:
the book scales an SVG to the column, and text drawn on a wider figure shrinks with it
(tests/test_diagrams.py checks the ratio on the files).
"""
from __future__ import annotations

import ast
import math
import re
import textwrap
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, Rectangle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # kernels.ops.llm_head: the chunk rule itself
KERNELS = ROOT / "kernels"
OUT = ROOT / "book" / "images"

plt.rcParams.update({
    "svg.fonttype": "none",        # text stays text: smaller files, crisp at any width
    "svg.hashsalt": "diagrams",    # fixed ids: the same bytes on every run
    "font.family": "DejaVu Sans",
    "font.size": 10.5,
    "axes.titlesize": 11.5,
    "axes.titleweight": "bold",
})

BLUE, LIGHT, GREY, ORANGE, GREEN, RED, INK = (
    "#4c72b0", "#c9d7ee", "#e4e4e4", "#dd8452", "#55a868", "#c44e52", "#222222")
WARP = 32      # threads per warp (every NVIDIA GPU so far)
BANKS = 32     # shared-memory banks of 4-byte words
SECTOR = 32    # bytes: the unit DRAM and L2 move
LINE = 128     # bytes: a cache line, four sectors
PREVIEW = None  # a folder for PNG previews (--png DIR)
# The book's content column is about 800 px wide at a 1280 px window and shows each figure at
# 100%: a figure WIDTH inches wide (WIDTH * 72 pt) draws a MIN_FONT-point text at
# MIN_FONT * 800 / (WIDTH * 72) = 12.9 px.
WIDTH = 8.3
MIN_FONT = 9.5


# ---------------------------------------------------------------------------------------------
# Parameters, read from the sources.

def constants(relpath: str) -> dict[str, int]:
    """The `constexpr` integer constants of a kernel file, evaluated in order."""
    names: dict[str, int] = {}
    text = (KERNELS / relpath).read_text()
    for name, expr in re.findall(
            r"^constexpr\s+(?:int|int64_t|unsigned|size_t)\s+(\w+)\s*=\s*([^;]+);", text, re.M):
        expr = re.sub(r"(\d+)(?:LL|ULL|U|L)\b", r"\1", expr)
        expr = re.sub(r"static_cast<\w+>", "", expr)
        try:
            names[name] = int(eval(expr, {"__builtins__": {}}, dict(names)))  # noqa: S307
        except (NameError, SyntaxError, TypeError):
            pass
    return names


def shuffle_offsets(relpath: str) -> list[int]:
    """The offsets of the first `for (int offset = K; offset > 0; offset >>= 1)` loop."""
    start = int(re.search(r"for \(int offset = (\d+); offset > 0; offset >>= 1\)",
                          (KERNELS / relpath).read_text()).group(1))
    return [start >> k for k in range(start.bit_length())]


def strided_rounds():
    """Chapter 3's own `strided_rounds` (its notebook's code cell), loaded from the chapter."""
    tree = ast.parse((ROOT / "chapters" / "03_block_reduction.py").read_text())
    [node] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "strided_rounds"]
    scope: dict = {}
    exec(compile(ast.Module([node], []), "03_block_reduction.py", "exec"), scope)  # noqa: S102
    return scope["strided_rounds"]


def tree_rounds(version: int, threads: int, banks: int = BANKS):
    """Per round of chapter 3's versions 1-3: (s, [(tid, word written, word read)], ...).

    Yields (s, adds, working, warps, ways): the adds of the round, the threads that work, the
    warps with at least one working thread, and the wavefronts of the busiest warp's access to
    the word it writes (the most words of that warp in one bank), as `strided_rounds` counts them.
    """
    strides = ([1 << k for k in range(threads.bit_length() - 1)] if version < 3
               else [threads >> k for k in range(1, threads.bit_length())])
    for s in strides:
        adds = []
        for tid in range(threads):
            if version == 1 and tid % (2 * s) == 0:
                adds.append((tid, tid, tid + s))
            elif version == 2 and 2 * s * tid < threads:
                adds.append((tid, 2 * s * tid, 2 * s * tid + s))
            elif version == 3 and tid < s:
                adds.append((tid, tid, tid + s))
        warps: dict[int, list[int]] = {}
        for tid, word, _ in adds:
            warps.setdefault(tid // WARP, []).append(word)
        ways = max(max(sum(1 for w in words if w % banks == b) for b in range(banks))
                   for words in warps.values())
        yield s, adds, len(adds), len(warps), ways


# ---------------------------------------------------------------------------------------------
# Drawing helpers.

def canvas(width, height, xlim, ylim):
    fig, ax = plt.subplots(figsize=(width, height))
    fig.subplots_adjust(left=0, right=1, bottom=0, top=1)  # the whole width is the drawing's
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.set_axis_off()
    return fig, ax


def wrap(text: str, size: float, inches: float = WIDTH - 0.2, em: float = 0.55) -> str:
    """Break text into lines that fit `inches` at `size` points (`em`: a character's mean width,
    0.55 for DejaVu Sans, 0.62 for its bold)."""
    return "\n".join(textwrap.fill(part, int(inches * 72 / (em * size)))
                     for part in text.split("\n"))


def box(ax, x, y, w, h, text="", face=LIGHT, edge=INK, size=10, color=INK, lw=0.8, **kw):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=face, edgecolor=edge, linewidth=lw))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size,
                color=color, **kw)


def arrow(ax, start, end, color=INK, lw=1.0, style="-|>", scale=10, **kw):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=scale,
                                 color=color, linewidth=lw, shrinkA=0, shrinkB=0, **kw))


def save(fig, name: str, out: Path):
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / name, format="svg", bbox_inches="tight", pad_inches=0.05,
                metadata={"Date": None, "Creator": None})
    if PREVIEW:  # a PNG beside, at the width the book shows it, to look at while drawing
        fig.savefig(PREVIEW / name.replace(".svg", ".png"), dpi=100, bbox_inches="tight")
    plt.close(fig)


# (The primer's own figures, the grid of blocks and warps on SMs among them, are drawn by
# tools/primer_figures.py.)


# ---------------------------------------------------------------------------------------------
# Chapter 2.

def warp_sectors(stride_floats: int):
    """Words a warp's 32 lanes read (lane k: float k * stride), and the 32-byte sectors moved."""
    words = [lane * stride_floats for lane in range(WARP)]
    sectors = sorted({4 * w // SECTOR for w in words})
    return words, sectors


def ch2_coalesced(out):
    threads = constants("ch2_atomics/v2_thread_accumulate.cu")["kThreads"]
    per_sector = SECTOR // 4
    lines = 8
    fig, axes = plt.subplots(1, 2, figsize=(WIDTH, 4.3), gridspec_kw={"wspace": 0.08})
    fig.subplots_adjust(left=0, right=1, bottom=0.12)
    for ax, stride, title in ((axes[0], 1, "Coalesced: lane k reads float k"),
                              (axes[1], per_sector, f"Strided: lane k reads float {per_sector}k")):
        words, sectors = warp_sectors(stride)
        ax.set_xlim(-0.5, WARP + 0.5)
        ax.set_ylim(-lines - 4.6, 5.6)
        ax.set_axis_off()
        ax.set_title(title, fontsize=11)
        for lane in range(WARP):
            box(ax, lane, 3, 1, 1.3, "", face=BLUE)
        ax.text(0, 4.8, "warp: lanes 0-31", fontsize=10)
        ax.text(0, -lines - 0.2, f"memory: rows of {LINE} B, {LINE // SECTOR} sectors of "
                f"{SECTOR} B", fontsize=10, va="top")
        for line in range(lines):
            for col in range(WARP):
                word = line * WARP + col
                used = word in words
                moved = 4 * word // SECTOR in sectors
                box(ax, col, -line - 1, 1, 1, face=BLUE if used else ORANGE if moved else "white",
                    edge="#999999", lw=0.4)
            for sec in range(1, LINE // SECTOR):
                ax.plot([sec * per_sector] * 2, [-line - 1, -line], color=INK, lw=1.2)
        for lane in (0, 1, 2, 31) if stride == 1 else (0, 1, 2, 3, 4, 31):
            word = words[lane]
            arrow(ax, (lane + 0.5, 3), (word % WARP + 0.5, -(word // WARP)), color=GREY, lw=0.8,
                  scale=6)
        moved = len(sectors) * SECTOR
        ax.text(0, -lines - 1.8,
                f"{len(sectors)} sector{'s' if len(sectors) > 1 else ''} of {SECTOR} B moved:\n"
                f"{moved} B for {4 * WARP} B used ({4 * WARP / moved:.0%})", fontsize=10.5,
                va="top", fontweight="bold")
    fig.text(0.5, 0.1, wrap(f"blue: the 4-byte floats the warp uses; orange: bytes moved but "
             f"unused. Version 2's grid-stride loop keeps lane k of block b on element "
             f"b * {threads} + k + i * stride: the left picture.", 10), ha="center", va="top",
             fontsize=10)
    save(fig, "ch2_coalesced.svg", out)


def ch2_atomics_queue(out):
    threads = constants("ch2_atomics/v4_block_atomics.cu")["kThreads"]
    n, sms = 1 << 24, 132  # 2^24 elements on an H100 (132 SMs)
    resident = sms * (2048 // threads)
    counts = [("v1: one per element", n), ("v2: one per thread", resident * threads),
              ("v3: one per warp", resident * threads // WARP), ("v4: one per block", resident)]
    fig, (left, right) = plt.subplots(2, 1, figsize=(WIDTH, 6.6),
                                      gridspec_kw={"height_ratios": [0.8, 1], "hspace": 0.3})
    left.set_xlim(0, 40)
    left.set_ylim(0, 28)
    left.set_axis_off()
    left.set_title("Every atomicAdd to one address waits its turn")
    box(left, 31, 12, 8, 6, "out\n(L2)", face=ORANGE, color="white", size=11)
    for k in range(7):
        box(left, 28.5 - (k + 1) * 2.4, 13.8, 2.0, 2.4, face=BLUE)
    left.text(21, 17.2, "queue at the one address", ha="center", fontsize=10)
    for k in range(8):
        y = 3 + k * 3.2
        left.text(0, y, f"thread {k}", fontsize=10, va="center")
        arrow(left, (6, y), (11.5, 15), color=GREY, lw=0.8, scale=6)
    left.text(23, 10, "the L2 serves them one after another:\nmore threads only lengthen the queue",
              ha="center", fontsize=10, va="top")
    labels = [c[0] for c in counts][::-1]
    values = [c[1] for c in counts][::-1]
    right.barh(labels, values, color=[GREEN, GREEN, BLUE, ORANGE])
    right.set_xscale("log")
    right.set_xlim(100, n * 40)
    # plain labels: matplotlib's 10^k draws its exponent at 70%, under MIN_FONT
    ticks = [10 ** k for k in range(2, 9)]
    right.set_xticks(ticks, [f"{t:,}" if t < 10**4 else f"{t // 1000:,}k" if t < 10**6
                             else f"{t // 10**6:,}M" for t in ticks])
    right.minorticks_off()
    for y, v in enumerate(values):
        right.text(v * 1.3, y, f"{v:,}", va="center", fontsize=10)
    right.set_title(f"Atomics on the one address for n = 2^{n.bit_length() - 1}")
    right.set_xlabel(wrap(f"atomics (v2-v4: a grid of {resident} blocks of {threads} threads, "
                          f"{2048 // threads} per SM on {sms} SMs)", 10.5))
    right.spines[["top", "right"]].set_visible(False)
    save(fig, "ch2_atomics_queue.svg", out)


GAP = 2.2  # vertical distance between shuffle steps, room for the arrows


def shuffle_sums(offsets, mode):
    """For each step: the source lane of every lane, and how many values each lane then holds."""
    held = [{lane} for lane in range(WARP)]
    steps = []
    for off in offsets:
        src = [(lane ^ off) if mode == "xor" else lane + off for lane in range(WARP)]
        # __shfl_down_sync: a lane past the end gets its own value back, and v += v adds it twice
        # (the kernel uses lane 0's result only); counted here as adding nothing new.
        held = [held[lane] | (held[src[lane]] if src[lane] < WARP else set()) for lane in range(WARP)]
        steps.append((off, src, [len(h) for h in held]))
    return steps


def ch2_shuffle(out):
    down = shuffle_offsets("ch2_atomics/v3_warp_atomics.cu")
    xor = shuffle_offsets("ch3_block_reduction/v6_vectorized_grid_stride.cu")
    fig, axes = plt.subplots(2, 1, figsize=(WIDTH, 10.5), gridspec_kw={"hspace": 0.25})
    fig.subplots_adjust(left=0, right=1, top=0.95, bottom=0.1)  # the lanes get the width
    cmap = plt.get_cmap("Blues")
    for ax, offsets, mode, title in (
            (axes[0], down, "down", "__shfl_down_sync(mask, v, offset): lane k adds lane k + offset\n"
                                    "(chapter 2, version 3)"),
            (axes[1], xor, "xor", "__shfl_xor_sync(mask, v, offset): lane k adds lane k ^ offset,\n"
                                  "the butterfly (chapter 3, version 6)")):
        steps = shuffle_sums(offsets, mode)
        rows = len(steps)
        ax.set_xlim(-2.2, WARP + 0.1)
        ax.set_ylim(-GAP * rows - 1.4, 1.4)
        ax.set_axis_off()
        ax.set_title(title, fontsize=11)
        # digits are 0.64 em: a two-digit label at MIN_FONT needs the 0.9 of a lane drawn here
        for lane in range(WARP):
            box(ax, lane + 0.05, 0, 0.9, 0.8, f"{lane}", face=LIGHT, size=MIN_FONT)
        ax.text(-0.2, 1.1, "offset", ha="right", va="bottom", fontsize=9.5)
        ax.text(-0.2, 0.4, "lane", ha="right", va="center", fontsize=9.5)
        for r, (off, src, counts) in enumerate(steps):
            y = -(r + 1) * GAP
            ax.text(-0.2, y + 0.4, f"{off}", ha="right", va="center", fontsize=10,
                    fontweight="bold")
            for lane in range(WARP):
                c = counts[lane]
                if mode == "down" and lane >= off:  # no later step reads it
                    box(ax, lane + 0.05, y, 0.9, 0.8, face=GREY, edge="#999999")
                else:
                    box(ax, lane + 0.05, y, 0.9, 0.8, f"{c}", color="white" if c >= 8 else INK,
                        face=cmap(0.25 + 0.7 * math.log2(c) / 5), size=MIN_FONT)
                s = src[lane]
                if s < WARP and (mode == "xor" or lane < off):
                    arrow(ax, (s + 0.5, y + GAP), (lane + 0.5, y + 0.8),
                          color=RED if s > lane else GREEN, lw=0.6, style="-|>", scale=5)
        full = sum(1 for c in steps[-1][2] if c == WARP)
        ax.text(WARP, -GAP * rows - 0.9, f"after {rows} steps: {full} lane{'s' if full > 1 else ''} "
                f"hold{'s' if full == 1 else ''} the sum of all {WARP}", ha="right",
                fontsize=10.5, fontweight="bold")
    fig.text(0.5, 0.08, wrap("Numbers: how many lanes' values each lane's v holds after the step "
             "(grey: no longer read). Arrows: where the value added comes from.", 10),
             ha="center", va="top", fontsize=10)
    save(fig, "ch2_shuffle.svg", out)


# ---------------------------------------------------------------------------------------------
# Chapter 3: the trees of versions 1-3, the grid-stride loop of version 6.

TREE_FILES = {1: "ch3_block_reduction/v1_interleaved_divergent.cu",
              2: "ch3_block_reduction/v2_interleaved_strided.cu",
              3: "ch3_block_reduction/v3_sequential.cu"}
TREE_TITLES = {1: "Version 1: thread tid adds when tid % (2s) == 0",
               2: "Version 2: thread tid adds at index 2 * s * tid",
               3: "Version 3: thread tid adds sdata[tid + s] for tid < s"}


def ch3_tree(version, out, shown=16):
    threads = constants(TREE_FILES[version])["kThreads"]
    rounds = list(tree_rounds(version, threads))
    if version == 2:  # the chapter's own count, which the table below must match
        assert [r[:1] + r[2:] for r in rounds] == list(strided_rounds()(threads, BANKS))
    small = list(tree_rounds(version, shown))
    # the tree on top, the whole block's table and bank map below it
    fig = plt.figure(figsize=(WIDTH, 7.8))
    ax = fig.add_axes([0, 0.42, 1, 0.58])
    ax.set_xlim(-2.4, shown + 6.2)
    ax.set_ylim(-2.2 * len(small) - 0.4, 1.2)
    ax.set_axis_off()
    ax.set_title(TREE_TITLES[version] + f"\n(drawn for {shown} values; the kernel has {threads})",
                 fontsize=11.5)
    for i in range(shown):
        box(ax, i + 0.05, 0, 0.9, 0.9, f"x{i}", face=LIGHT, size=MIN_FONT)
    ax.text(-0.2, 0.45, "sdata", ha="right", va="center", fontsize=10)
    for r, (s, adds, working, warps, ways) in enumerate(small):
        y = -(r + 1) * 2.2
        written = {word: tid for tid, word, _ in adds}
        for i in range(shown):
            if i in written:
                box(ax, i + 0.05, y, 0.9, 0.9, f"t{written[i]}", face=BLUE, color="white",
                    size=MIN_FONT)
            else:
                box(ax, i + 0.05, y, 0.9, 0.9, face="white", edge="#bbbbbb")
        for tid, word, src in adds:
            arrow(ax, (src + 0.5, y + 2.2), (word + 0.5, y + 0.9), color=ORANGE, lw=0.9, scale=7)
            arrow(ax, (word + 0.5, y + 2.2), (word + 0.5, y + 0.9), color=GREY, lw=0.9, scale=7)
        ax.text(-0.2, y + 0.45, f"s = {s}", ha="right", va="center", fontsize=10)
        idle = sorted(set(range(shown)) - {t for t, _, _ in adds})
        ax.text(shown + 0.3, y + 0.45, f"{working} working\nidle: "
                + (f"t{idle[0]}-t{idle[-1]}" if idle == list(range(idle[0], idle[-1] + 1))
                   else f"t{idle[0]}, t{idle[1]}, ... ({len(idle)})"),
                ha="left", va="center", fontsize=9.5, color="#555555")
    # the whole block: a table, and the banks of the worst round's first warp
    tab = fig.add_axes([0, 0, 0.46, 0.34])
    tab.set_axis_off()
    rows = [[f"{s}", f"{working}", f"{warps}", f"{ways}"] for s, _, working, warps, ways in rounds]
    table = tab.table(cellText=rows, colLabels=["s", "threads\nworking", "warps\nrunning",
                                                "wavefronts\nper access"],
                      loc="upper center", cellLoc="center")
    table.auto_set_font_size(False)
    table.set_fontsize(10)
    table.scale(1, 1.25)
    for (row, col), cell in table.get_celld().items():
        if row == 0:
            cell.set_height(cell.get_height() * 2)
        if row > 0 and col == 3 and int(rows[row - 1][3]) > 1:
            cell.set_facecolor("#f6d3bd")
    tab.set_title(f"The kernel's block of {threads} threads", fontsize=11)
    s, adds, _, _, ways = max(rounds, key=lambda r: (r[4], -r[0]))
    words = [word for tid, word, _ in adds if tid < WARP]
    bank = fig.add_axes([0.52, 0.02, 0.48, 0.3])
    rows_of_words = threads // BANKS
    bank.set_xlim(-0.5, BANKS + 0.5)
    bank.set_ylim(-rows_of_words - 0.3, 5)
    bank.set_axis_off()
    for w in range(threads):
        r, b = divmod(w, BANKS)
        box(bank, b, -r - 1, 1, 1, face=ORANGE if w in words and ways > 1 else BLUE if w in words
            else "white", edge="#bbbbbb", lw=0.4)
    bank.text(0, 0.3, f"sdata[{threads}], a column per bank:\nwarp 0 writes at s = {s}, "
              f"{len(words)} words,\nat most {ways} in one bank: "
              f"{ways} wavefront{'s' if ways > 1 else ''}", fontsize=10, va="bottom")
    save(fig, f"ch3_tree_v{version}.svg", out)


def ch3_tree_v1(out):
    ch3_tree(1, out)


def ch3_tree_v2(out):
    ch3_tree(2, out)


def ch3_tree_v3(out):
    ch3_tree(3, out)


def ch3_grid_stride(out, blocks=4, strides=8):
    c = constants("ch3_block_reduction/v6_vectorized_grid_stride.cu")
    threads, unroll = c["kThreads"], c["kUnroll"]
    chunk = threads * 16  # bytes: one float4 per thread
    fig, ax = canvas(WIDTH, 5.6, (-6.2, blocks * 6 + 7.6), (-strides * 1.3 - 3.2, 2.6))
    colors = [BLUE, ORANGE, GREEN, "#8172b3"]
    ax.text(-6.2, 2.6, wrap(f"Version 6: a grid of as many blocks as fit at once (drawn: {blocks}), "
            f"each of {threads} threads; each load is a float4, {threads} x 16 B = "
            f"{chunk // 1024} KiB per block", 10.5), fontsize=10.5, va="top")
    for b in range(blocks):
        ax.text(b * 6 + 2.75, 0.6, f"block {b}", ha="center", fontsize=10, color=colors[b % 4],
                fontweight="bold")
    for r in range(strides):
        y = -r * 1.3 - 0.6
        for b in range(blocks):
            box(ax, b * 6, y, 5.5, 1.0, f"{chunk // 1024} KiB", face=colors[b % 4], color="white",
                size=10)
        ax.text(-0.3, y + 0.5, f"+ {r} x stride", ha="right", va="center", fontsize=10)
    for k in range(strides // unroll):
        top, bottom = -k * unroll * 1.3 - 0.6 + 1.0, -(k + 1) * unroll * 1.3 - 0.6 + 1.3
        x = blocks * 6 + 0.1
        ax.plot([x, x + 0.4, x + 0.4, x], [top, top, bottom, bottom], color=INK, lw=1)
        ax.text(x + 0.7, (top + bottom) / 2, f"loop\niteration {k}:\n{unroll} loads\nin flight\n"
                f"per thread", va="center", fontsize=10)
    ax.text(-6.2, -strides * 1.3 - 0.6,
            f"stride = gridDim.x x {threads} float4; thread t of block b reads the vectors\n"
            f"b x {threads} + t + (u + {unroll}k) x stride, u = 0..{unroll - 1}. "
            "Each row is one pass of the whole grid over memory:\n"
            "a warp's 32 lanes read 512 consecutive bytes; the rest of the input waits for the "
            "next iteration.", fontsize=10, va="top")
    save(fig, "ch3_grid_stride.svg", out)


# ---------------------------------------------------------------------------------------------
# Chapter 4: tiles and partials in a fixed order.

def tile_size(n: int, c: dict) -> int:
    """Chapter 4 version 2's tile_size(n): a function of n only."""
    tile = c["kStep"]
    while tile < c["kMaxTile"] and -(-n // tile) > c["kWantedTiles"]:
        tile *= 2
    return tile


def ch4_fixed_order(out, tiles=12):
    c = constants("ch4_two_pass/v2_deterministic_tiles.cu")
    tile = tile_size(tiles * c["kStep"], c)
    n = tiles * tile
    warps_per_block = c["kThreads"] // WARP
    fig, ax = canvas(WIDTH, 5.4, (-0.2, tiles * 2 + 0.1), (-11.6, 2.3))
    ax.text(-0.2, 2.3, f"n = {n:,}: tile_size(n) = {tile} elements, so {tiles} tiles, whatever "
            "the grid", fontsize=11, fontweight="bold", va="top")
    palette = plt.get_cmap("tab20")
    for row, blocks in enumerate((1, 2)):
        warps = blocks * warps_per_block
        y = -row * 2.7
        ax.text(-0.1, y + 0.9, f"grid of {blocks} block{'s' if blocks > 1 else ''} ({warps} warps):"
                f" warp w sums tiles w, w + {warps}, ..., each alone, in a fixed order",
                va="bottom", fontsize=10)
        for t in range(tiles):
            w = t % warps
            r, g, b, _ = palette(w % 20)
            box(ax, t * 2, y, 1.9, 0.8, f"warp {w}", face=palette(w % 20), size=MIN_FONT,
                color="white" if 0.3 * r + 0.6 * g + 0.1 * b < 0.5 else INK)  # dark: white text
    y = -5.6
    ax.text(-0.1, y + 0.9, "partials (the same for both grids)", va="bottom", fontsize=10)
    for t in range(tiles):
        box(ax, t * 2, y, 1.9, 0.8, f"p{t}", face=LIGHT, size=10)
        arrow(ax, (t * 2 + 0.95, -2.7), (t * 2 + 0.95, y + 0.8), color=GREY, lw=0.8, scale=6)
    # pass 2: a fixed order over the partials
    y2 = -9.4
    box(ax, tiles - 7, y2, 14, 1.3, "pass 2: one block adds p0, p1, ... in float64,\n"
        "always in the same order", face=ORANGE, color="white", size=10)
    for t in range(tiles):
        arrow(ax, (t * 2 + 0.95, y), (tiles, y2 + 1.3), color=GREY, lw=0.6, scale=6)
    ax.text(-0.2, -10.2, wrap("The grid decides only which warp takes which tile: every "
            "partial, and so every bit of the result, depends on n alone.", 10), fontsize=10,
            va="top")
    save(fig, "ch4_fixed_order.svg", out)


# ---------------------------------------------------------------------------------------------
# Chapter 5: the online softmax's merge, the threads per row.

def ch5_online_merge(out):
    row = [1.0, 3.0, -2.0, 0.5, 4.0, 2.5, -1.0, 1.5]  # any values: the merge is exact
    halves = [row[:4], row[4:]]
    pairs = [(max(h), sum(math.exp(x - max(h)) for x in h)) for h in halves]
    m = max(p[0] for p in pairs)
    total = sum(sb * math.exp(mb - m) for mb, sb in pairs)
    lse = m + math.log(total)
    direct = math.log(sum(math.exp(x) for x in row))
    assert abs(lse - direct) < 1e-12
    fig, ax = canvas(WIDTH, 4.3, (0, 24), (-10.6, 2.4))
    ax.text(0, 2.4, "The online softmax keeps, per part of a row, a pair (m, s):\nits max and "
            "the sum of exp(x - m)", fontsize=11, fontweight="bold", va="top")
    for h, (vals, (mb, sb)) in enumerate(zip(halves, pairs)):
        x0 = h * 12.5 + 0.5
        for k, v in enumerate(vals):
            box(ax, x0 + k * 2.7, -1.2, 2.4, 1.2, f"{v:g}", face=LIGHT, size=10.5)
        box(ax, x0 + 1.5, -4.4, 7.6, 2.0, f"m{'ab'[h]} = {mb:g}\n"
            f"s{'ab'[h]} = {sb:.4f}", face=BLUE, color="white", size=10.5)
        arrow(ax, (x0 + 5.3, -1.2), (x0 + 5.3, -2.4), color=GREY)
        arrow(ax, (x0 + 5.3, -4.4), (12, -5.6), color=GREY)
    box(ax, 3, -8.6, 18, 3.0, f"m = max(ma, mb) = {m:g}\n"
        f"s = sa exp(ma - m) + sb exp(mb - m) = {total:.4f}\n"
        f"lse = m + log s = {lse:.6f}", face=ORANGE, color="white", size=10.5)
    ax.text(12, -9.2, f"the same as log(sum(exp(x))) over the row: {direct:.6f}.\nNo part is "
            "read twice, and the pairs merge in any grouping.", ha="center", fontsize=10,
            va="top")
    save(fig, "ch5_online_merge.svg", out)


def threads_per_row(C: int, c: dict, vec: int = 4) -> tuple[int, str]:
    """Chapter 5 version 3's launch_rows for fp32 (vec = 4): (threads per row, path)."""
    if C % vec == 0 and C <= 32 * 32:
        tpr = 1
        while tpr < 32 and C > 32 * tpr:
            tpr *= 2
        return tpr, "registers"
    if C % vec == 0 and C <= 128 * 32:
        return 128, "registers"
    if C <= c["kShortLoads"]:
        return 1, "one value per load"
    if C <= 32 * c["kShortLoads"]:
        return 32, "one value per load"
    return c["kStreamThreads"], "streaming"


def ch5_threads_per_row(out):
    c = constants("ch5_cross_entropy/v3_fused_rows.cu")
    fig, ax = plt.subplots(figsize=(WIDTH, 5.4))
    sizes = sorted({2 ** k for k in range(2, 18)} | {3 * 2 ** k for k in range(1, 16)})
    for vec_ok, color, label in ((True, BLUE, "rows a multiple of 16 bytes (C % 4 == 0)"),
                                 (False, ORANGE, "other lengths (C % 4 != 0)")):
        xs = [C for C in sizes if (C % 4 == 0) == vec_ok]
        if not vec_ok:
            xs = sorted({2 ** k + 1 for k in range(2, 18)} | {10, 50257})
        ys = [threads_per_row(C, c)[0] for C in xs]
        ax.step(xs, ys, where="post", color=color, lw=2, label=label, marker="o", ms=4)
    ax.tick_params(labelsize=10)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_yticks([1, 2, 4, 8, 16, 32, 128, 512], ["1", "2", "4", "8", "16", "32 (a warp)",
                                                   "128", "512"])
    ticks = [4 ** k for k in range(1, 9)]  # plain labels: 2^k draws its exponent under MIN_FONT
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    ax.set_xlabel("classes per row, C (fp32)")
    ax.set_ylabel("threads per row")
    ax.set_title("Chapter 5, version 3: as few threads per row as hold it,\n32 values each")
    # where each label sits (data coordinates, its alignment): in the empty corners of the steps
    places = {8: (4.5, 110, "left"), 100: (150, 1.45, "left"), 1000: (1400, 9, "left"),
              4096: (1800, 62, "left"), 128256: (125000, 1250, "right")}
    for C, (tx, ty, ha) in places.items():
        tpr, path = threads_per_row(C, c)
        block = tpr if tpr > 32 else c["kGroupThreads"]
        ax.annotate(f"C = {C}: {tpr} thread{'s' if tpr > 1 else ''}, {path}\n"
                    f"{block // tpr} row{'s' if block // tpr > 1 else ''} per block of {block}",
                    (C, tpr), xytext=(tx, ty), ha=ha, va="center", fontsize=9.5, arrowprops={"arrowstyle": "-", "color": GREY})
    ax.legend(loc="upper left", fontsize=10, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_ylim(0.6, 3000)
    save(fig, "ch5_threads_per_row.svg", out)


# ---------------------------------------------------------------------------------------------
# Chapter 7: the cluster, the LM head's chunks.

def ch7_cluster(out, classes=128256, elem=2):
    c = constants("ch7_llm_cross_entropy/v4_cluster_rows.cu")
    row_bytes = classes * elem
    n = min(-(-row_bytes // c["kSliceBytes"]), c["kMaxCluster"])
    slice_bytes = -(-(row_bytes // 16) // n) * 16
    fig, ax = canvas(WIDTH, 6.0, (-0.1, n * 3 + 0.1), (-11.4, 3.0))
    ax.text(-0.1, 3.0, wrap(f"A row of {classes:,} bf16 logits ({row_bytes / 1024:.0f} KiB): a "
            f"cluster of n = ceil({row_bytes} / {c['kSliceBytes']}) = {n} blocks of "
            f"{c['kClusterThreads']} threads", 11, em=0.62), fontsize=11, fontweight="bold", va="top")
    for b in range(n):
        x = b * 3
        box(ax, x, 0.6, 2.9, 0.8, f"slice {b}", face=LIGHT, size=10)
        arrow(ax, (x + 1.45, 0.6), (x + 1.45, -0.4), color=GREY, scale=7)
        box(ax, x + 0.1, -3.6, 2.7, 3.2, f"block {b}\nSM {b}\n\nsmem:\n{slice_bytes / 1024:.1f} KiB",
            face="#f6f6f6", size=MIN_FONT)
        box(ax, x + 0.1, -5.0, 2.7, 1.0, f"m{b}, s{b}", face=BLUE, color="white", size=10)
        arrow(ax, (x + 1.45, -5.0), (n * 1.5, -6.8), color=ORANGE, lw=0.8, scale=7)
    box(ax, 0, -9.0, n * 3, 2.2, "cluster barrier; then every warp of every block reads\n"
        f"the {n} pairs through DSMEM: m = max mb,  s = sum sb exp(mb - m),\n"
        "lse = m + log s (the same order in every block)", face=ORANGE, color="white", size=10)
    ax.text(-0.1, -9.6, wrap(f"cp.async copies each slice ({slice_bytes} B = the row / {n}, "
            "rounded to 16 B) into its block's shared memory; the gradient of the slice is then "
            "written from there: the logits are read once, the gradient written once.", 10),
            fontsize=10, va="top")
    save(fig, "ch7_cluster.svg", out)


def ch7_lm_head_chunks(out, tokens=8192, vocab=128256, elem=2):
    from kernels.ops.llm_head import CHUNK_BYTES, default_chunk_rows

    rows = default_chunk_rows(vocab, elem)
    chunks = -(-tokens // rows)
    chunk_mib = rows * vocab * elem / 2**20
    full_gib = tokens * vocab * elem / 2**30
    fig, (ax, bars) = plt.subplots(2, 1, figsize=(WIDTH, 6.8),
                                   gridspec_kw={"height_ratios": [1.6, 1], "hspace": 0.35})
    ax.set_xlim(-0.2, 17.6)
    ax.set_ylim(-chunks - 1.0, 1.0)
    ax.set_axis_off()
    ax.set_title(f"{tokens} tokens in {chunks} chunks of {rows} rows (V = {vocab:,}, bf16)")
    for k in range(chunks):
        y = -k - 0.9
        box(ax, 0, y, 4.4, 0.8, f"tokens {k * rows}-{(k + 1) * rows - 1}", size=10,
            face=BLUE if k == 2 else LIGHT, color="white" if k == 2 else INK)
    ax.text(2.2, 0.3, "hidden", ha="center", fontsize=10.5)
    steps = [f"1. logits = hidden[chunk] @ W.T\ninto one scratch buffer of {chunk_mib:.1f} MiB",
             "2. chapter 7's kernel: loss, and dlogits\nwritten over the logits",
             "3. grad_W += dlogits.T @ hidden[chunk]\ngrad_hidden[chunk] = dlogits @ W"]
    for j, text in enumerate(steps):
        box(ax, 5.6, -2.2 - j * 2.4, 11.9, 1.9, text, face="#f6f6f6", size=10.5)
    arrow(ax, (4.45, -2.5), (5.55, -1.25), color=BLUE, lw=1.5)
    ax.text(5.6, -chunks - 0.6, "then the next chunk reuses the same buffer", fontsize=10.5,
            style="italic")
    labels = ["all logits", "one chunk"]
    values = [full_gib * 1024, chunk_mib]
    bars.barh(labels, values, color=[ORANGE, GREEN])
    for y, v in enumerate(values):
        bars.text(v + values[0] * 0.02, y, f"{v / 1024:.2f} GiB" if v > 1024 else f"{v:.1f} MiB",
                  va="center", fontsize=10.5)
    bars.set_xlim(0, values[0] * 1.2)
    bars.set_xlabel("memory for the logits, MiB")
    bars.set_title(f"chunk_rows: the most multiples of 128 rows in {CHUNK_BYTES / 2**20:.0f} MiB")
    bars.spines[["top", "right"]].set_visible(False)
    save(fig, "ch7_lm_head_chunks.svg", out)


# ---------------------------------------------------------------------------------------------
# Chapter 8: the vocab-parallel all-reduce.

def ch8_vocab_parallel(out, ranks=2, vocab=128256, elem=2):
    shard = vocab // ranks
    floats = {"MAX": 1, "SUM": 2}  # kernels/ops/vocab_parallel.py row_log_sum_exp, no smoothing
    per_row = 4 * sum(floats.values())
    fig, ax = canvas(WIDTH, 5.0, (-0.1, 24.1), (-10.1, 2.8))
    ax.text(-0.1, 2.8, f"Row i of the logits, split by vocabulary over {ranks} GPUs:\n"
            f"{shard:,} columns ({shard * elem / 1024:.0f} KiB of bf16) each", fontsize=11,
            fontweight="bold", va="top")
    for r in range(ranks):
        x = r * 12.3
        box(ax, x, 0, 11.7, 0.9, f"rank {r}: columns {r * shard:,} - {(r + 1) * shard - 1:,}",
            face=LIGHT, size=10)
        box(ax, x, -3.4, 11.7, 2.4, f"shard_stats: one read of the shard\n"
            f"m{r} = max,  S{r} = sum exp(x - m{r}),\nx_t (or 0)", face=BLUE, color="white",
            size=10)
        arrow(ax, (x + 5.85, 0), (x + 5.85, -1.0), color=GREY)
        arrow(ax, (x + 5.85, -3.4), (12, -4.6), color=GREY)
    box(ax, 0, -7.0, 24, 2.4, f"all-reduce MAX of {floats['MAX']} float: M = max m_r\n"
        f"all-reduce SUM of {floats['SUM']} floats: S_r exp(m_r - M), x_t\n(3 with label "
        "smoothing: + sum of x)", face=ORANGE, color="white", size=10)
    ax.text(12, -7.5, f"{per_row} bytes per row cross the GPUs (16 with smoothing),\nnot "
            f"the row's {vocab * elem:,} bytes of logits", ha="center", va="top",
            fontsize=10.5, fontweight="bold")
    ax.text(12, -9.1, wrap("lse = M + log(sum); then each rank writes the gradient of its own "
            "columns, with no more communication", 10), ha="center", va="top", fontsize=10)
    save(fig, "ch8_vocab_parallel.svg", out)


DIAGRAMS = [ch2_coalesced, ch2_atomics_queue, ch2_shuffle, ch3_tree_v1,
            ch3_tree_v2, ch3_tree_v3, ch3_grid_stride, ch4_fixed_order, ch5_online_merge,
            ch5_threads_per_row, ch7_cluster, ch7_lm_head_chunks, ch8_vocab_parallel]


def main(argv=None):
    global PREVIEW
    args = list(sys.argv[1:] if argv is None else argv)
    if "--png" in args:
        i = args.index("--png")
        PREVIEW = Path(args[i + 1])
        PREVIEW.mkdir(parents=True, exist_ok=True)
        del args[i:i + 2]
    out = Path(args[0]) if args else OUT
    for draw in DIAGRAMS:
        draw(out)
        print("drew", draw.__name__)


if __name__ == "__main__":
    main()
