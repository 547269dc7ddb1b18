"""Look inside a kernel: Nsight Compute's counters, and the machine code the compiler made.

Timing says how fast; these say why. Three views, each a few lines in a chapter:

- :func:`ncu` runs a snippet of Python under Nsight Compute and returns the handful of hardware
  counters that explain a loss kernel (:data:`METRICS`): DRAM throughput against its peak,
  occupancy, registers, L2 hit rate, shared-memory bank conflicts, issue slots and the
  special-function unit (MUFU) that computes ``exp``;
- :func:`sass` disassembles a built kernel (``cuobjdump``): which instructions the GPU runs,
  for example whether a load is 16 bytes wide (``LDG.E.128``) and how many are issued before
  the first one is used;
- :func:`ptx` compiles a kernel file to PTX with chosen flags (``--use_fast_math``), to see what
  a flag does to the code without running it.

And without Nsight: :func:`kernel_times`, each kernel's GPU time in a call from torch.profiler
(``bench.kernel_times`` in the chapters).

The book's page "Profiling a kernel" (book/profiling.md) explains each number.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent.parent
ROOT = KERNELS_DIR.parent

# What each label reads (ncu --query-metrics lists them all), and the factor from ncu's base
# unit to the one shown. Names are those of Hopper and Ampere (nvcc 12-13, ncu 2023-2025).
METRICS = {
    "time (us)": ("gpu__time_duration.sum", 1e-3),  # ns
    "DRAM throughput (% of peak)": ("dram__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    "DRAM bytes read (MB)": ("dram__bytes_read.sum", 1e-6),
    "DRAM bytes written (MB)": ("dram__bytes_write.sum", 1e-6),
    "achieved occupancy (%)": ("sm__warps_active.avg.pct_of_peak_sustained_active", 1),
    "theoretical occupancy (%)": ("sm__maximum_warps_per_active_cycle_pct", 1),
    "registers per thread": ("launch__registers_per_thread", 1),
    "blocks per SM, by registers": ("launch__occupancy_limit_registers", 1),
    "blocks per SM, by shared memory": ("launch__occupancy_limit_shared_mem", 1),
    "L2 hit rate (%)": ("lts__t_sector_hit_rate.pct", 1),
    "shared loads (requests)": ("smsp__inst_executed_op_shared_ld.sum", 1),
    "shared load wavefronts": ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", 1),
    "shared bank conflicts (loads)": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", 1),
    "shared bank conflicts (stores)": ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", 1),
    "issue slots busy (%)": ("sm__inst_issued.avg.pct_of_peak_sustained_active", 1),
    "MUFU pipe, exp (%)": ("sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active", 1),
    "FMA pipe (%)": ("sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active", 1),
    "warp instructions (M)": ("smsp__inst_executed.sum", 1e-6),
    "cycles per issued instruction": ("smsp__average_warp_latency_per_inst_issued.ratio", 1),
    "stalled on memory (cycles per instruction)":
        ("smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", 1),
}
# The sets a chapter asks for most.
MEMORY = ("time (us)", "DRAM throughput (% of peak)", "achieved occupancy (%)",
          "theoretical occupancy (%)", "registers per thread", "L2 hit rate (%)")
LATENCY = ("time (us)", "DRAM throughput (% of peak)", "achieved occupancy (%)",
           "cycles per issued instruction", "stalled on memory (cycles per instruction)")
BANKS = ("shared loads (requests)", "shared load wavefronts", "shared bank conflicts (loads)",
         "shared bank conflicts (stores)")
ISSUE = ("time (us)", "DRAM throughput (% of peak)", "warp instructions (M)",
         "issue slots busy (%)", "MUFU pipe, exp (%)", "FMA pipe (%)")

# --clock-control none: the GPU keeps its own clocks, as in every timing of the course (ncu
# would lock them at base clock, so its times would not match the chapter's).
# --cache-control all: caches are flushed before each replay of the kernel (ncu replays it once
# per group of counters), so every pass starts as cold as the first.
NCU_FLAGS = ("--clock-control", "none", "--cache-control", "all", "--csv", "--page", "raw",
             "--print-units", "base")


@dataclass
class Profile:
    """One row per profiled launch: the kernel's name and the values of the labels asked for."""

    labels: tuple
    rows: list  # [(kernel name, {label: value})]

    def value(self, label: str, launch: int = 0) -> float:
        return self.rows[launch][1][label]

    def table(self, names=None) -> str:
        """A plain-text table: one line per label, one column per launch."""
        names = names or [short_name(name) for name, _ in self.rows]
        width = max(len(label) for label in self.labels)
        columns = [max(10, len(name)) for name in names]
        lines = [" " * width + "  " + "  ".join(n.rjust(c) for n, c in zip(names, columns))]
        for label in self.labels:
            cells = (_format(values[label]).rjust(c) for (_, values), c in zip(self.rows, columns))
            lines.append(label.ljust(width) + "  " + "  ".join(cells))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def _format(value: float) -> str:
    if value != value:  # NaN: the counter does not exist on this GPU
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def short_name(kernel_name: str) -> str:
    """``void vector_grid_stride<MseLoss, true, false>(ReductionArgs, ...)`` -> the name and
    its template arguments, without the return type and the parameters."""
    name = re.sub(r"^void\s+", "", kernel_name)
    depth, out = 0, []
    for char in name:  # cut at the parameter list (the first '(' outside template brackets)
        depth += char == "<"
        depth -= char == ">"
        if char == "(" and depth == 0:
            break
        out.append(char)
    return "".join(out)


