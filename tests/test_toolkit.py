"""Fast unit tests of the toolkit in kernels/ (no GPU, no compiler).

Each test asserts on values, so that it fails when the behaviour it names breaks.
"""

import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernels import bench, losses, plot, results
from kernels.build import build_cache, codegen, loader, provenance, toolchain
from kernels.course import notebook
from kernels.measure.correctness import _describe_mismatch, relative_error

ROOT = Path(__file__).resolve().parents[1]

SAMPLE = '''
#include "loss_args.h"
__global__ void k(ReductionArgs a) {}
extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) { return cudaSuccess; }
extern "C"   cudaError_t  hinge_launch( const ReductionArgs *a, cudaStream_t s) { return cudaSuccess; }
static cudaError_t helper_launch(const ReductionArgs* a, cudaStream_t s);  // not extern "C"
'''


# --- codegen: launchers and registration -----------------------------------------------------

def test_find_launchers_finds_every_extern_c_launcher_in_order():
    assert codegen.find_launchers(SAMPLE) == [("mse", "ReductionArgs"), ("hinge", "ReductionArgs")]


def test_find_launchers_rejects_an_unknown_struct():
    text = 'extern "C" cudaError_t mse_launch(const MyArgs* a, cudaStream_t s) {}'
    with pytest.raises(ValueError, match="unknown argument struct.*MyArgs"):
        codegen.find_launchers(text)


def test_find_launchers_rejects_a_file_without_launchers():
    with pytest.raises(ValueError, match="no launcher found"):
        codegen.find_launchers("__global__ void k() {}")


def test_find_launchers_rejects_mixed_structs():
    text = ('extern "C" cudaError_t mse_launch(const ReductionArgs* a, cudaStream_t s) {}\n'
            'extern "C" cudaError_t cross_entropy_launch(const CrossEntropyArgs* a, cudaStream_t s) {}')
    with pytest.raises(ValueError, match="same argument struct"):
        codegen.find_launchers(text)


def test_registration_declares_defines_and_implements_each_op():
    _, template, schema = codegen.BINDINGS["ReductionArgs"]
    text = codegen.registration("lib_abc", [("mse", "ReductionArgs"), ("hinge", "ReductionArgs")])
    for op in ("mse", "hinge"):
        assert f'extern "C" cudaError_t {op}_launch(const ReductionArgs*, cudaStream_t);' in text
        assert f'm.def("{op}" {schema});' in text
        assert f'm.impl("{op}", &{template}<{op}_launch>);' in text
    assert "TORCH_LIBRARY(lib_abc, m) {" in text
    assert "TORCH_LIBRARY_IMPL(lib_abc, CUDA, m) {" in text
    # the definitions come before the CUDA implementations
    assert text.index("TORCH_LIBRARY(lib_abc") < text.index("TORCH_LIBRARY_IMPL(lib_abc")


# --- build_cache: sources and build names ----------------------------------------------------

