"""Every kernel file compiles, for sm_75 and sm_90, through the loader the notebooks use.

One test per ``.cu`` file under kernels/, solutions/ and tests/fixtures/ (the wrong-answer
fixtures must compile too: they compute wrong things, they are not syntax errors). No GPU is
needed: ``kernels.load(path, archs=("7.5", "9.0"))`` only builds and registers the ops.

A file that must not be compiled says so in its first 20 lines with a comment
``// test_compile: skip <reason>``; the reason is shown as the skip reason.

Builds go to a fresh folder per session (``KERNELS_BUILD_DIR``), so no stale cache or lock file
from an earlier run is ever used. Build times are printed (run with ``-s`` to see them) and
written to ``build_seconds.csv`` in the session's temporary folder; they are not asserted
(the build-time target is measured by a script, not by a timed test).

The builds run in a pool of processes (:data:`WORKERS`), all submitted when the first test
starts; each test waits for its file's build, then loads the library in pytest's own process
and checks its ops. One build keeps a core and a half busy at most (ninja compiles the binding
and the ``.cu`` file side by side, and the binding takes twice as long), so one at a time left
a 2-core machine a third idle. Two at a time took ten of the builds from 678 s to 415 s on a
2-core machine shared with other work, for the same 138 s of CPU (issue 57). Processes, not
threads: ``load`` sets ``TORCH_CUDA_ARCH_LIST`` for the length of a build and registers ops,
neither of which is safe to share between threads.
"""

import os
import re
from pathlib import Path

import pytest

from kernels import load
from kernels.build import skeletons
from kernels.build.build_cache import Sources, build_root
from kernels.build.loader import builds_in_processes
from kernels.build.toolchain import nvcc

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("7.5", "9.0")
SKIP_MARK = re.compile(r"//\s*test_compile:\s*skip\s*(.*)")
# Two builds at a time fill 2 cores (see the docstring); more cores take more, up to 4.
WORKERS = max(1, min(4, os.cpu_count() or 1))


