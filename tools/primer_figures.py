"""The CUDA primer's diagrams (book/cuda_primer.md), written as SVG from this script.

    python tools/primer_figures.py     # rewrites book/images/primer_*.svg

Schematics, not measurements: they hold no measured number. The only figures with units are
the H100 SXM's sizes from NVIDIA's datasheet and its Hopper architecture whitepaper (132 SMs,
256 KB of L1 and shared memory per SM of which up to 228 KB shared, 256 KB of registers per SM,
50 MB of L2, 80 GB of HBM3 at 3.35 TB/s), and the primer's caption says so. Drawn by code so
that a change is a reviewed diff and every figure keeps the book's fonts and colours; each is at
most 760 px wide, so that it shows at its drawn size in the 819 px column at 1280 px
(tests/test_book.py).
"""

from __future__ import annotations

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "book" / "images"
BLUE, LIGHT, GREY, ORANGE, PALE = "#1f5fbf", "#e8f0fb", "#555555", "#d9661f", "#fdf0e6"
FONT = 'font-family="DejaVu Sans, Arial, sans-serif" font-size="13"'


def svg(width: int, height: int, title: str, body: list[str]) -> str:
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" {FONT}>',
        f"  <title>{title}</title>",
        f'  <rect width="{width}" height="{height}" fill="#ffffff"/>',
        *("  " + line for line in body),
        "</svg>", ""])


def rect(x, y, w, h, fill=LIGHT, stroke=BLUE, rx=3, width=1.2):
    return (f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="{rx}" fill="{fill}" '
            f'stroke="{stroke}" stroke-width="{width}"/>')


def text(x, y, s, anchor="start", fill="#222222", size=None, weight=None):
    extra = (f' font-size="{size}"' if size else "") + (f' font-weight="{weight}"' if weight else "")
    return f'<text x="{x}" y="{y}" text-anchor="{anchor}" fill="{fill}"{extra}>{s}</text>'


def arrow(x1, y1, x2, y2, color=GREY, dash=False):
    d = ' stroke-dasharray="4 3"' if dash else ""
    return (f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="{color}" stroke-width="1.5"'
            f'{d} marker-end="url(#head)"/>')


HEAD = ('<defs><marker id="head" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{GREY}"/></marker></defs>')


def hierarchy() -> str:
    """Grid -> blocks -> warps -> threads (what you write), beside the SMs that run the blocks."""
    b = [HEAD, text(20, 24, "What you launch", weight="bold"),
         text(420, 24, "What runs it (H100 SXM)", weight="bold")]
    # the grid: 4 x 3 blocks
    b.append(rect(20, 40, 330, 150, fill="#ffffff", stroke=GREY))
    b.append(text(30, 58, "grid: all the blocks of one launch", fill=GREY))
    for r in range(3):
        for c in range(4):
            fill = PALE if (r, c) == (0, 0) else LIGHT
            stroke = ORANGE if (r, c) == (0, 0) else BLUE
            b.append(rect(32 + c * 78, 68 + r * 38, 68, 30, fill=fill, stroke=stroke))
            b.append(text(66 + c * 78, 88 + r * 38, f"block {r * 4 + c}", "middle", size=11))
    # one block, opened: warps of 32 threads
    b.append(arrow(60, 98, 60, 212))
    b.append(rect(20, 215, 330, 150, fill=PALE, stroke=ORANGE))
    b.append(text(30, 233, "block: up to 1024 threads, on one SM; they share", fill=GREY))
    b.append(text(30, 249, "its shared memory and meet at __syncthreads()", fill=GREY))
    for w in range(4):
        y = 260 + w * 24
        b.append(text(30, y + 13, f"warp {w}", size=11))
        for t in range(32):
            fill = BLUE if w == 0 and t == 0 else "#9db8e3"
            b.append(f'<rect x="{82 + t * 8}" y="{y + 3}" width="6" height="12" fill="{fill}"/>')
    b.append(text(30, 360, "warp: 32 threads that issue each instruction together", size=11))
    # the GPU: SMs, L2, HBM
    b.append(rect(410, 40, 330, 240, fill="#ffffff", stroke=GREY))
    for r in range(2):
        for c in range(3):
            x, y = 422 + c * 106, 52 + r * 104
            b.append(rect(x, y, 96, 94))
            b.append(text(x + 48, y + 16, "SM", "middle", weight="bold"))
            b.append(rect(x + 6, y + 24, 84, 18, fill="#ffffff"))
            b.append(text(x + 48, y + 37, "registers", "middle", size=11))
            b.append(rect(x + 6, y + 46, 84, 30, fill="#ffffff"))
            b.append(text(x + 48, y + 59, "shared mem", "middle", size=11))
            b.append(text(x + 48, y + 72, "+ L1", "middle", size=11))
    b.append(text(575, 270, "... 132 SMs", "middle", fill=GREY))
    b.append(rect(410, 290, 330, 30, fill=LIGHT))
    b.append(text(575, 310, "L2 cache, shared by all SMs (50 MB)", "middle"))
    b.append(rect(410, 335, 330, 30, fill="#dfe6ef", stroke=GREY))
    b.append(text(575, 355, "HBM: the GPU's memory (80 GB, 3.35 TB/s)", "middle"))
    b.append(arrow(350, 100, 420, 100, color=ORANGE))
    b.append(text(385, 92, "each", "middle", size=11, fill=ORANGE))
    b.append(text(385, 120, "block", "middle", size=11, fill=ORANGE))
    b.append(text(385, 133, "to an SM", "middle", size=11, fill=ORANGE))
    return svg(760, 380, "Grid, block, warp and thread beside the GPU's SMs, L2 and HBM", b)