def _sample_file(tmp_path, text=SAMPLE, name="v9_sample.cu"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_build_name_is_stable_and_starts_with_the_file_stem(tmp_path):
    path = _sample_file(tmp_path)
    first = build_cache.build_name(path, ("7.5", "9.0"))
    assert first == build_cache.build_name(path, ("7.5", "9.0"))
    assert first.startswith("v9_sample_")
    assert len(first.rsplit("_", 1)[1]) == 12


def test_build_name_changes_when_the_source_changes(tmp_path):
    path = _sample_file(tmp_path)
    before = build_cache.build_name(path, ("9.0",))
    path.write_text(SAMPLE + "\n// one more comment\n")
    assert build_cache.build_name(path, ("9.0",)) != before


def test_an_included_earlier_version_is_spliced_in_with_line_markers(tmp_path):
    (tmp_path / "ch5").mkdir()
    (tmp_path / "ch7").mkdir()
    (tmp_path / "ch5" / "v3.cu").write_text(SAMPLE)
    later = tmp_path / "ch7" / "v4.cu"
    later.write_text('// v4\n#include "../ch5/v3.cu"\nint after;\n')
    sources = build_cache.Sources.read(later)
    assert [op for op, _ in sources.launchers] == ["mse", "hinge"]  # found in the spliced text
    assert sources.spliced == {(tmp_path / "ch5" / "v3.cu").resolve(): SAMPLE}
    assert sources.file_text == later.read_text()
    text = sources.cuda_text
    assert '#line 1 "v3.cu"' in text and '#line 3 "v4.cu"\nint after;' in text
    before = build_cache.build_name(later, ("9.0",))  # editing the included file changes the build
    (tmp_path / "ch5" / "v3.cu").write_text(SAMPLE + "// changed\n")
    assert build_cache.build_name(later, ("9.0",)) != before


def test_an_included_file_that_is_missing_or_repeated_is_an_error(tmp_path):
    missing = tmp_path / "v4.cu"
    missing.write_text('#include "nowhere.cu"\n')
    with pytest.raises(FileNotFoundError, match="nowhere.cu"):
        build_cache.Sources.read(missing)
    (tmp_path / "v3.cu").write_text(SAMPLE)
    twice = tmp_path / "v5.cu"
    twice.write_text('#include "v3.cu"\n#include "v3.cu"\n')
    with pytest.raises(ValueError, match="included twice"):
        build_cache.Sources.read(twice)


def test_an_op_variant_brings_its_binding_file_only_where_it_is_defined():
    v3 = build_cache.Sources.read(build_cache.source_path("ch5_cross_entropy/v3_fused_rows.cu"))
    v4 = build_cache.Sources.read(build_cache.source_path("ch7_llm_cross_entropy/v4_cluster_rows.cu"))
    assert v3.extra_bindings == {}
    assert [p.name for p in v4.extra_bindings] == ["cross_entropy_into_logits.cpp"]
    assert "cross_entropy_into_logits" in {op for op, _ in v4.launchers}
    assert "CROSS_ENTROPY_INTO_LOGITS_SCHEMA" in codegen.registration("x", v4.launchers)


def test_build_name_changes_with_the_architectures(tmp_path):
    path = _sample_file(tmp_path)
    assert build_cache.build_name(path, ("9.0",)) != build_cache.build_name(path, ("7.5", "9.0"))
    assert build_cache.build_name(path, ("7.5",)) != build_cache.build_name(path, ("9.0",))


# --- toolchain: compiler errors --------------------------------------------------------------

BUILD_LOG = """\
Error building extension 'v9_sample_0123456789ab':
[1/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /tmp/kb/v9_sample_0123456789ab/cuda.cu -o cuda.cuda.o
FAILED: cuda.cuda.o
/tmp/kb/v9_sample_0123456789ab/cuda.cu(12): error: identifier "undefined_thing" is undefined
      float x = undefined_thing;
                ^

1 error detected in the compilation of "/tmp/kb/v9_sample_0123456789ab/cuda.cu".
/tmp/kb/v9_sample_0123456789ab/main.cpp:7:10: error: expected ';' before 'return'
ninja: build stopped: subcommand failed.
"""


def test_readable_compiler_error_keeps_errors_and_names_the_course_files():
    shown = toolchain.readable_compiler_error(BUILD_LOG, {
        "cuda.cu": "kernels/ch9/v9_sample.cu", "main.cpp": "kernels/bindings/reduction.cpp"})
    assert ('kernels/ch9/v9_sample.cu(12): error: identifier "undefined_thing" is undefined'
            in shown.splitlines())
    assert "kernels/bindings/reduction.cpp:7:10: error: expected ';' before 'return'" in shown
    assert "float x = undefined_thing;" in shown  # the source line under the error
    assert "/tmp/kb" not in shown
    assert "ninja" not in shown


def test_readable_compiler_error_falls_back_to_the_log_tail():
    assert toolchain.readable_compiler_error("something odd", {}) == "something odd"


# --- toolchain: architectures ----------------------------------------------------------------

def test_target_archs_given():
    assert toolchain.target_archs(("7.5", "9.0")) == ("7.5", "9.0")
    assert toolchain.target_archs(["8.0"]) == ("8.0",)


def test_target_archs_without_gpu_or_env_is_an_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    with pytest.raises(RuntimeError, match="no GPU found"):
        toolchain.target_archs(None)


@pytest.mark.parametrize("env", ["7.5;9.0", "7.5 9.0"])
def test_target_archs_from_the_environment(monkeypatch, env):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", env)
    assert toolchain.target_archs(None) == ("7.5", "9.0")


def test_kernels_archs_overrides_the_gpu_present(monkeypatch):
    """KERNELS_ARCHS builds for an older GPU than the one present (the pre-Hopper paths on an
    H100), where TORCH_CUDA_ARCH_LIST applies only without a GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    monkeypatch.delenv("KERNELS_ARCHS", raising=False)
    assert toolchain.target_archs(None) == ("9.0",)
    monkeypatch.setenv("KERNELS_ARCHS", "7.5+PTX")
    assert toolchain.target_archs(None) == ("7.5+PTX",)


@pytest.mark.parametrize("archs, hopper", [(("9.0",), True), (("9.0a", "10.0"), True),
                                            (("7.5+PTX",), False), (("8.0", "9.0"), False)])
def test_builds_for_hopper(archs, hopper):
    assert toolchain.builds_for_hopper(archs) is hopper


# --- build_cache: the build folder lock ------------------------------------------------------

def test_build_lock_removes_a_stale_torch_lock(tmp_path):
    directory = tmp_path / "build"
    directory.mkdir()
    (directory / "lock").write_text("")  # what a build killed midway leaves behind
    with build_cache.build_lock(directory):
        assert not (directory / "lock").exists()
        assert (directory / ".course-lock").exists()


def test_build_lock_creates_the_folder(tmp_path):
    directory = tmp_path / "a" / "b"
    with build_cache.build_lock(directory):
        assert directory.is_dir()


def test_build_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path))
    assert build_cache.build_root() == tmp_path
    monkeypatch.delenv("KERNELS_BUILD_DIR")
    assert build_cache.build_root().name == f"torch-{torch.__version__}"


# --- toolchain: the CUDA toolkit, set when a build starts, never on import -------------------

def test_importing_kernels_changes_no_environment_variable():
    """Where torch would guess the toolkit wrong (as on CI), $CUDA_HOME is set by a build."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH")}
    code = ("import os; before = dict(os.environ); import kernels, kernels.build.toolchain, "
            "kernels.build.loader, kernels.course.notebook, kernels.ops.operators; "
            "changed = sorted(k for k in before.keys() | os.environ.keys() "
            "if before.get(k) != os.environ.get(k)); print(changed)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, text=True,
                         capture_output=True).stdout
    assert out.splitlines()[-1] == "[]"


def _unset(monkeypatch, *names):
    """Remove environment variables for one test; monkeypatch restores them, and removes what
    the test sets (its delenv alone records nothing for a variable that is not set)."""
    for name in names:
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)


def test_a_build_points_torch_at_the_toolkit_it_would_miss(monkeypatch, tmp_path):
    from torch.utils import cpp_extension

    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    (toolkit / "bin" / "nvcc").write_text("")
    monkeypatch.setattr(toolchain, "TOOLKIT", toolkit)
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: "/usr/local/bin/nvcc")  # a wrapper
    _unset(monkeypatch, "CUDA_HOME", "CUDA_PATH")
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", "/usr/local")  # imported already, guessed wrong
    assert toolchain.toolkit_torch_misses() == toolkit
    assert toolchain.nvcc() == str(toolkit / "bin" / "nvcc")
    toolchain.point_torch_at_the_cuda_toolkit()
    assert os.environ["CUDA_HOME"] == cpp_extension.CUDA_HOME == str(toolkit)
    monkeypatch.setenv("CUDA_HOME", "/opt/mine")  # the user's choice stands
    toolchain.point_torch_at_the_cuda_toolkit()
    assert os.environ["CUDA_HOME"] == "/opt/mine" and toolchain.toolkit_torch_misses() is None


