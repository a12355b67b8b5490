"""`scripts/build-images.sh` as a user runs it: which engine it picks and says it picked, the
settings it leaves to the engine's user, the CPU runtime's build, and the multi-platform
builds the release runs.

The engine is the boundary here: `docker` and `podman` on PATH are stand-ins that record their
arguments and the `CONTAINERS_CONF` they were given, and build nothing (the images tier builds
and runs the images with the real podman: tests/images).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.chart.tools import ROOT

BUILD_SCRIPT = ROOT / "scripts" / "build-images.sh"
ENGINE = """#!/bin/sh
echo "$(basename "$0") CONTAINERS_CONF=${CONTAINERS_CONF-unset} $*" >> "$ENGINE_LOG"
"""
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _torch_pin() -> str:
    (pin,) = re.findall(r'"torch==([\d.]+)"', (ROOT / "scripts" / "setup.sh").read_text())
    return pin


def _python_base() -> str:
    text = (ROOT / "images" / "operator" / "Dockerfile").read_text()
    (base,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    return base


@pytest.fixture
def engines(tmp_path: Path) -> Path:
    """A directory holding recording `docker` and `podman`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("docker", "podman"):
        path = bin_dir / name
        path.write_text(ENGINE)
        path.chmod(0o755)
    return bin_dir


