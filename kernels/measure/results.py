"""Benchmark results as data: one CSV per chapter under ``book/results/``.

Every row is one measurement with the columns of :data:`COLUMNS`. Notebooks write these files
when they measure and read them back to plot and tabulate, so the book's tables come from data,
and tests and reviewers read the same files.
"""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

# The measurements the book publishes (committed with the notebooks that made them).
PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "book" / "results"
# $KERNELS_RESULTS_DIR redirects the files, so that a validation run (pytest --nbval on a GPU)
# never overwrites the published measurements.
RESULTS_DIR = Path(os.environ.get("KERNELS_RESULTS_DIR") or PUBLISHED_DIR)
COLUMNS = ("gpu", "chapter", "loss", "provider", "shape", "bytes", "ms", "gbps", "peak_gbps")


def shape_text(shape) -> str:
    return "x".join(str(int(d)) for d in shape)


def parse_shape(text: str) -> tuple:
    return tuple(int(d) for d in text.split("x"))


def rows_from(measurements, gpu: str, chapter: str, peak_gbps: float) -> list[dict]:
    return [{"gpu": gpu, "chapter": chapter, "loss": m.loss, "provider": m.provider,
             "shape": shape_text(m.shape), "bytes": m.bytes, "ms": f"{m.ms:.6g}",
             "gbps": f"{m.gbps:.6g}", "peak_gbps": f"{peak_gbps:.6g}"} for m in measurements]


def results_path(chapter: str) -> Path:
    return RESULTS_DIR / f"{chapter}.csv"


def save(rows: list[dict], chapter: str, path: Path | None = None) -> Path:
    """Write a chapter's rows, replacing the file (a chapter is always measured in one run)."""
    path = path or results_path(chapter)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_rows(chapter: str, path: Path | None = None) -> list[dict]:
    """Read a chapter's rows (written by :func:`save`) with numbers as numbers and shapes as
    tuples."""
    with open(path or results_path(chapter), newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["shape"] = parse_shape(row["shape"])
        row["bytes"] = int(row["bytes"])
        for key in ("ms", "gbps", "peak_gbps"):
            row[key] = float(row[key])
    return rows


def save_json(data, name: str) -> Path:
    """Write ``data`` (a run that tables cannot hold: nested results, printed lines) to
    ``<results>/<name>.json``."""
    path = RESULTS_DIR / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def read_published_json(name: str):
    """What :func:`save_json` wrote under ``book/results/``, the published copy, even while a
    validation run redirects the results (a run that this machine cannot redo is read from
    there)."""
    return json.loads((PUBLISHED_DIR / f"{name}.json").read_text())


def save_table(rows: list[dict], name: str) -> Path:
    """Write rows of any columns (those of the first row) to ``<results>/<name>.csv``."""
    path = results_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]) if rows else [])
        writer.writeheader()
        writer.writerows(rows)
    return path


def read_table(name: str, path: Path | None = None) -> list[dict]:
    """Rows written by :func:`save_table`, with every value that reads as a number a number
    (``path``: another file than this run's, the published copy say)."""
    def number(text):
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                pass
        return text

    with open(path or results_path(name), newline="") as handle:
        return [{k: number(v) for k, v in row.items()} for row in csv.DictReader(handle)]


def select(rows, **where) -> list[dict]:
    return [r for r in rows if all(r[k] == v for k, v in where.items())]


def markdown_table(rows, providers, loss: str) -> str:
    """A Markdown table: one line per size, GB/s and % of peak per provider."""
    rows = select(rows, loss=loss)
    shapes = sorted({r["shape"] for r in rows}, key=math.prod)
    head = ["elements"] + [f"{p} GB/s (% peak)" for p in providers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for shape in shapes:
        cells = [f"{math.prod(shape):,}"]
        for provider in providers:
            found = select(rows, shape=shape, provider=provider)
            if found:
                r = found[0]
                cells.append(f"{r['gbps']:.0f} ({100 * r['gbps'] / r['peak_gbps']:.0f}%)")
            else:
                cells.append("–")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_table(rows, providers, loss: str, baseline: str) -> str:
    """A Markdown table: one line per size, each provider's time divided by ``baseline``'s
    (below 1.00: faster than the baseline), with the baseline's time in µs."""
    rows = select(rows, loss=loss)
    shapes = sorted({r["shape"] for r in rows}, key=math.prod)
    lines = ["| elements | " + baseline + " µs | " + " | ".join(f"{p} / {baseline}" for p in providers)
             + " |", "|" + "---|" * (len(providers) + 2)]
    for shape in shapes:
        ms = {r["provider"]: r["ms"] for r in select(rows, shape=shape)}
        if baseline not in ms:
            continue
        cells = [f"{math.prod(shape):,}", f"{1e3 * ms[baseline]:.1f}"]
        cells += [f"{ms[p] / ms[baseline]:.2f}" if p in ms else "–" for p in providers]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup_table(rows, providers, loss: str, shape, baseline: str,
                  changes: dict[str, str] | None = None) -> str:
    """Step and cumulative speed-up of each provider at one shape (a chapter's ladder table).

    The step is against the provider listed before it, so list only a chain of versions, each
    one change on the last. ``changes`` (provider -> that change, in a few words) adds a column.
    """
    rows = select(rows, loss=loss, shape=tuple(shape))
    by_provider = {r["provider"]: r for r in rows}
    head = ["version"] + (["change"] if changes else []) + [
        "time (ms)", "GB/s", "% of peak", "step speed-up", "vs " + baseline]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    previous = None
    base = by_provider.get(baseline)
    for provider in providers:
        r = by_provider.get(provider)
        if r is None:
            continue
        step = f"{previous['ms'] / r['ms']:.2f}x" if previous else "–"
        versus = f"{base['ms'] / r['ms']:.2f}x" if base else "–"
        change = [changes.get(provider, "")] if changes else []
        cells = [provider] + change + [f"{r['ms']:.4g}", f"{r['gbps']:.0f}",
                                       f"{100 * r['gbps'] / r['peak_gbps']:.0f}%", step, versus]
        lines.append("| " + " | ".join(cells) + " |")
        previous = r
    return "\n".join(lines)