# --- loader: one load call -------------------------------------------------------------------

def test_a_load_reads_each_source_once_and_records_it(monkeypatch, tmp_path):
    """Up to the compiler, with load_inline replaced by a failing build: every file that goes in
    (chapter 7's v4 splices chapter 5's v3 and adds a binding) is read once, its hash logged for
    the notebooks, the architectures set for the build only, and the error made readable."""
    from torch.utils import cpp_extension

    reads = []
    read_text = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (reads.append(self),
                                                                   read_text(self, *a, **k))[1])
    seen = {}

    def failing_build(**kwargs):
        seen.update(kwargs, archs=os.environ.get("TORCH_CUDA_ARCH_LIST"),
                    cuda_home=os.environ.get("CUDA_HOME"))
        raise RuntimeError(BUILD_LOG.replace("v9_sample_0123456789ab", kwargs["name"]))

    monkeypatch.setattr(cpp_extension, "load_inline", failing_build)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", cpp_extension.CUDA_HOME)
    # The precompiled header is every build's, not this one's sources (test_compile checks it).
    monkeypatch.setattr(loader.pch, "cflags", lambda: [])
    monkeypatch.setattr(loader, "_LOADED", {})  # an earlier test of this process built v4 already
    monkeypatch.setattr(loader, "_FRESH", {})
    _unset(monkeypatch, "CUDA_HOME", "TORCH_CUDA_ARCH_LIST")
    monkeypatch.setenv("KERNELS_BUILD_DIR", str(tmp_path / "builds"))
    monkeypatch.setenv("KERNELS_SOURCES_LOG", str(tmp_path / "sources.jsonl"))
    toolkit = toolchain.toolkit_torch_misses()  # None where torch finds it, or $CUDA_PATH is set
    source = "ch7_llm_cross_entropy/v4_cluster_rows.cu"
    with pytest.raises(loader.KernelBuildError) as error:
        loader.load(source, archs=("7.5", "9.0"))
    files = list(reads)  # what the load read (the test reads more below)
    assert str(error.value).startswith(f"{source} did not compile:\nkernels/{source}(12): error")
    assert sorted(files) == sorted(set(files)), "a source was read twice"
    sources = build_cache.Sources.read(build_cache.source_path(source))
    assert set(files) == {sources.path, sources.binding, *sources.spliced, *sources.headers,
                          *sources.extra_bindings}
    assert [p.name for p in sources.spliced] == ["v3_fused_rows.cu"] and sources.extra_bindings
    assert seen["name"] == sources.build_name(("7.5", "9.0")) and seen["archs"] == "7.5;9.0"
    assert seen["cuda_home"] == (str(toolkit) if toolkit else None)
    assert seen["cuda_sources"] == [sources.cuda_text]
    assert seen["cpp_sources"][-1] == codegen.registration(seen["name"], sources.launchers)
    assert "TORCH_CUDA_ARCH_LIST" not in os.environ
    logged = [json.loads(line) for line in (tmp_path / "sources.jsonl").read_text().splitlines()]
    # the Python around and timing the kernels, logged too; listed here from sys.modules by
    # path, not by provenance.imported_code(), the function under test
    python = sorted({Path(m.__file__).resolve() for m in list(sys.modules.values())
                     if getattr(m, "__file__", None) and (
                         Path(m.__file__).resolve().is_relative_to(ROOT / "kernels" / "ops")
                         or Path(m.__file__).resolve() in {ROOT / "kernels/measure/events.py",
                                                          ROOT / "kernels/measure/spans.py",
                                                          ROOT / "kernels/measure/bench.py"})})
    assert ROOT / "kernels/ops/__init__.py" in python and ROOT / "kernels/measure/bench.py" in python
    assert {file: digest for line in logged for file, digest in line.items()} == {
        p.relative_to(ROOT).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in files + python}


# --- bench -----------------------------------------------------------------------------------

def test_gbps():
    assert bench.gbps(10**9, 1000.0) == pytest.approx(1.0)
    assert bench.gbps(8 * 2**30, 2.78) == pytest.approx(8 * 2**30 / 2.78e-3 / 1e9)
    assert bench.gbps(3_000_000, 0.001) == pytest.approx(3000.0)


MiB, GiB = 1 << 20, 1 << 30


@pytest.mark.parametrize("per_call, l2, free, limit, expected", [
    (10 * MiB, 50 * MiB, 80 * GiB, 64, 15),     # exactly 3 x L2 / per call
    (40 * MiB, 50 * MiB, 80 * GiB, 64, 4),      # 3.75 rounds up
    (4 * GiB, 50 * MiB, 80 * GiB, 64, 1),       # larger than L2: no copies
    (1 * MiB, 50 * MiB, 80 * GiB, 64, 64),      # capped by the limit
    (1 * MiB, 50 * MiB, 80 * GiB, 10, 10),      # a smaller limit
    (1 * MiB, 50 * MiB, 8 * MiB, 64, 2),        # a quarter of free memory: 2 copies
    (1 * MiB, 50 * MiB, 0, 64, 1),              # no free memory: still 1
    (0, 50 * MiB, 80 * GiB, 64, 64),            # zero bytes does not divide by zero
])
def test_rotation_count(per_call, l2, free, limit, expected):
    assert bench.rotation_count(per_call, l2, free, limit) == expected


