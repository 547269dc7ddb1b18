"""kernels.measure.profile without a GPU: parsing ncu's CSV and cuobjdump's listing, and PTX from nvcc."""

import math
import re
import shutil

import pytest

from kernels.measure import profile

# ncu --csv --page raw --print-units base: a header row, a units row, one row per launch.
NCU_CSV = '''==PROF== Connected to process 123
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__registers_per_thread"
"","","","","","","","","","","","%","nsecond","register/thread"
"0","123","python","host","void block_atomics<MseLoss>(ReductionArgs)","1","7","(256, 1, 1)","(1056, 1, 1)","0","9.0","87.81","731,232","32"
"1","123","python","host","vector_grid_stride<MseLoss, true, false>(ReductionArgs, long, long)","1","7","(256, 1, 1)","(1056, 1, 1)","0","9.0","92.8","690,944","n/a"
'''


def test_parse_raw_csv_reads_each_launch_in_the_labels_units():
    labels = ("time (us)", "DRAM throughput (% of peak)", "registers per thread")
    rows = profile.parse_raw_csv(NCU_CSV, labels)
    assert [name for name, _ in rows] == ["void block_atomics<MseLoss>(ReductionArgs)",
                                          "vector_grid_stride<MseLoss, true, false>(ReductionArgs, long, long)"]
    first, second = rows[0][1], rows[1][1]
    assert first["time (us)"] == pytest.approx(731.232)  # ns -> us, thousands separator dropped
    assert first["DRAM throughput (% of peak)"] == pytest.approx(87.81)
    assert first["registers per thread"] == 32
    assert math.isnan(second["registers per thread"])  # "n/a": not measured on this GPU


def test_parse_raw_csv_says_when_nothing_was_profiled():
    with pytest.raises(RuntimeError, match="profiled no kernel"):
        profile.parse_raw_csv("==PROF== Disconnected\n", ("time (us)",))


def test_profile_table_has_a_column_per_launch_and_a_line_per_label():
    labels = ("time (us)", "DRAM throughput (% of peak)")
    table = profile.Profile(labels, profile.parse_raw_csv(NCU_CSV, labels)).table()
    lines = table.splitlines()
    assert "block_atomics<MseLoss>" in lines[0] and "vector_grid_stride<MseLoss, true, false>" in lines[0]
    assert lines[1].startswith("time (us)") and "731" in lines[1] and "691" in lines[1]
    assert re.search(r"87\.8\s+92\.8$", lines[2])


def test_kernel_lines_name_kernels_as_short_name_does_cut_to_a_width():
    from kernels import bench

    name = "void at::reduce_kernel<512, 1, ReduceOp<float, func_wrapper_t<sum_functor()>>>(X)"
    assert bench.kernel_name(name, 200) == profile.short_name(name)  # a '(' inside <>
    assert bench.kernel_name(name, 20) == "at::reduce_kernel<51"
    assert bench.kernel_lines("v4", {name: 12.34}, {name: 1}) == [
        f"  v4: {bench.kernel_name(name)}     12.3 µs x1"]


def test_short_name_keeps_template_arguments_and_drops_parameters():
    assert profile.short_name("void f<A<int>, 2>(Args, long)") == "f<A<int>, 2>"
    assert profile.short_name("at::reduce_kernel<512, 1>(X)") == "at::reduce_kernel<512, 1>"


def test_every_label_of_every_set_is_a_metric():
    for labels in (profile.MEMORY, profile.LATENCY, profile.BANKS, profile.ISSUE):
        assert set(labels) <= set(profile.METRICS)


SASS = """
	code for sm_90
		Function : _Z5firstPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                      /* 0x00000a00ff017b82 */
                                                                               /* 0x000fe20000000800 */
        /*0010*/                   LDG.E.128 R4, desc[UR8][R2.64] ;            /* 0x0000000802047981 */
        /*0020*/              @!P0 LDG.E.128 R8, desc[UR8][R6.64] ;            /* 0x0000000806088981 */
        /*0030*/                   FADD R4, R4, -R8 ;                          /* 0x8000000804047221 */
        /*0040*/                   EXIT ;                                      /* 0x000000000000794d */
		Function : _Z6secondPf
        /*0000*/                   LOP3.LUT P0, RZ, R2, 0x1, RZ, 0xc0, !PT ;  /* 0x0000000102ff7812 */
        /*0010*/                   EXIT ;                                      /* 0x000000000000794d */
"""