def memory() -> str:
    """The memory levels a kernel's data passes, nearest first."""
    rows = [("registers", "each thread's own variables", "256 KB per SM", "fastest", "#cfe0f7"),
            ("shared memory / L1", "one block's scratchpad; a cache", "256 KB per SM", "", "#dbe7f8"),
            ("L2 cache", "shared by all SMs", "50 MB", "", "#e8f0fb"),
            ("HBM (global memory)", "every tensor lives here", "80 GB, 3.35 TB/s", "",
             "#f2f5fa")]
    b = [HEAD]
    for i, (name, what, size, speed, fill) in enumerate(rows):
        y = 20 + i * 52
        inset = (3 - i) * 40  # a pyramid: the nearest level is the smallest
        b.append(rect(20 + inset, y, 560 - 2 * inset, 42, fill=fill))
        b.append(text(300, y + 18, name, "middle", weight="bold"))
        b.append(text(300, y + 35, what, "middle", size=11, fill=GREY))
        b.append(text(600, y + 26, size, size=12))
        if speed:
            b.append(text(20 + inset - 8, y + 26, speed, "end", size=11, fill=GREY))
    b.append(text(20, 230, "nearest, smallest and fastest at the top; every tensor starts at the "
                  "bottom", size=11, fill=GREY))
    b.append(arrow(740, 30, 740, 210))
    b.append(text(735, 230, "larger, further, slower", "end", size=11, fill=GREY))
    return svg(760, 245, "Memory levels: registers, shared memory and L1, L2, HBM", b)