def kernel_files():
    files = sorted((ROOT / "kernels").glob("**/*.cu"))
    files += sorted((ROOT / "solutions").glob("**/*.cu"))
    files += sorted((ROOT / "tests" / "fixtures").glob("**/*.cu"))
    return [f for f in files if "_build" not in f.parts and ".ipynb_checkpoints" not in f.parts]


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    import torch

    if torch.version.cuda is None:
        pytest.skip("torch has no CUDA build (torch.version.cuda is None): cannot build kernels")
    if nvcc() is None:
        pytest.skip("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    directory = tmp_path_factory.mktemp("kernel_builds")
    old = os.environ.get("KERNELS_BUILD_DIR")
    os.environ["KERNELS_BUILD_DIR"] = str(directory)
    times = {}
    yield times
    if old is None:
        os.environ.pop("KERNELS_BUILD_DIR", None)
    else:
        os.environ["KERNELS_BUILD_DIR"] = old
    if times:
        csv = directory.parent / "build_seconds.csv"
        csv.write_text("file,seconds\n" + "".join(f"{f},{s:.2f}\n" for f, s in times.items()))
        print(f"\nbuild seconds ({len(times)} files, {sum(times.values()):.0f} s in all; {csv}):")
        for file, seconds in sorted(times.items(), key=lambda item: -item[1]):
            print(f"  {seconds:6.1f}  {file}")


def _skip_reason(path):
    head = "\n".join(path.read_text().splitlines()[:20])
    skip = SKIP_MARK.search(head)
    if skip:
        return f"{path.name} asks not to be compiled: {skip.group(1).strip() or 'no reason'}"
    if skeletons.attempted(path):
        return f"{path.name} is your exercise in progress: its chapter's cell builds and checks it"
    return None


@pytest.fixture(scope="module")
def builds(build_dir, request):
    """Every selected file's build, submitted at once to the pool: path -> future."""
    paths = [item.callspec.params["path"] for item in request.session.items
             if getattr(item, "originalname", None) == "test_kernel_file_compiles"
             and item.path == request.path]
    paths = [path for path in paths if _skip_reason(path) is None]
    # The workers inherit KERNELS_BUILD_DIR: they build into the session's folder. A failed or
    # interrupted run stops building.
    with builds_in_processes(paths, ARCHS, WORKERS) as futures:
        yield futures


@pytest.mark.parametrize("path", kernel_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_kernel_file_compiles(path, build_dir, builds):
    reason = _skip_reason(path)
    if reason:
        pytest.skip(reason)
    expected = {op for op, _ in Sources.read(path).launchers}  # earlier versions spliced in
    ops, seconds, cached = builds[path].result()  # raises the build's KernelBuildError
    assert ops, f"{path.name} registered no op"
    assert set(ops) == expected
    assert not cached, "the session's build folder is fresh: nothing can be cached"
    # The library the worker built, loaded here: its ops register in this process too.
    kernel = load(path, archs=ARCHS)
    assert kernel.cached and set(kernel.ops) == expected
    rel = path.relative_to(ROOT).as_posix()
    build_dir[rel] = seconds
    print(f"{rel}: {ops} built in {seconds:.1f} s")


def test_a_repeated_load_reads_nothing_until_a_file_changes(build_dir, monkeypatch):
    """load() inside a timed lambda must cost microseconds: reading and hashing the sources
    again took 0.5-2 ms per call. An edited file (the learner's next attempt) is built again."""
    # Inside the repository, as the loader expects; the file's own name and text give the build
    # of solutions/kernels/ch7_split_rows.cu's name, so the copy reuses the build the test above
    # made (one build fewer) and only the edited file is built.
    folder = ROOT / "_build" / "test_compile" / str(os.getpid())
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "ch7_split_rows.cu"
    path.write_text((ROOT / "solutions" / "kernels" / "ch7_split_rows.cu").read_text())
    kernel = load(path, archs=ARCHS)
    reads = []
    real_read = Sources.read.__func__
    monkeypatch.setattr(Sources, "read", classmethod(
        lambda cls, p: reads.append(p) or real_read(cls, p)))
    assert load(path, archs=ARCHS) is kernel and reads == []
    path.write_text(path.read_text().replace("constexpr int kLoads = 4;", "constexpr int kLoads = 2;"))
    edited = load(path, archs=ARCHS)
    assert reads == [path] and edited is not kernel and not edited.cached
    assert load(path, archs=ARCHS) is edited and reads == [path]
    path.unlink()
    folder.rmdir()


def test_bindings_read_the_pytorch_headers_precompiled(build_dir):
    """kernels/build/pch.py's .gch is made with the options torch gives a binding's compile: g++
    given a real build's own options (its build.ninja) and -Werror=invalid-pch accepts it. A
    mismatch (another -std, -O or -fPIC) is an error there, and here 4-6 s more per build."""
    import shlex
    import subprocess

    from torch.utils.cpp_extension import get_cxx_compiler

    kernel = load(ROOT / "kernels" / "ch2_atomics" / "v1_atomic_per_element.cu", archs=ARCHS)
    folder = build_root() / kernel.name
    cflags = re.search(r"^cflags = (.*)$", (folder / "build.ninja").read_text(), re.M).group(1)
    assert "binding_pch.h" in cflags, cflags
    checked = subprocess.run([get_cxx_compiler(), *shlex.split(cflags), "-Werror=invalid-pch",
                              "-fsyntax-only", "main.cpp"], cwd=folder, capture_output=True,
                             text=True)
    assert checked.returncode == 0, checked.stderr[-3000:]


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_version_5s_kernels_spill_no_registers(arch, tmp_path):
    """Version 5's evict-first pass 1 spilled 8-28 bytes per thread at 3 blocks per SM (40
    registers), which cost Smooth L1 7-11% at 2^22-2^24 elements (bench/PERFLOG.md, session 25):
    ptxas's report for every kernel of the file must say 0 bytes of spill stores."""
    import subprocess

    if nvcc() is None:
        pytest.skip("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    source = ROOT / "kernels" / "ch4_two_pass" / "v5_block_tiles.cu"
    report = subprocess.run(
        [nvcc(), "-std=c++17", "-O3", f"-arch={arch}", "-Xptxas", "-v", "-c", str(source),
         "-I", str(ROOT / "kernels" / "common"), "-o", str(tmp_path / "v5.o")],
        capture_output=True, text=True, check=True).stderr
    spills = re.findall(r"(\d+) bytes spill stores", report)
    assert len(spills) >= 12, report  # pass 1's 12 copies, at least
    assert set(spills) == {"0"}, report