def test_time_ms_rejects_an_unknown_clear_before_touching_the_gpu():
    # Only "read" (clean lines, the book's timings) and "write" (triton's do_bench) exist: a
    # typo must not fall back to one of them silently.
    with pytest.raises(ValueError, match="clear must be 'read' or 'write', not 'zero'"):
        bench.time_ms(lambda: None, [()], clear="zero")


def test_element_wise_shape():
    assert bench.element_wise_shape(4096, "mse") == (4096,)
    assert bench.element_wise_shape(4096, "smooth_l1") == (4096,)
    assert bench.element_wise_shape(4096, "hinge") == (64, 64)
    assert bench.element_wise_shape(8192, "hinge") == (128, 64)
    assert bench.element_wise_shape(1 << 30, "hinge") == (32768, 32768)
    for n in bench.SIZES:
        rows, cols = bench.element_wise_shape(n, "hinge")
        assert rows * cols == n and rows >= cols


def test_sizes_span_2_12_to_2_30():
    assert bench.SIZES[0] == 1 << 12 and bench.SIZES[-1] == 1 << 30
    assert all(b == 4 * a for a, b in zip(bench.SIZES, bench.SIZES[1:]))


@pytest.mark.parametrize("gib, largest", [
    (None, 1 << 30),  # no GPU: the published sizes
    (80, 1 << 30),    # H100
    (24, 1 << 30),    # RTX 4090: 16 GiB of eager temporaries fit in 80% of 24
    (15, 1 << 29),    # Colab's T4: 2^30 needs 16 GiB, 2^29 fits
    (8, 1 << 28),
])
def test_sweeps_stop_where_eager_temporaries_fit(gib, largest):
    limit = bench.sweep_limit(gib and gib << 30)
    assert limit == largest
    assert limit * bench.EAGER_BYTES_PER_ELEMENT <= bench.MEMORY_SHARE * (gib or 80) * 2**30


def _fake_gpu(monkeypatch, free_gib, total_gib, share=1.0, reserved_gib=0, allocated_gib=0):
    import torch

    gib = 1 << 30
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free_gib * gib,
                                                                          total_gib * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: reserved_gib * gib)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated_gib * gib)
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device=None: share,
                        raising=False)


@pytest.mark.parametrize("free, total, share, reserved, allocated, expected", [
    (79, 80, 1.0, 0, 0, 79),          # a fresh H100
    (79, 80, 15 / 80, 0, 0, 15),      # the same, capped at 15 GiB by the per-process fraction
    (10, 80, 1.0, 0, 0, 10),          # another process holds the rest
    (60, 80, 1.0, 12, 8, 64),         # 4 GiB cached by our allocator count as free
    (60, 80, 15 / 80, 12, 8, 7),      # within the cap, what we hold counts against it
])
def test_free_memory_counts_the_cache_and_the_process_share(monkeypatch, free, total, share,
                                                            reserved, allocated, expected):
    _fake_gpu(monkeypatch, free, total, share, reserved, allocated)
    assert bench.free_memory() == expected << 30


def test_a_capped_process_sweeps_as_a_smaller_gpu(monkeypatch, capsys):
    import torch

    _fake_gpu(monkeypatch, 79, 80, share=15 / 80)
    monkeypatch.delenv("KERNELS_MAX_ELEMENTS", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "a capped GPU")
    assert bench._max_elements() == 1 << 29
    assert "15.0 GiB free for this process, so the sweeps stop at 2^28" in capsys.readouterr().out


def test_the_environment_sets_the_largest_size(monkeypatch):
    monkeypatch.setenv("KERNELS_MAX_ELEMENTS", str(1 << 20))
    assert bench._max_elements() == 1 << 20


# --- losses ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name, shape, element_size, expected", [
    ("mse", (10,), 4, 80),
    ("mse", (3, 5), 2, 60),
    ("smooth_l1", (3, 5), 4, 120),
    ("hinge", (4, 6), 4, (24 + 6) * 4),      # predictions + one target per column
    ("hinge", (32768, 32768), 4, (32768 * 32768 + 32768) * 4),
    ("cross_entropy", (4, 10), 4, 4 * 10 * 4 + 4 * 8),  # logits + int64 targets
    ("cross_entropy", (32768, 4096), 2, 32768 * 4096 * 2 + 32768 * 8),
])
def test_min_bytes(name, shape, element_size, expected):
    assert losses.get_loss(name).min_bytes(shape, element_size) == expected


def test_every_loss_has_a_byte_count():
    for name, loss in losses.LOSSES.items():
        assert loss.min_bytes((2, 3)) > 0, name


def test_unknown_loss():
    with pytest.raises(ValueError, match="unknown loss 'nope'"):
        losses.get_loss("nope")


def test_references_match_pytorch_on_cpu():
    p = torch.tensor([[0.5, -2.0], [3.0, 0.0]], dtype=torch.float64)
    t = torch.tensor([[1.0, -1.0], [1.0, 2.0]], dtype=torch.float64)
    y = torch.tensor([1.0, -1.0], dtype=torch.float64)
    assert losses.get_loss("mse").reference(p, t).item() == pytest.approx((0.25 + 1 + 4 + 4) / 4)
    # smooth L1, beta 1: 0.5 d^2 below 1, d - 0.5 above
    assert losses.get_loss("smooth_l1").reference(p, t).item() == pytest.approx(
        (0.125 + 0.5 + 1.5 + 1.5) / 4)
    # hinge broadcasts y along the last dimension: [i, j] uses y[j]
    expected = (max(0, 1 - 0.5) + max(0, 1 - 2.0) + max(0, 1 - 3.0) + max(0, 1 - 0.0)) / 4
    assert losses.get_loss("hinge").reference(p, y).item() == pytest.approx(expected)


