"""bench/cross_entropy_targets.py on the CPU: check_targets=True is reported as a cost against
the default call, one line per shape, never as a PASS/MISS target."""

import importlib.util
from pathlib import Path

from kernels.measure.bench import Measurement

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ce_targets",
                                              ROOT / "bench" / "cross_entropy_targets.py")
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)


def rows(loss, checked_name, checked_ms, default_name, default_ms, nbytes=10**9):
    return [Measurement(loss, "eager", (1, 1), nbytes, 9.0),
            Measurement(loss, checked_name, (1, 1), nbytes, checked_ms),
            Measurement(loss, default_name, (1, 1), nbytes, default_ms)]


def test_check_targets_is_a_cost_per_call_with_no_verdict():
    forwards = {"fwd A": rows("ce", targets.CHECKED, 0.300, targets.UNCHECKED, 0.190)}
    fwd_bwd = rows("ce_fb", targets.FB_CHECKED, 0.500, targets.FB_DEFAULT, 0.400)
    lines = targets.checked_costs(forwards, fwd_bwd)
    assert len(lines) == 2
    assert lines[0].startswith("cost   fwd A, check_targets=True")
    assert "300 us a call against 190 (+110)" in lines[0]
    assert "3333 GB/s" in lines[0]  # 1 GB in 0.3 ms
    assert "fwd+bwd 32768x4096 fp32" in lines[1] and "(+100)" in lines[1]
    assert not any(line.startswith(("PASS", "MISS")) for line in lines)
