"""What :func:`~.evaluate.evaluate` found: a :class:`Result` per ModelNew and problem, its one-line
verdict, its CSV row, and the tables and KernelBench's fast_p over several.
"""

from __future__ import annotations

import math
import signal
from dataclasses import dataclass, field

from .. import bench

@dataclass
class Result:
    """What :func:`evaluate` found for one ModelNew on one problem."""

    problem: int
    name: str
    entry: str
    kernelbench_passed: bool = False  # KernelBench's own correctness rules
    failures: list = field(default_factory=list)  # (check, why), in the order found
    trials_passed: int = 0
    trials: int = 0
    max_abs_diff: float = math.nan
    timings: dict = field(default_factory=dict)  # "ModelNew", "eager", "torch.compile" -> Timing
    gpu_only: dict = field(default_factory=dict)  # the same programs -> GPU-only ms (queued host)
    notes: list = field(default_factory=list)
    secret_seed: int = 0  # the seed of the coverage, offset and timed inputs (to replay a failure)
    bytes: int = 0
    gpu: str = ""

    @property
    def passed(self) -> bool:
        return self.kernelbench_passed and not self.failures

    @property
    def reason(self) -> str:
        if not self.failures:
            return ""
        check, why = self.failures[0]
        others = [c.split(" (")[0] for c, _ in self.failures[1:]]
        return f"{check}: {why}" + (f" [also failed: {', '.join(others)}]" if others else "")

    def ms(self, program: str = "ModelNew", statistic: str = "mean") -> float:
        """KernelBench's time (the mean over the timed calls), or another of Timing's statistics."""
        timing = self.timings.get(program)
        return getattr(timing, statistic) if timing else math.nan

    def gpu_only_ms(self, program: str = "ModelNew") -> float:
        return self.gpu_only.get(program, math.nan)

    def speedup(self, baseline: str) -> float:
        return self.ms(baseline) / self.ms() if baseline in self.timings and self.timings.get("ModelNew") else math.nan

    @property
    def gbps(self) -> float:
        return bench.gbps(self.bytes, self.ms()) if self.timings.get("ModelNew") else math.nan

    @property
    def verdict(self) -> str:
        """One line for a learner: PASS or FAIL, the problem, the entry, and why or how fast."""
        head = f"{'PASS' if self.passed else 'FAIL'}  {self.problem:>3} {self.name.split('_', 1)[1]:<17} {self.entry}: "
        if not self.passed:
            tail = "" if not self.kernelbench_passed else " (KernelBench's own rules: PASS)"
            return head + self.reason + tail
        text = f"{self.trials_passed}/{self.trials} trials and every check passed"
        if self.timings.get("ModelNew"):
            text += f", {self.ms():.3f} ms (median {self.ms(statistic='median'):.3f})"
            for baseline in ("eager", "torch.compile"):
                if baseline in self.timings:
                    text += f", {self.speedup(baseline):.2f}x {baseline}"
        return head + text

    def row(self) -> dict:
        """This result as a CSV row (kernels.results.save_table)."""
        def number(x):
            return "" if isinstance(x, float) and math.isnan(x) else f"{x:.6g}"

        return {"gpu": self.gpu, "problem": self.problem, "name": self.name, "entry": self.entry,
                "verdict": "PASS" if self.passed else "FAIL",
                "kernelbench": "PASS" if self.kernelbench_passed else "FAIL",
                "reason": self.reason, "trials": f"{self.trials_passed}/{self.trials}",
                "ms": number(self.ms()), "eager_ms": number(self.ms("eager")),
                "compile_ms": number(self.ms("torch.compile")),
                "median_ms": number(self.ms(statistic="median")),
                "gpu_only_ms": number(self.gpu_only_ms()),
                "eager_gpu_only_ms": number(self.gpu_only_ms("eager")),
                "compile_gpu_only_ms": number(self.gpu_only_ms("torch.compile")),
                "speedup_eager": number(self.speedup("eager")),
                "speedup_compile": number(self.speedup("torch.compile")),
                "gbps": number(self.gbps), "max_abs_diff": number(self.max_abs_diff),
                "notes": "; ".join(self.notes)}


def fast_p(results, p: float, baseline: str = "eager") -> float:
    """KernelBench's fast_p: the fraction of problems whose ModelNew is correct and more than
    ``p`` times faster than ``baseline`` ("eager" or "torch.compile"); Results or CSV rows."""
    column = {"eager": "speedup_eager", "torch.compile": "speedup_compile"}[baseline]
    found = [r.row() if isinstance(r, Result) else r for r in results]
    fast = [r for r in found if r["kernelbench"] == "PASS" and r[column] not in ("", None)
            and float(r[column]) > p]
    return len(fast) / len(found) if found else math.nan


def rows(results) -> list[dict]:
    return [r.row() for r in results]


def table(results) -> str:
    """A Markdown table of results (Result objects, or rows read back with
    ``kernels.results.read_table``), with the reason of every failure under it."""
    def cell(value, fmt):
        if value in ("", None) or (isinstance(value, float) and math.isnan(value)):
            return "–"
        return fmt.format(float(value))

    lines = ["| problem | entry | verdict | ModelNew ms | eager ms | torch.compile ms "
             "| vs eager | vs compile | GB/s |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    reasons = []
    for r in results:
        r = r.row() if isinstance(r, Result) else r
        verdict = r["verdict"] if r["verdict"] == "PASS" else f"FAIL ({len(reasons) + 1})"
        if r["verdict"] != "PASS":
            reasons.append(f"({len(reasons) + 1}) {r['problem']}, {r['entry']}: {r['reason']}")
        lines.append(f"| {r['problem']} {str(r['name']).split('_', 1)[-1]} | {r['entry']} | {verdict} "
                     f"| {cell(r['ms'], '{:.3f}')} | {cell(r['eager_ms'], '{:.3f}')} "
                     f"| {cell(r['compile_ms'], '{:.3f}')} | {cell(r['speedup_eager'], '{:.2f}x')} "
                     f"| {cell(r['speedup_compile'], '{:.2f}x')} | {cell(r['gbps'], '{:.0f}')} |")
    return "\n".join(lines + ([""] + reasons if reasons else []))


def crash_reason(code: int, err: str) -> str:
    """Why a program's process ended before a verdict (exit status or signal, and the last line
    it wrote to stderr that is not a warning): the FAIL reason of both isolated validators."""
    if code < 0:
        how = f"killed by {signal.Signals(-code).name}"
    else:
        how = f"exit status {code}"
    lines = [line.strip() for line in err.strip().splitlines() if line.strip()]
    last = [line for line in lines if "Warning" not in line][-1:] or ["no message"]
    return f"the program's process ended ({how}) before a verdict: {last[0][:200]}"