def test_hinge_inputs_are_labels_of_the_last_dimension():
    g = torch.Generator().manual_seed(0)
    pred, target = losses.get_loss("hinge").make_inputs((3, 7), g, "cpu")
    assert pred.shape == (3, 7) and target.shape == (7,)
    assert set(target.tolist()) <= {-1.0, 1.0}


def test_cross_entropy_inputs_are_int64_class_indices():
    g = torch.Generator().manual_seed(0)
    logits, target = losses.get_loss("cross_entropy").make_inputs((5, 11), g, "cpu")
    assert logits.shape == (5, 11) and logits.dtype == torch.float32
    assert target.shape == (5,) and target.dtype == torch.int64
    assert 0 <= target.min() and target.max() < 11


# --- results ---------------------------------------------------------------------------------

def _measurements():
    return [bench.Measurement("mse", "torch", (4096,), 32768, 0.002),
            bench.Measurement("mse", "v1", (4096,), 32768, 0.001),
            bench.Measurement("mse", "torch", (1024, 1024), 8 * 2**20, 0.01),
            bench.Measurement("hinge", "v1", (64, 64), 16640, 0.004)]


def test_results_round_trip(tmp_path):
    rows = results.rows_from(_measurements(), "H100", "ch9", 1000.0)
    path = results.save(rows, "ch9", tmp_path / "sub" / "ch9.csv")
    back = results.read_rows("ch9", path)
    assert len(back) == 4
    first = back[0]
    assert first["gpu"] == "H100" and first["chapter"] == "ch9" and first["loss"] == "mse"
    assert first["provider"] == "torch"
    assert first["shape"] == (4096,)
    assert first["bytes"] == 32768
    assert first["ms"] == pytest.approx(0.002)
    assert first["gbps"] == pytest.approx(32768 / 2e-6 / 1e9, rel=1e-5)
    assert first["peak_gbps"] == 1000.0
    assert back[2]["shape"] == (1024, 1024)
    assert path.read_text().splitlines()[0] == ",".join(results.COLUMNS)


def test_shape_text():
    assert results.shape_text((32768, 4096)) == "32768x4096"
    assert results.parse_shape("32768x4096") == (32768, 4096)
    assert results.parse_shape(results.shape_text((7,))) == (7,)


def _row(provider, shape, ms, gbps, loss="mse", peak=1000.0):
    return {"gpu": "H100", "chapter": "ch9", "loss": loss, "provider": provider,
            "shape": shape, "bytes": 0, "ms": ms, "gbps": gbps, "peak_gbps": peak}


def test_markdown_table():
    rows = [_row("torch", (4096,), 0.01, 500.0), _row("v1", (4096,), 0.005, 1000.0),
            _row("torch", (1 << 20,), 0.1, 900.0), _row("v1", (1 << 20,), 0.1, 960.0, loss="hinge")]
    lines = results.markdown_table(rows, ["torch", "v1"], "mse").splitlines()
    assert lines[0] == "| elements | torch GB/s (% peak) | v1 GB/s (% peak) |"
    assert lines[1] == "|---|---|---|"
    assert lines[2] == "| 4,096 | 500 (50%) | 1000 (100%) |"
    assert lines[3] == "| 1,048,576 | 900 (90%) | – |"  # the v1 row is hinge, not mse
    assert len(lines) == 4


def test_speedup_table():
    rows = [_row("torch", (4096,), 2.0, 100.0), _row("v1", (4096,), 1.0, 200.0),
            _row("v2", (4096,), 0.5, 400.0), _row("v2", (8192,), 0.1, 800.0)]
    lines = results.speedup_table(rows, ["torch", "v1", "missing", "v2"], "mse", (4096,),
                                  "torch").splitlines()
    assert lines[0] == "| version | time (ms) | GB/s | % of peak | step speed-up | vs torch |"
    assert lines[2] == "| torch | 2 | 100 | 10% | – | 1.00x |"
    assert lines[3] == "| v1 | 1 | 200 | 20% | 2.00x | 2.00x |"
    assert lines[4] == "| v2 | 0.5 | 400 | 40% | 2.00x | 4.00x |"
    assert len(lines) == 5  # "missing" has no row and is left out
    with_changes = results.speedup_table(rows, ["v1", "v2"], "mse", (4096,), "v1",
                                         changes={"v2": "wider loads"}).splitlines()
    assert with_changes[0] == ("| version | change | time (ms) | GB/s | % of peak | step speed-up "
                               "| vs v1 |")
    assert with_changes[2] == "| v1 |  | 1 | 200 | 20% | – | 1.00x |"
    assert with_changes[3] == "| v2 | wider loads | 0.5 | 400 | 40% | 2.00x | 2.00x |"


# --- plot ------------------------------------------------------------------------------------

def _saved_width(fig, tmp_path):
    """The PNG's width in pixels, saved as the notebooks' inline backend saves a figure."""
    from PIL import Image

    fig.savefig(tmp_path / "figure.png", bbox_inches="tight", dpi=fig.dpi)
    with Image.open(tmp_path / "figure.png") as image:
        return image.size[0]


@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (1, 3)])
def test_figures_fit_the_book_column_with_legible_text(tmp_path, grid):
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    rows = results.read_rows("ch4")
    # As the chapters draw a grid: the panels share their axes, labelled once at the outside.
    fig, axes = plot.subplots(*grid, squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat:
        plot.plot_throughput(rows, "mse", ax=ax, show_legend=grid == (1, 1))
        ax.label_outer()
    if grid != (1, 1):
        plot.legend(fig)
    # The book's column is 819 px wide at a 1280 px window (tests/test_book.py).
    assert _saved_width(fig, tmp_path) <= 819
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_text() and t.get_visible()]
    assert min(sizes) >= 10, "text below 10 pt is smaller than the book's small print"
    plt.close(fig)