def kernel_times(label, fn, args, reps=5) -> dict:
    """Per-kernel GPU time (µs, mean over reps) of fn(*args), from torch.profiler: where time goes.
    Prints a line per kernel and returns ``{kernel name: µs per call}``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn(*args)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn(*args)
        torch.cuda.synchronize()
    events = [event for event in prof.key_averages() if event.device_time_total > 0]
    times = {event.key: event.device_time_total / reps for event in events}
    print("\n".join(kernel_lines(label, times, {e.key: e.count // reps for e in events})))
    return times


def kernel_name(name: str, width: int = 60) -> str:
    """:func:`short_name` cut to ``width``: a profiler's kernel name short enough for a line."""
    return short_name(name).strip()[:width]


def kernel_lines(label: str, times: dict, counts: dict) -> list[str]:
    """:func:`kernel_times`' lines, short enough for a notebook's column: each kernel's
    :func:`kernel_name` ("row_cluster<float>"), µs per call and launches per call."""
    short = {key: kernel_name(key) for key in times}
    width = max((len(name) for name in short.values()), default=0)
    return [f"  {label}: {short[key]:<{width}} {us:8.1f} µs x{counts[key]}"
            for key, us in times.items()]


def _in_toolkit(tool: str) -> Path:
    return Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / tool


def ncu_path() -> str | None:
    """ncu on PATH, else in the CUDA toolkit."""
    found = shutil.which("ncu") or _in_toolkit("ncu")
    return str(found) if Path(found).exists() else None


def parse_raw_csv(text: str, labels) -> list:
    """ncu's ``--csv --page raw --print-units base`` output -> [(kernel name, {label: value})].

    The first row names the columns, the second gives their units, then one row per launch.
    """
    lines = [line for line in text.splitlines() if line.startswith('"')]
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(table) < 3:
        raise RuntimeError("ncu profiled no kernel:\n" + text[-2000:])
    header, launches = table[0], table[2:]
    rows = []
    for launch in launches:
        found = dict(zip(header, launch))
        values = {}
        for label in labels:
            metric, scale = METRICS[label]
            raw = found.get(metric, "").replace(",", "")
            values[label] = float(raw) * scale if raw not in ("", "n/a") else float("nan")
        rows.append((found.get("Kernel Name", "?"), values))
    return rows


def ncu(code: str, kernel: str, labels=MEMORY, launches: int = 1, skip: int = 0,
        timeout: int = 600, marked: bool = False) -> Profile | None:
    """Run ``code`` (Python, in a fresh process at the repository root) under Nsight Compute.

    ``kernel`` is a regular expression on the kernel's name; the first ``skip`` launches that
    match are let through (warm-up: the build, the first call), the next ``launches`` are
    profiled. With ``marked``, only launches between the code's ``torch.cuda.profiler.start()``
    and ``stop()`` count, from any thread (autograd launches the backward from its own): every
    kernel of one training step, whatever their number and names. Returns None, with a message,
    where ``ncu`` is not installed.
    """
    executable = ncu_path()
    if executable is None:
        print("ncu is not installed here: the stored output of this cell comes from the H100.")
        return None
    metrics = ",".join(dict.fromkeys(METRICS[label][0] for label in labels))
    with tempfile.TemporaryDirectory() as scratch:
        log = Path(scratch) / "ncu.csv"
        command = [executable, *NCU_FLAGS, "--metrics", metrics, "-k", f"regex:{kernel}",
                   "--launch-skip", str(skip), "--launch-count", str(launches),
                   *(("--profile-from-start", "off") if marked else ()),
                   "--log-file", str(log), sys.executable, "-c", code]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
        run = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, env=env,
                             timeout=timeout)
        text = log.read_text() if log.exists() else ""
    if run.returncode != 0 or not text:
        raise RuntimeError(f"ncu failed ({run.returncode}):\n{run.stderr[-3000:]}\n{text[-2000:]}")
    return Profile(tuple(labels), parse_raw_csv(text, labels))


# --- machine code -------------------------------------------------------------------------------

