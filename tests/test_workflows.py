"""The GitHub workflows (issue 57): the book is built with the README's command and deployed to
Pages on every push to main; pull requests run .ci/run. Checked here without GitHub: each file
parses, has the keys a workflow needs, and calls only make targets and files that exist."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
MAKE_TARGETS = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def load(name: str) -> dict:
    data = yaml.safe_load((WORKFLOWS / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


def runs(workflow: dict) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job["steps"]
            if "run" in step]


@pytest.mark.parametrize("name", sorted(p.name for p in WORKFLOWS.glob("*.yml")))
def test_a_workflow_is_well_formed(name):
    workflow = load(name)
    assert isinstance(workflow["name"], str) and workflow["on"], name
    assert workflow["jobs"], name
    for job_name, job in workflow["jobs"].items():
        assert job["runs-on"] == "ubuntu-latest", job_name
        for need in [job["needs"]] if isinstance(job.get("needs"), str) else job.get("needs", []):
            assert need in workflow["jobs"], (job_name, need)
        assert job["steps"], job_name
        for step in job["steps"]:
            assert ("uses" in step) != ("run" in step), step
            if "uses" in step:
                assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+", step["uses"]), step["uses"]
    for command in runs(workflow):
        for target in re.findall(r"\bmake\s+([\w-]+)", command):
            assert target in MAKE_TARGETS, f"{name}: make {target} is not a target of the Makefile"
        for script in re.findall(r"\bbash\s+(\S+)", command):
            assert (ROOT / script).is_file(), f"{name}: {script} does not exist"


def test_the_book_is_built_as_the_readme_says_and_deployed_from_main():
    workflow = load("book.yml")
    assert workflow["on"]["push"]["branches"] == ["main"]
    assert workflow["permissions"]["pages"] == "write" and workflow["permissions"]["id-token"] == "write"
    build, deploy = workflow["jobs"]["build"], workflow["jobs"]["deploy"]
    assert runs({"jobs": {"build": build}}) == ["make book"]
    assert "make book" in (ROOT / "README.md").read_text()
    assert "jupyter-book build . -W -n" in (ROOT / "Makefile").read_text()
    upload = [s for s in build["steps"] if s.get("uses", "").startswith("actions/upload-pages-artifact")]
    assert [s["with"]["path"] for s in upload] == ["_build/html"]
    assert deploy["needs"] == "build" and deploy["environment"]["name"] == "github-pages"
    assert [s["uses"].split("@")[0] for s in deploy["steps"]] == ["actions/deploy-pages"]


def test_pull_requests_run_ci():
    workflow = load("ci.yml")
    assert "pull_request" in workflow["on"]
    assert "bash .ci/run" in runs(workflow)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_the_readme_says_where_the_book_is_published():
    # The address is derived from _config.yml's repository.url, written there only.
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url)
    assert "https://OWNER.github.io/REPO/" in (ROOT / "README.md").read_text()


def test_the_mutation_score_is_a_job_of_its_own():
    """Issue 60: `make mutation` runs for hours, so weekly and on demand, not on pull requests."""
    workflow = load("mutation.yml")
    assert set(workflow["on"]) == {"schedule", "workflow_dispatch"}
    assert any(command.startswith("make mutation") for command in runs(workflow))
    assert "mutation" in MAKE_TARGETS
