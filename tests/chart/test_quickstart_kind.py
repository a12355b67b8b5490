"""`docs/quickstart-kind.md` as written: each command of its `bash` blocks is either run here
the way it runs on kind (helm's rendering with the same arguments, the operator's validation
of the manifest, the CRD it installs, the image references the build script makes and the kind
load names), or named in the page as needing a live cluster. The job itself runs on the
emulation in `tests/operator/test_cluster_kind_example.py`; the images are built and run by
the image tier."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_operator.config import OperatorConfig
from dressage_operator.validation import spec_errors

from .tools import CHART, ROOT, require_tool, run_tool

DOC = ROOT / "docs" / "quickstart-kind.md"
NEEDS_A_CLUSTER = (
    "kind create cluster",
    "kind load",
    "kubectl -n dressage-system rollout status",
    "helm repo add",
    "helm install kube-prometheus-stack",
    "kubectl -n monitoring port-forward",
)
"""The page's commands that talk to kind or a live cluster (or the network): it must say so."""


def _commands() -> list[str]:
    text = DOC.read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def _command(prefix: str) -> list[str]:
    (found,) = [c for c in _commands() if c.startswith(prefix)]
    return shlex.split(found)


def _chart_defaults() -> tuple[str, str]:
    """The operator image the chart runs by default and the tag the build script uses."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(app_version) == version, "build-images.sh tags the project's version"
    return f"{values['image']['repository']}:{app_version}", version


def test_every_command_is_exercised_here_or_named_as_needing_a_cluster() -> None:
    handled = (
        "bash scripts/build-images.sh",
        "podman save",
        "helm install dressage-operator",
        "helm upgrade dressage-operator",
        "kubectl apply -f examples/kind-cpu.yaml",
        "kubectl get arj",
    )
    for command in _commands():
        assert command.startswith(handled + NEEDS_A_CLUSTER), f"unexercised: {command}"
    untested = DOC.read_text().split("Not run by the tests", 1)[1].split("\n## ", 1)[0]
    untested = " ".join(untested.split())
    for prefix in NEEDS_A_CLUSTER:
        assert f"`{prefix}`" in untested, f"the page does not say that {prefix!r} needs a cluster"


def test_the_images_built_and_loaded_are_the_ones_the_chart_and_the_example_name() -> None:
    """The page builds the operator and the CPU runtime, loads both into kind with Docker's
    `kind load docker-image` or Podman's one archive of both (`podman save -m`: without it the
    second name is saved as another tag of the first image), and those are the operator image
    the chart runs and the image every pod of the example names. (tests/images runs the build
    and the save as written, and loads the archive.)"""
    build = _command("bash scripts/build-images.sh")
    script = (ROOT / "scripts" / "build-images.sh").read_text()
    only = [build[i + 1] for i, a in enumerate(build) if a == "--only"]
    assert only == ["operator", "runtime-cpu"]
    assert "operator|runtime|runtime-cpu|sglang" in script
    operator_image, tag = _chart_defaults()
    registry = operator_image.rsplit("/", 1)[0]
    built = {f"{registry}/dressage-operator:{tag}", f"{registry}/dressage-runtime:{tag}-cpu"}
    load = _command("kind load docker-image")
    loaded = {a for a in load[3:] if not a.startswith("--") and a != "dressage"}
    assert loaded == built
    save = _command("podman save")
    assert save[:5] == ["podman", "save", "-m", "-o", "images.tar"], save
    assert set(save[5:]) == built
    archive = _command("kind load image-archive")
    assert archive[-1] == "images.tar"
    spec = yaml.safe_load((ROOT / "examples" / "kind-cpu.yaml").read_text())["spec"]
    named = {spec[role]["image"] for role in ("trainer", "inference", "proxy")}
    assert built == {operator_image, *named}
    assert named == {f"{OperatorConfig().runtime_image}-cpu"}


def _helm(args: list[str]) -> tuple[str, list[str]]:
    """`helm install|upgrade RELEASE CHART ...` as `helm template` arguments: the namespace and
    the `--set` values (install-only flags dropped)."""
    release, chart = args[2], args[3]
    assert (ROOT / chart).resolve() == CHART
    out = ["--namespace", args[args.index("--namespace") + 1]]
    for i, arg in enumerate(args):
        if arg == "--set":
            out += ["--set", args[i + 1]]
    return release, out


def _render(release: str, extra: list[str]) -> list[dict[str, Any]]:
    helm = require_tool("helm")
    lint = run_tool([helm, "lint", str(CHART), *extra])
    assert lint.returncode == 0, lint.stdout + lint.stderr
    result = run_tool([helm, "template", release, str(CHART), "--include-crds", *extra])
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


@pytest.fixture(scope="module")
def installed() -> tuple[str, list[str]]:
    return _helm(_command("helm install dressage-operator"))


def test_the_install_runs_the_loaded_operator_image_without_pulling(
    installed: tuple[str, list[str]],
) -> None:
    release, args = installed
    objects = _render(release, args)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    operator_image, _ = _chart_defaults()
    assert container["image"] == operator_image
    assert container["imagePullPolicy"] == "Never"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRESSAGE_OPERATOR_RUNTIME_IMAGE"] == OperatorConfig().runtime_image
    assert deployment["metadata"]["namespace"] == "dressage-system"
    (crd,) = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert "arj" in crd["spec"]["names"]["shortNames"]  # `kubectl get arj -w`


def test_the_dashboard_upgrade_ships_the_dashboard_and_the_monitors(
    installed: tuple[str, list[str]],
) -> None:
    release, args = installed
    upgrade = _command("helm upgrade dressage-operator")
    assert "--reuse-values" in upgrade
    _, more = _helm(upgrade)
    objects = _render(release, args + more[2:])
    kinds = {o["kind"]: o for o in objects}
    dashboard = [o for o in objects if o["kind"] == "ConfigMap" and "dressage.json" in o["data"]]
    (config_map,) = dashboard
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    for kind in ("ServiceMonitor", "PodMonitor"):
        assert kinds[kind]["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind


def test_the_applied_manifest_is_one_the_operator_accepts() -> None:
    command = _command("kubectl apply -f")
    path = ROOT / command[-1]
    assert path == ROOT / "examples" / "kind-cpu.yaml"
    job, errors = spec_errors(yaml.safe_load(path.read_text()), path.name)
    assert errors == ()
    assert job is not None
    assert job.spec.inference.engine == "embedded"
    assert "kind-cpu" in Path(DOC).read_text()