def cuobjdump_path() -> str | None:
    """cuobjdump of the CUDA toolkit, else the copy Triton ships with PyTorch."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [_in_toolkit("cuobjdump")]
    try:
        import triton

        candidates.append(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")
    except ImportError:
        pass
    return next((str(p) for p in candidates if p.exists()), None)


def library_of(kernel) -> Path:
    """The shared library a :class:`kernels.Kernel` was loaded from."""
    import torch

    for path in torch.ops.loaded_libraries:
        if Path(path).name == f"{kernel.name}.so":
            return Path(path)
    raise FileNotFoundError(f"no loaded library for {kernel.source}")


# One instruction of cuobjdump's listing: /*0230*/  @!P0 LDG.E.128 R8, desc[UR8][R8.64] ;
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?[A-Z][A-Z0-9_.]*[^;]*);")
FUNCTION = re.compile(r"^\s*Function : (\S+)", re.MULTILINE)


def functions(listing: str) -> dict[str, list[str]]:
    """cuobjdump -sass text -> {mangled function name: its instructions, in order}."""
    found = {}
    marks = list(FUNCTION.finditer(listing))
    for mark, after in zip(marks, marks[1:] + [None]):
        body = listing[mark.end():after.start() if after else len(listing)]
        found[mark.group(1)] = [" ".join(m.group(2).split()) for m in INSTRUCTION.finditer(body)]
    return found


# One machine-code file of a library, as cuobjdump -lelf names it: "ELF file 1: k.1.sm_75.cubin"
ELF_ARCH = re.compile(r"\.(sm_\d+[a-z]?)\.cubin$", re.MULTILINE)


def arch_number(arch: str) -> int:
    """"sm_90a" -> 90."""
    return int(re.sub(r"\D", "", arch))


def machine_code_archs(tool: str, library: Path) -> list[str]:
    """The architectures ``library`` holds machine code for, oldest first (["sm_75", "sm_90"])."""
    listing = subprocess.run([tool, "-lelf", str(library)], capture_output=True, text=True,
                             check=True).stdout
    return sorted(set(ELF_ARCH.findall(listing)), key=arch_number)


def listed_arch(held: list[str], device: str) -> str:
    """The architecture whose machine code to list for a GPU of architecture ``device``: its own,
    else the newest older one the library holds, which is the code a GPU of that kind runs (a
    build for "7.5+PTX" on an H100 holds sm_75 code and PTX, which the driver compiles at load
    time and cuobjdump cannot list)."""
    same = [arch for arch in held if arch_number(arch) == arch_number(device)]
    if same:  # sm_90, or sm_90a where a kernel uses Hopper-only instructions
        return same[0]
    older = [arch for arch in held if arch_number(arch) <= arch_number(device)]
    if not older:
        raise RuntimeError(f"the build holds no machine code for {device} or older GPUs "
                           f"(only {', '.join(held) or 'PTX'})")
    warnings.warn(f"this build holds no {device} machine code (the driver compiles its PTX when "
                  f"it loads); listing its {older[-1]} code, which a GPU of that kind runs",
                  stacklevel=3)
    return older[-1]


def sass(kernel, function: str = "", arch: str | None = None) -> dict[str, list[str]]:
    """The instructions of every function of a built kernel whose (mangled) name matches
    ``function``, for the GPU's architecture (or ``arch``, e.g. "sm_90"); see :func:`listed_arch`
    for a build without code for this GPU."""
    tool = cuobjdump_path()
    if tool is None:
        raise FileNotFoundError("cuobjdump not found (CUDA toolkit or Triton)")
    library = library_of(kernel)
    if arch is None:
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = listed_arch(machine_code_archs(tool, library), f"sm_{major}{minor}")
    listing = subprocess.run([tool, "-sass", "-arch", arch, str(library)],
                             capture_output=True, text=True, check=True).stdout
    return {name: body for name, body in functions(listing).items() if re.search(function, name)}


def opcode(instruction: str) -> str:
    """``@!P0 LDG.E.128 R8, [R2.64]`` -> ``LDG.E.128``."""
    return re.sub(r"^@!?U?P\w+\s+", "", instruction).split()[0]


def count_opcodes(instructions, pattern: str) -> int:
    return sum(bool(re.match(pattern, opcode(i))) for i in instructions)


def excerpt(instructions, start: str, count: int = 12) -> str:
    """``count`` instructions from the first whose opcode matches ``start``."""
    first = next(i for i, ins in enumerate(instructions) if re.match(start, opcode(ins)))
    return "\n".join(instructions[first:first + count])


def ptx(source: str, flags=(), function: str = "") -> str:
    """The PTX of a kernel file compiled by nvcc with ``flags`` (e.g. ``("--use_fast_math",)``),
    limited to the entries whose name matches ``function``. Needs nvcc, not a GPU."""
    from ..build.build_cache import COMMON_DIR, source_path
    from ..build.toolchain import nvcc

    path = source_path(source)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "kernel.ptx"
        subprocess.run([nvcc() or "nvcc", "-ptx", "-arch=sm_90", "-O3", *flags, f"-I{COMMON_DIR}",
                        "-o", str(out), str(path)], check=True, capture_output=True, text=True)
        text = out.read_text()
    entries = re.split(r"(?=^\.visible \.entry |^\.entry )", text, flags=re.MULTILINE)
    return "".join(e for e in entries[1:] if re.search(function, e.splitlines()[0]))
