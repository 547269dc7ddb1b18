"""Every benchmark script starts as the README shows it, from the repository's root with the
venv's Python and no PYTHONPATH: ``--help`` answers without a GPU, and without a GPU the script
says in one line what it needs and exits non-zero, with no traceback (issue 57).

The scripts run as subprocesses with ``CUDA_VISIBLE_DEVICES`` empty, so this holds on a GPU
machine too, all at once: each spends its seconds importing torch.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# bench/*.py, and the run.py of each experiment under bench/experiments/ (run the same way).
SCRIPTS = sorted(p.relative_to(ROOT).as_posix() for pattern in ("*.py", "experiments/*/run.py")
                 for p in (ROOT / "bench").glob(pattern))


def run_all(argv: list[str]) -> dict[str, subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "TORCH_CUDA_ARCH_LIST", "KERNELS_ARCHS")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU, even on a machine that has one
    procs = {script: subprocess.Popen([sys.executable, script, *argv], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for script in SCRIPTS}
    done = {}
    for script, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[script] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.fixture(scope="module")
def without_gpu():
    return run_all([])


@pytest.fixture(scope="module")
def with_help():
    return run_all(["--help"])


def test_the_scripts_are_found():
    assert "bench/reduction_targets.py" in SCRIPTS and len(SCRIPTS) >= 15, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_needs_no_gpu(script, with_help):
    done = with_help[script]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    assert done.stdout.startswith("usage: "), done.stdout


@pytest.mark.parametrize("script", SCRIPTS)
def test_without_a_gpu_one_line_and_non_zero(script, without_gpu):
    done = without_gpu[script]
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith(f"{script} needs "), lines[0]
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr[-2000:])


def test_require_gpus_says_what_it_needs(capsys, monkeypatch):
    import torch

    from kernels.build.toolchain import require_gpus

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert require_gpus(1, "bench/x.py") == 1
    with pytest.raises(SystemExit) as stop:
        require_gpus(2, "bench/x.py")
    assert stop.value.code == 2
    assert capsys.readouterr().out == "bench/x.py needs 2 CUDA GPU(s); this machine has 1.\n"
