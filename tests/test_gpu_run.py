"""tools/gpu_run.sh packs only what its call wrote (no GPU needed: a fake target script).

Each call's outputs.tgz once held the checkout's whole book/results, so unpacking a later
call's pack over an earlier one's put the old CSVs back in place of the new ones.
"""

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fake_checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "gpu_run.sh", repo / "tools")
    for old in ("chapters/01_a.ipynb", "book/results/old.csv", "book/status.md"):
        (repo / old).parent.mkdir(parents=True, exist_ok=True)
        (repo / old).write_text("from the checkout\n")
    (repo / "bench").mkdir()
    for name in ("first", "second"):
        (repo / "bench" / f"{name}_targets.py").write_text(
            f"open('book/results/{name}.csv', 'w').write('measured\\n')\n")
    return repo


def run(repo: Path, out: Path, target: str) -> list[str]:
    env = {"PATH": os.environ["PATH"], "OUT": str(out), "TARGETS": target,
           "NOTEBOOKS": "chapters/01_a.ipynb"}
    subprocess.run(["bash", "tools/gpu_run.sh", "targets"], cwd=repo, env=env, check=True,
                   capture_output=True)
    with tarfile.open(out / "outputs.tgz") as pack:
        return sorted(pack.getnames())


def test_a_call_packs_the_files_it_wrote_and_not_the_checkouts(tmp_path):
    repo, out = fake_checkout(tmp_path), tmp_path / "out"
    out.mkdir()
    assert run(repo, out, "first") == ["book/results/first.csv"]
    # A second invocation in the same call keeps the first one's files in the pack.
    assert run(repo, out, "second") == ["book/results/first.csv", "book/results/second.csv"]