def test_functions_split_the_listing_and_keep_the_instructions_in_order():
    found = profile.functions(SASS)
    assert list(found) == ["_Z5firstPf", "_Z6secondPf"]
    assert found["_Z5firstPf"][1] == "LDG.E.128 R4, desc[UR8][R2.64]"
    assert found["_Z5firstPf"][2] == "@!P0 LDG.E.128 R8, desc[UR8][R6.64]"
    assert profile.opcode(found["_Z5firstPf"][2]) == "LDG.E.128"
    assert profile.count_opcodes(found["_Z5firstPf"], r"LDG\.E\.128") == 2
    assert profile.excerpt(found["_Z5firstPf"], r"FADD", 2) == "FADD R4, R4, -R8\nEXIT"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_fast_math_keeps_every_kahan_addition():
    """Chapter 4's claim, checked where CI runs: --use_fast_math adds .ftz, removes no add."""
    plain = profile.ptx("ch4_two_pass/v4_kahan_lanes.cu", function="tile_partials")
    fast = profile.ptx("ch4_two_pass/v4_kahan_lanes.cu", ("--use_fast_math",), "tile_partials")
    adds = re.compile(r"^\s*(add|sub)(\.ftz)?\.f32", re.MULTILINE)
    assert plain and ".entry" in plain
    assert len(adds.findall(plain)) == len(adds.findall(fast)) > 0
    assert ".ftz" not in plain and ".ftz" in fast


@pytest.mark.parametrize("marked", [False, True])
def test_ncu_profiles_only_the_marked_region_when_asked(monkeypatch, marked):
    """marked=True: ncu starts with profiling off; the code's torch.cuda.profiler.start() turns
    it on for every thread (autograd launches the backward from its own)."""
    seen = {}

    def fake_run(command, **kwargs):
        seen["command"] = command
        log = command[command.index("--log-file") + 1]
        with open(log, "w") as handle:
            handle.write(NCU_CSV)
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(profile, "ncu_path", lambda: "/usr/bin/ncu")
    monkeypatch.setattr(profile.subprocess, "run", fake_run)
    counters = profile.ncu("pass", ".", ("time (us)",), launches=50, marked=marked)
    assert len(counters.rows) == 2
    command = seen["command"]
    assert ("--profile-from-start" in command) == marked
    if marked:
        assert command[command.index("--profile-from-start") + 1] == "off"


def test_listed_arch_is_the_gpus_own_else_the_newest_older_one_with_a_warning():
    assert profile.listed_arch(["sm_75", "sm_90"], "sm_90") == "sm_90"
    assert profile.listed_arch(["sm_90a"], "sm_90") == "sm_90a"  # Hopper-only instructions
    with pytest.warns(UserWarning, match="no sm_90 machine code.*listing its sm_80 code"):
        assert profile.listed_arch(["sm_75", "sm_80", "sm_100"], "sm_90") == "sm_80"
    with pytest.raises(RuntimeError, match="no machine code for sm_75"):
        profile.listed_arch(["sm_90"], "sm_75")


@pytest.mark.skipif(not (shutil.which("nvcc") and profile.cuobjdump_path()),
                    reason="needs nvcc and cuobjdump (CUDA toolkit or Triton)")
def test_machine_code_archs_reads_a_library_built_for_a_small_gpu(tmp_path):
    import subprocess

    source = tmp_path / "k.cu"
    source.write_text("__global__ void first(float* x) { x[threadIdx.x] += 1.f; }\n")
    library = tmp_path / "k.so"  # what KERNELS_ARCHS=7.5+PTX builds: sm_75 code and its PTX
    subprocess.run(["nvcc", "-shared", "-Xcompiler", "-fPIC", "-gencode",
                    "arch=compute_75,code=[sm_75,compute_75]", "-o", str(library), str(source)],
                   check=True, capture_output=True)
    assert profile.machine_code_archs(profile.cuobjdump_path(), library) == ["sm_75"]