def test_highlight_greys_the_other_lines_under_one_legend_entry():
    import matplotlib.pyplot as plt

    rows = results.read_rows("ch4")
    providers = ["eager", "torch.compile", "v1", "v2", "v3", "v5"]
    ax = plot.plot_throughput(rows, "mse", providers, highlight=["eager", "torch.compile", "v5"])
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert labels == ["eager", "torch.compile", "v1, v2, v3", "v5"]
    colours = {line.get_label(): line.get_color() for line in ax.get_lines()}
    assert colours["v1, v2, v3"] == plot.CONTEXT["color"]
    assert colours["v5"] == plot.colour("v5", 0) != plot.CONTEXT["color"]
    plt.close(ax.figure)


# --- notebook --------------------------------------------------------------------------------

CU_FILE = "ch4_two_pass/v2_deterministic_tiles.cu"
HEADER_FILE = "common/loss_args.h"


def test_setup_cell_has_the_repository():
    cell = notebook.SETUP_CELL.format(repository="https://github.com/o/r")
    assert 'REPOSITORY = "https://github.com/o/r"' in cell
    assert cell.startswith("# Setup")
    compile(cell, "setup", "exec")  # valid Python


def test_setup_cell_finds_the_repository_from_a_notebook_folder():
    """The cell recognises the repository by a file of kernels/: that file must exist."""
    cell = notebook.SETUP_CELL.format(repository="https://github.com/o/r")
    run = subprocess.run([sys.executable, "-c", cell + "\nprint(ROOT)"], cwd=ROOT / "chapters",
                         text=True, capture_output=True)
    assert run.returncode == 0 and run.stdout.split() == [str(ROOT)], run.stderr[-500:]


def test_setup_cell_outside_the_repository_says_what_to_do(tmp_path):
    """Opened from a folder with no repository around it, the cell stops with one sentence
    (it used to end in a bare StopIteration)."""
    cell = notebook.SETUP_CELL.format(repository="https://github.com/o/r")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", cell], cwd=tmp_path, text=True,
                         capture_output=True, env=env)
    assert run.returncode != 0
    assert run.stderr.strip().splitlines()[-1] == (
        "FileNotFoundError: the course's repository is not here: clone https://github.com/o/r and "
        "open this notebook from the clone's chapters/ or solutions/ folder")


def test_a_changed_setup_cell_does_not_make_a_notebook_stale():
    import nbformat

    from kernels.build.provenance import cells_not_run

    def cells(first_outputs):
        setup = nbformat.v4.new_code_cell("# Setup", metadata={"tags": ["remove-cell"]},
                                          outputs=first_outputs)
        other = nbformat.v4.new_code_cell("x = 1", execution_count=None)
        return nbformat.v4.new_notebook(cells=[setup, other,
                                               nbformat.v4.new_code_cell("y", metadata={"tags": ["remove-cell"]})])

    assert cells_not_run(cells([])) == [1, 2]  # the setup cell is the first one only
    printed = [nbformat.v4.new_output("stream", name="stdout", text="Tesla T4\n")]
    assert cells_not_run(cells(printed)) == [0, 1, 2]  # it printed: its outputs are stale


def test_cells_not_run_are_the_code_cells_without_an_execution_count():
    import nbformat

    from kernels.build.provenance import cells_not_run

    new = nbformat.v4
    book = new.new_notebook(cells=[
        new.new_code_cell("import kernels"),  # first, but no tags: not the setup cell
        new.new_code_cell("x = 1", execution_count=3),
        new.new_markdown_cell("text"),
        new.new_code_cell("y = 2", execution_count=None),
    ])
    assert cells_not_run(book) == [0, 3]


def test_changed_sources_says_which_file_is_gone_and_accepts_a_notebook_without_sources():
    from kernels.build.provenance import changed_sources

    assert changed_sources({}) == []
    assert changed_sources({"sources": {"kernels/ch2_atomics/v9_gone.cu": "0" * 64}}) == [
        "kernels/ch2_atomics/v9_gone.cu no longer exists"]


def test_imported_code_skips_what_sys_modules_holds_besides_files(monkeypatch):
    """sys.modules may hold objects that are not modules (no __name__: a lazy loader's stand-in)
    and modules with no file (a namespace package, one made in memory)."""
    import types

    monkeypatch.setitem(sys.modules, "a_lazy_stand_in", object())
    name = "kernels.ops.in_memory"
    monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    files = provenance.imported_code()
    assert files and all(f.is_file() and f.is_relative_to(ROOT / "kernels") for f in files)


def test_show_source_shows_the_whole_file():
    text = (ROOT / "kernels" / CU_FILE).read_text()
    data = notebook.show_source(CU_FILE, fold=False).data
    assert data.startswith(f"`kernels/{CU_FILE}`\n\n```cuda\n")
    assert data.endswith("\n```")
    assert text.rstrip("\n") in data


def test_show_source_folds_long_listings_and_answers():
    lines = (ROOT / "kernels" / CU_FILE).read_text().splitlines()
    assert len(lines) > notebook.FOLD_LINES
    data = notebook.show_source(CU_FILE).data
    assert data.startswith(f'<details class="listing"><summary>kernels/{CU_FILE} '
                           f"({len(lines)} lines: click to open)</summary>\n\n```cuda\n")
    assert data.endswith("\n```\n\n</details>") and "\n".join(lines) in data
    short = notebook.show_source(HEADER_FILE, start="struct ReductionArgs", end="};")
    assert not short.data.startswith("<details")
    folded = notebook.show_source(HEADER_FILE, start="struct ReductionArgs", end="};", fold=True)
    assert folded.data.startswith('<details class="listing"><summary>') and "lines shown" in folded.data