def coalescing() -> str:
    """A warp's 32 loads: side by side (4 sectors of 32 bytes) against strided (32 sectors)."""
    b = [HEAD]
    for panel, (label, stride) in enumerate([("coalesced: thread i reads element i", 1),
                                             ("strided: thread i reads element 8 i", 8)]):
        y0 = 20 + panel * 150
        b.append(text(20, y0 + 12, label, weight="bold"))
        b.append(text(20, y0 + 40, "warp", size=11))
        for t in range(32):
            b.append(f'<rect x="{80 + t * 20}" y="{y0 + 28}" width="16" height="16" fill="#9db8e3"/>')
        b.append(text(20, y0 + 116, "memory", size=11))
        cells, per_sector = 32, 8  # 8 float32 per 32-byte sector
        used = {(t * stride) for t in range(32)}
        for k in range(cells):
            x = 80 + k * 20
            fetched = any(e // per_sector == k // per_sector for e in used if e < cells)
            fill = "#f2b48a" if k in used else PALE if fetched else "#f4f4f4"
            b.append(f'<rect x="{x}" y="{y0 + 104}" width="16" height="16" fill="{fill}" '
                     f'stroke="#bbbbbb"/>')
        for s in range(cells // per_sector):
            x = 80 + s * per_sector * 20
            b.append(f'<rect x="{x - 2}" y="{y0 + 101}" width="{per_sector * 20}" height="22" '
                     f'fill="none" stroke="{ORANGE}"/>')
        for t in range(32):
            e = t * stride
            if e < cells:
                b.append(f'<line x1="{88 + t * 20}" y1="{y0 + 45}" x2="{88 + e * 20}" '
                         f'y2="{y0 + 102}" stroke="{BLUE}" stroke-width="1"/>')
        if stride == 1:
            note = "32 x 4 bytes = 128 bytes: 4 sectors of 32 bytes, all of them used"
        else:
            note = ("only 4 of 32 threads shown landing here; the warp touches 32 sectors "
                    "(1024 bytes) for 128 useful")
        b.append(text(80, y0 + 140, note, size=12, fill=GREY))
    return svg(760, 320, "Coalesced and strided loads of one warp", b)


def littles_law() -> str:
    """Bytes in flight = bandwidth x latency: loads issued every cycle, each returning L later."""
    b = [HEAD, text(20, 22, "loads in flight between the SMs and HBM", weight="bold")]
    b.append(rect(20, 40, 90, 120, fill=LIGHT))
    b.append(text(65, 104, "SMs", "middle", weight="bold"))
    b.append(rect(620, 40, 120, 120, fill="#dfe6ef", stroke=GREY))
    b.append(text(680, 104, "HBM", "middle", weight="bold"))
    for i in range(10):
        x = 130 + i * 47
        b.append(rect(x, 70, 38, 24, fill=PALE, stroke=ORANGE))
        b.append(rect(x, 106, 38, 24, fill="#ffffff", stroke="#bbbbbb"))
    b.append(arrow(120, 62, 610, 62))
    b.append(text(365, 56, "requests", "middle", size=11, fill=GREY))
    b.append(arrow(610, 142, 120, 142))
    b.append(text(365, 158, "data returns one latency L later", "middle", size=11, fill=GREY))
    b.append(text(380, 196, "bytes in flight  =  bandwidth W  ×  latency L", "middle", size=15,
                  weight="bold"))
    b.append(text(380, 218, "too few in flight, and the memory idles: the kernel runs below W",
                  "middle", size=12, fill=GREY))
    return svg(760, 230, "Little's law: bytes in flight equal bandwidth times latency", b)


def launch() -> str:
    """A timeline: the host enqueues kernels; a small kernel is shorter than its launch."""
    b = [HEAD]
    b.append(text(20, 40, "CPU", weight="bold"))
    b.append(text(20, 100, "GPU", weight="bold"))
    for i in range(4):
        x = 70 + i * 160
        b.append(rect(x, 24, 120, 24, fill=PALE, stroke=ORANGE))
        b.append(text(x + 60, 41, "launch", "middle", size=11))
        b.append(arrow(x + 120, 48, x + 130, 82, dash=True))
        b.append(rect(x + 130, 84, 22, 24))
    b.append(text(70, 140, "small kernels: the GPU waits for the CPU between them "
                  "(the launch floor)", size=12, fill=GREY))
    b.append(text(70, 158, "fix: fewer, fused kernels, or CUDA graphs; large kernels hide "
                  "the launch behind the work", size=12, fill=GREY))
    return svg(760, 170, "Launch overhead: the GPU idles between small kernels", b)


def atomics() -> str:
    """Many threads adding into one address are serialised; a tree in a block needs one atomic."""
    b = [HEAD, text(20, 20, "one atomic per thread", weight="bold"),
         text(400, 20, "sum in the block, then one atomic", weight="bold")]
    for t in range(8):
        x = 30 + t * 40
        b.append(f'<circle cx="{x + 10}" cy="48" r="10" fill="#9db8e3"/>')
        b.append(arrow(x + 10, 60, 170, 138))
    b.append(rect(130, 140, 80, 28, fill=PALE, stroke=ORANGE))
    b.append(text(170, 159, "sum", "middle"))
    b.append(text(170, 190, "the adds queue at one address", "middle", size=12, fill=GREY))
    level = [410 + t * 40 for t in range(8)]
    y = 48
    for t in level:
        b.append(f'<circle cx="{t + 10}" cy="{y}" r="10" fill="#9db8e3"/>')
    while len(level) > 1:
        nxt = [(level[i] + level[i + 1]) / 2 for i in range(0, len(level), 2)]
        for i, x in enumerate(nxt):
            b.append(f'<line x1="{level[2 * i] + 10}" y1="{y + 10}" x2="{x + 10}" y2="{y + 22}" '
                     f'stroke="{GREY}"/>')
            b.append(f'<line x1="{level[2 * i + 1] + 10}" y1="{y + 10}" x2="{x + 10}" '
                     f'y2="{y + 22}" stroke="{GREY}"/>')
            b.append(f'<circle cx="{x + 10}" cy="{y + 30}" r="8" fill="{BLUE}"/>')
        level, y = nxt, y + 30
    b.append(arrow(level[0] + 10, y + 10, level[0] + 10, 138))
    b.append(rect(level[0] - 30, 140, 80, 28, fill=PALE, stroke=ORANGE))
    b.append(text(level[0] + 10, 159, "sum", "middle"))
    b.append(text(level[0] + 10, 190, "log2(n) steps in the block, one atomic", "middle", size=12,
                  fill=GREY))
    return svg(760, 200, "Atomics: one per thread against one per block after a tree", b)


FIGURES = {"primer_hierarchy.svg": hierarchy, "primer_memory.svg": memory,
           "primer_coalescing.svg": coalescing, "primer_littles_law.svg": littles_law,
           "primer_launch.svg": launch, "primer_atomics.svg": atomics}


def main() -> None:
    for name, draw in FIGURES.items():
        (OUT / name).write_text(draw())
        print(OUT / name)


if __name__ == "__main__":
    main()