def _build(
    engines: Path, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """The script run with the recording engines first on PATH; its result and the engine
    calls, one line each (`ENGINE CONTAINERS_CONF=... ARGS`)."""
    log = engines.parent / "engine.log"
    log.unlink(missing_ok=True)
    environment = {k: v for k, v in os.environ.items() if k != "DRESSAGE_CONTAINER_ENGINE"}
    environment.pop("CONTAINERS_CONF", None)
    environment.update(PATH=f"{engines}{os.pathsep}{os.environ['PATH']}", ENGINE_LOG=str(log))
    environment.update(env)
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    calls = log.read_text().splitlines() if log.exists() else []
    return result, calls


def test_with_docker_and_podman_installed_it_builds_with_docker_and_says_so(
    engines: Path,
) -> None:
    """kind runs on Docker unless told otherwise, and `kind load docker-image` reads Docker's
    store: with both engines on PATH the images go there."""
    result, calls = _build(engines, "--only", "operator")
    assert result.returncode == 0, result.stderr
    assert calls, result.stderr
    assert all(c.startswith("docker ") for c in calls), calls
    first = result.stderr.splitlines()[0]
    assert f"building with docker ({engines / 'docker'})" in first, result.stderr
    assert "DRESSAGE_CONTAINER_ENGINE=docker|podman" in first


def test_dressage_container_engine_picks_podman_and_leaves_its_settings_alone(
    engines: Path,
) -> None:
    """A user's podman runs with the user's settings (crun where that is the runtime): the
    script sets no `CONTAINERS_CONF`, so the test machines' runc and ulimits never reach it."""
    result, calls = _build(engines, "--only", "operator", DRESSAGE_CONTAINER_ENGINE="podman")
    assert result.returncode == 0, result.stderr
    assert calls, result.stderr
    assert all(c.startswith("podman CONTAINERS_CONF=unset build ") for c in calls), calls
    assert "building with podman" in result.stderr


def test_an_engine_other_than_docker_or_podman_is_refused_by_name(engines: Path) -> None:
    result, calls = _build(engines, "--only", "operator", DRESSAGE_CONTAINER_ENGINE="nerdctl")
    assert result.returncode == 2
    assert calls == []
    assert result.stderr.strip() == "DRESSAGE_CONTAINER_ENGINE=nerdctl: docker or podman"


@pytest.mark.parametrize("engine", ["docker", "podman"])
def test_dressage_build_cpu_shares_weights_every_build_and_nothing_else(
    engines: Path, engine: str
) -> None:
    """The test command builds the images beside the suite with `DRESSAGE_BUILD_CPU_SHARES=2`:
    each build's RUN steps get that CPU weight (`build --cpu-shares`, which both engines take),
    and no other engine call changes. Unset, a build carries no weight of its own."""
    result, calls = _build(
        engines, "--only", "operator", DRESSAGE_CONTAINER_ENGINE=engine,
        DRESSAGE_BUILD_CPU_SHARES="2",
    )
    assert result.returncode == 0, result.stderr
    builds = [c for c in calls if " build " in f"{c} "]
    assert builds, calls
    assert all(f"{engine} CONTAINERS_CONF=unset build --cpu-shares 2 --network host " in c
               for c in builds), builds
    _, unweighted = _build(engines, "--only", "operator", DRESSAGE_CONTAINER_ENGINE=engine)
    assert unweighted == [c.replace(" --cpu-shares 2", "") for c in calls]
    assert not any("--cpu-shares" in c for c in unweighted)


@pytest.mark.parametrize("shares", ["1", "0", "two", "262145", "-5"])
def test_a_cpu_weight_the_engines_refuse_is_refused_by_name(engines: Path, shares: str) -> None:
    result, calls = _build(engines, "--only", "operator", DRESSAGE_BUILD_CPU_SHARES=shares)
    assert result.returncode == 2
    assert calls == []
    assert result.stderr.strip() == (
        f"DRESSAGE_BUILD_CPU_SHARES={shares}: a whole number, 2 to 262144"
    )


def test_the_cpu_runtime_installs_torch_from_the_pytorch_cpu_index_on_the_python_base(
    engines: Path,
) -> None:
    """`--only runtime-cpu`: the runtime's Dockerfile on the operator's Python base, torch at
    the tests' pin from PyTorch's CPU index, tagged `VERSION-cpu`."""
    result, calls = _build(engines, "--only", "runtime-cpu", "--registry", "r.example/team")
    assert result.returncode == 0, result.stderr
    (call,) = calls
    assert "--file images/runtime/Dockerfile" in call
    for arg in (
        f"TORCH_IMAGE={_python_base()}",
        f"TORCH_INDEX_URL={PYTORCH_CPU_INDEX}",
        f"TORCH_VERSION={_torch_pin()}",
        "TORCH_BUILD=CPU",
    ):
        assert f"--build-arg {arg} " in call, (arg, call)
    assert "--tag r.example/team/dressage-runtime:0.1.0-cpu ." in call, call
    assert result.stdout.splitlines() == ["runtime-cpu=r.example/team/dressage-runtime:0.1.0-cpu"]


def test_a_multi_platform_build_uses_buildx_with_docker_and_a_manifest_with_podman(
    engines: Path,
) -> None:
    """The release's `--platform linux/amd64,linux/arm64 --push`: docker builds and pushes
    both platforms at once with buildx; podman builds into a manifest list and pushes it."""
    platforms = "linux/amd64,linux/arm64"
    args = ("--only", "operator", "--registry", "r.example", "--push", "--platform", platforms)
    reference = "r.example/dressage-operator:0.1.0"
    result, calls = _build(engines, *args, DRESSAGE_CONTAINER_ENGINE="docker")
    assert result.returncode == 0, result.stderr
    (call,) = calls
    assert call.startswith(f"docker CONTAINERS_CONF=unset buildx build --platform {platforms} ")
    assert call.endswith(f" --push --tag {reference} ."), call
    result, calls = _build(engines, *args, DRESSAGE_CONTAINER_ENGINE="podman")
    assert result.returncode == 0, result.stderr
    assert [c.split(" ", 2)[2] for c in calls[:1] + calls[2:]] == [
        f"manifest rm {reference}",
        f"manifest push --all {reference} docker://{reference}",
    ], calls
    assert calls[1].startswith(f"podman CONTAINERS_CONF=unset build --platform {platforms} ")
    assert calls[1].endswith(f" --manifest {reference} ."), calls


def test_the_runtime_dockerfile_defaults_to_the_tests_torch_release() -> None:
    text = (ROOT / "images" / "runtime" / "Dockerfile").read_text()
    assert f"ARG TORCH_VERSION={_torch_pin()}\n" in text
    assert "--extra train --leave-out torch" in text