def test_show_source_slices_from_start_to_end():
    lines = (ROOT / "kernels" / HEADER_FILE).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "struct ReductionArgs" in line)
    last = next(i for i in range(first + 1, len(lines)) if "};" in lines[i])
    data = notebook.show_source(HEADER_FILE, start="struct ReductionArgs", end="};").data
    assert data == (f"`kernels/{HEADER_FILE}`\n\n```cpp\n" + "\n".join(lines[first:last + 1])
                    + "\n```")
    assert "#pragma once" not in data  # lines before start are left out


def test_show_source_start_without_end_runs_to_the_end_of_file():
    lines = (ROOT / "kernels" / CU_FILE).read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if "#include" in line)
    data = notebook.show_source(CU_FILE, start="#include", fold=False).data
    assert data.endswith("\n".join(lines[first:]) + "\n```")
    assert lines[0] not in data


def test_show_source_unknown_file():
    with pytest.raises(FileNotFoundError):
        notebook.show_source("ch0_nothing/v0.cu")


# --- correctness -----------------------------------------------------------------------------

def test_relative_error_nan_and_inf_are_infinite():
    assert relative_error(torch.tensor(math.nan), torch.tensor(1.0)) == math.inf
    assert relative_error(torch.tensor(math.inf), torch.tensor(1.0)) == math.inf
    assert relative_error(torch.tensor([1.0, math.nan]), torch.tensor([1.0, 1.0])) == math.inf


def test_relative_error_values():
    one = torch.tensor(1.0, dtype=torch.float64)
    assert relative_error(one + 1e-6, one) == pytest.approx(1e-6, rel=1e-6)
    assert relative_error(one, one) == 0.0
    assert relative_error(torch.tensor(0.0), torch.tensor(0.0)) == 0.0
    # scaled by the largest expected magnitude
    got = torch.tensor([1.0, 2.2], dtype=torch.float64)
    assert relative_error(got, torch.tensor([1.0, 2.0], dtype=torch.float64)) == pytest.approx(0.1)
    # expected 0: divided by 1e-30, not by zero
    assert relative_error(torch.tensor(1e-31, dtype=torch.float64),
                          torch.tensor(0.0, dtype=torch.float64)) == pytest.approx(0.1)


def test_describe_mismatch_catches_shape_1_for_0d():
    assert _describe_mismatch(torch.zeros(1), torch.zeros(())) == "shape (1,) (PyTorch returns ())"
    assert "dtype torch.float64" in _describe_mismatch(torch.zeros((), dtype=torch.float64),
                                                       torch.zeros(()))
    assert _describe_mismatch(torch.zeros(()), torch.zeros(())) == ""


# --- tools/reliability_report.py -------------------------------------------------------------

def _reliability_module():
    spec = importlib.util.spec_from_file_location("reliability_report",
                                                  ROOT / "tools" / "reliability_report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reliability_report(tmp_path):
    report = _reliability_module()
    v = "ch4_two_pass/v2.cu"
    records = [
        {"version": v, "case": "sanitizer:memcheck", "outcome": "clean", "gpu": "H100"},
        {"version": v, "case": "sanitizer:racecheck", "outcome": "errors", "gpu": "H100"},
        {"version": v, "case": "sanitizer:racecheck", "outcome": "clean", "gpu": "H100"},
        {"version": v, "case": "check:mse", "outcome": "pass", "max_rel_error": 2e-7, "cases": 5},
        {"version": v, "case": "check:hinge", "outcome": "pass", "max_rel_error": 3e-6, "cases": 5},
        {"version": "ch2/v1.cu", "case": "check:mse", "outcome": "fail", "max_rel_error": "inf",
         "cases": 5},
        {"version": "wrong/tail.cu", "case": "validator", "outcome": "rejected",
         "message": "FAIL mse, 1 element (1,): expected 2, got 0"},
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert report.read_records(path) == records
    text = report.render(report.read_records(path), "H100")
    lines = text.splitlines()
    assert lines[0] == "# Reliability report"
    assert ("| `ch4_two_pass/v2.cu` | clean | **errors** | – | – | 10 | 3.0e-06 | none |"
            in lines)  # a tool that failed once stays failed
    assert "| `ch2/v1.cu` | – | – | – | – | 5 | **inf** | `check:mse` |" in lines
    assert "| `wrong/tail.cu` | FAIL mse, 1 element (1,): expected 2, got 0 |" in lines


# --- llm_head: what needs no GPU -------------------------------------------------------------

def test_fused_head_chunks_fit_the_budget_in_whole_tiles():
    from kernels.ops.llm_head import CHUNK_BYTES, ROW_MULTIPLE, default_chunk_rows

    assert default_chunk_rows(128256, 2) == 1024  # Llama 3, bf16
    assert default_chunk_rows(151936, 2) == 768  # Qwen 2, bf16
    assert default_chunk_rows(10**9, 4) == ROW_MULTIPLE  # never fewer than one tile of rows
    for vocab in (32000, 50257, 128256, 151936, 256000):
        rows = default_chunk_rows(vocab, 2)
        assert rows % ROW_MULTIPLE == 0 and rows * vocab * 2 <= CHUNK_BYTES < 2**28  # < 0.25 GiB


def test_a_head_that_runs_out_of_memory_is_measured_as_none(monkeypatch):
    from kernels.ops import llm_head

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 4.64 GiB.")

    monkeypatch.setattr(llm_head, "measure_step", out_of_memory)
    h, w, t = torch.randn(4, 8), torch.randn(16, 8), torch.zeros(4, dtype=torch.int64)
    h.grad = torch.ones_like(h)
    assert llm_head.measure_step_if_it_fits(None, h, w, t) is None
    assert h.grad is None  # a partial step's gradient is freed with it
    monkeypatch.setattr(llm_head, "measure_step", lambda *args: (1.5, 0.25))
    assert llm_head.measure_step_if_it_fits(None, h, w, t) == (1.5, 0.25)


def test_fused_head_rejects_cpu_tensors_and_bad_arguments_before_any_kernel():
    from kernels.ops.llm_head import linear_cross_entropy

    h, w, t = torch.randn(4, 8), torch.randn(16, 8), torch.zeros(4, dtype=torch.int64)
    with pytest.raises(ValueError, match="hidden must be a CUDA tensor"):
        linear_cross_entropy(h, w, t)
    with pytest.raises(ValueError, match="reduction must be 'mean' or 'sum'"):
        linear_cross_entropy(h, w, t, reduction="none")
    with pytest.raises(ValueError, match="label_smoothing"):
        linear_cross_entropy(h, w, t, label_smoothing=1.5)


def test_training_step_clears_the_gradient_and_passes_grad_output():
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 7, (5,))
    expected = torch.autograd.grad(torch.nn.functional.cross_entropy(x, t) * 3.0, x)[0]
    step = bench.training_step(torch.nn.functional.cross_entropy,
                               torch.tensor(3.0, dtype=torch.float64))
    step(x, t)
    step(x, t)  # a second step replaces the gradient, it does not add to it
    assert torch.allclose(x.grad, expected)


def test_training_step_clears_every_input_that_has_a_gradient():
    """An LM head's step takes hidden states, a weight and targets: both gradients are the last
    step's, not a sum of steps."""
    h = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 3, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 6, (4,))
    head = lambda h, w, t: torch.nn.functional.cross_entropy(h @ w.t(), t)  # noqa: E731
    expected = torch.autograd.grad(head(h, w, t), (h, w))
    step = bench.training_step(head)
    step(h, w, t)
    step(h, w, t)
    assert torch.allclose(h.grad, expected[0]) and torch.allclose(w.grad, expected[1])


def test_training_step_turns_through_its_scales():
    x = torch.randn(5, 7, dtype=torch.float64, requires_grad=True)
    t = torch.randint(0, 7, (5,))
    plain = torch.autograd.grad(torch.nn.functional.cross_entropy(x, t), x)[0]
    step = bench.training_step(torch.nn.functional.cross_entropy, scales=(1024.0, 512.0))
    for scale in (1024.0, 512.0, 1024.0):
        step(x, t)
        assert torch.allclose(x.grad, scale * plain)


def test_in_turns_times_every_function_once_per_turn(monkeypatch):
    calls = []
    monkeypatch.setattr(bench, "time_ms", lambda fn, arg_sets, reps: calls.append(fn) or len(calls))
    times = bench.in_turns({"a": "fa", "b": "fb"}, [()], turns=3)
    assert calls == ["fa", "fb"] * 3  # alternating, so that a drift falls on both
    assert times == {"a": [1, 3, 5], "b": [2, 4, 6]}


def test_patched_sets_an_attribute_for_each_call_only():
    import types

    owner = types.SimpleNamespace(wanted=True)
    seen = []
    run = bench.patched(lambda: seen.append(owner.wanted), owner, "wanted", False)
    run()
    assert seen == [False] and owner.wanted is True
    with pytest.raises(ZeroDivisionError):
        bench.patched(lambda: 1 / 0, owner, "wanted", False)()
    assert owner.wanted is True  # put back after an error too


def test_kernel_lines_name_each_kernel_short_and_align_the_times():
    times = {"void row_cluster<__nv_bfloat16>(CrossEntropyArgs, long)": 350.62,
             "Memset (Device)": 0.7}
    lines = bench.kernel_lines("v4", times, {key: 1 for key in times})
    assert lines[0] == "  v4: row_cluster<__nv_bfloat16>    350.6 µs x1"
    assert lines[1].startswith("  v4: Memset ") and lines[1].endswith(" 0.7 µs x1")
    assert lines[0].index("µs") == lines[1].index("µs")  # the times in one column


def test_other_fused_heads_are_those_installed(monkeypatch):
    import builtins

    from kernels.ops import llm_head

    real_import = builtins.__import__

    def without_liger_and_cce(name, *args, **kwargs):
        if name.startswith(("liger_kernel", "cut_cross_entropy")):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", without_liger_and_cce)
    heads = llm_head.other_fused_heads()
    assert ("F.linear_cross_entropy" in heads) == hasattr(torch.nn.functional,
                                                          "linear_cross_entropy")
    assert not {"Liger-Kernel", "Cut Cross-Entropy"} & set(heads)
    assert llm_head.loss_only((torch.tensor(2.0), None)) == 2.0
    if "F.linear_cross_entropy" in heads:  # PyTorch's chunked path agrees with the reference
        h, w = torch.randn(6, 8, dtype=torch.float64), torch.randn(16, 8, dtype=torch.float64)
        t = torch.randint(0, 16, (6,))
        expected = torch.nn.functional.cross_entropy(h @ w.t(), t)
        assert torch.allclose(heads["F.linear_cross_entropy"](h, w, t), expected)


def test_the_lead_sleeps_longer_only_for_a_call_whose_host_work_needs_it(monkeypatch):
    from kernels.measure import events

    monkeypatch.setattr(events, "sleep_cycles_per_ms", lambda: 2e6)  # a 2 GHz clock
    assert events.sleep_for([]) == events.LEAD_CYCLES  # no warm-up: the usual lead
    assert events.sleep_for([0.02, 0.03, 0.02]) == events.LEAD_CYCLES  # a launch: 0.5 ms covers it
    # a training step, 0.3 ms a call on the host and one slow call: 4 x the median
    assert events.sleep_for([0.3, 0.25, 1.0]) == 4 * 0.3 * 2e6
