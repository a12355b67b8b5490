"""The Dockerfiles in images/: hadolint-clean, pinned bases that run what the tests run (the
default SGLang release, the tests' torch), OCI labels, non-root operator without torch, and the
dependency lists they install before the project (images/requirements.py). These tests read
the files; the images tier (tests/images) builds the images with podman on local stand-in bases
and runs them."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_operator.config import (
    DEFAULT_RUNTIME_IMAGE,
    DEFAULT_SGLANG_IMAGE,
)

from dressage.api.sglang import SGLANG_DEFAULT_VERSION
from tests.chart.tools import CHART, ROOT, require_tool, run_tool

IMAGES = ROOT / "images"
DOCKERFILES = sorted(IMAGES.glob("*/Dockerfile"))
STAND_IN_DOCKERFILES = sorted(IMAGES.glob("stand-in/*.Dockerfile"))
"""The stand-in bases' recipes (scripts/build-stand-in-bases.sh), linted too."""
OCI_LABELS = ("title", "description", "source", "licenses", "version", "revision")
# An exact version tag: digits and dots, optionally with a suffix (e.g. -cu126), never latest.
PINNED_TAG = re.compile(r"^[\w./-]+:v?\d+\.\d+\.\d+[\w.-]*$")


def test_every_image_has_a_dockerfile() -> None:
    assert {p.parent.name for p in DOCKERFILES} == {"operator", "runtime", "sglang"}
    assert (ROOT / ".dockerignore").is_file()


@pytest.mark.parametrize(
    "dockerfile",
    DOCKERFILES + STAND_IN_DOCKERFILES,
    ids=lambda p: p.parent.name if p.name == "Dockerfile" else f"stand-in-{p.stem}",
)
def test_hadolint_passes(dockerfile: Path) -> None:
    hadolint = require_tool("hadolint")
    result = run_tool([hadolint, str(dockerfile)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_reports_a_bad_dockerfile(tmp_path: Path) -> None:
    hadolint = require_tool("hadolint")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN apt-get update && apt-get install curl\n")
    result = run_tool([hadolint, str(bad)])
    assert result.returncode != 0
    assert "DL3006" in result.stdout  # untagged base image


def _base_images(text: str) -> list[str]:
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.MULTILINE))
    bases = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    return [args.get(b.strip("${}"), b) for b in bases]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_bases_are_pinned_and_labels_present(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    for base in _base_images(text):
        assert PINNED_TAG.match(base), f"{dockerfile}: base {base} is not an exact version tag"
    for label in OCI_LABELS:
        assert f"org.opencontainers.image.{label}=" in text, label


def test_operator_image_is_non_root_and_has_no_torch() -> None:
    text = (IMAGES / "operator" / "Dockerfile").read_text()
    assert re.search(r"^USER 65532:65532$", text, re.MULTILINE)
    assert "--extra operator" in text
    assert "--extra train" not in text
    # The build fails if torch, the kubernetes client or tokenizers end up installed.
    assert "for m in ('torch', 'kubernetes', 'tokenizers')" in text


def test_runtime_image_uses_cuda_torch_and_installs_the_train_extra() -> None:
    text = (IMAGES / "runtime" / "Dockerfile").read_text()
    (base,) = set(_base_images(text))
    assert base.startswith("pytorch/pytorch:")
    assert "-cuda" in base
    assert "--extra train" in text
    assert re.search(r"^USER 1000:1000$", text, re.MULTILINE)


def test_sglang_image_extends_the_upstream_image_of_the_default_release() -> None:
    """The engine image runs the SGLang release `spec.inference.sglangVersion` defaults to
    (the newest tested one)."""
    (base,) = set(_base_images((IMAGES / "sglang" / "Dockerfile").read_text()))
    assert base.startswith(f"lmsysorg/sglang:v{SGLANG_DEFAULT_VERSION}-")


def test_the_default_engine_image_tag_names_the_default_sglang_release() -> None:
    """The chart's default engine image, and the operator's own default without the chart,
    are tagged `<appVersion>-sglang<release>` for the release a job defaults to: moving the
    default (`dressage.api.sglang`) without them fails here."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    sglang = values["jobImages"]["sglang"]
    assert sglang["tag"] == f"{app_version}-sglang{SGLANG_DEFAULT_VERSION}"
    assert f"{sglang['repository']}:{sglang['tag']}" == DEFAULT_SGLANG_IMAGE


def test_the_runtime_image_runs_the_torch_release_the_tests_run() -> None:
    """The tests run the CPU build of the torch that `scripts/setup.sh` pins; the trainer
    image's base is that release's CUDA build."""
    (pin,) = re.findall(r'"torch==([\d.]+)"', (ROOT / "scripts" / "setup.sh").read_text())
    (base,) = set(_base_images((IMAGES / "runtime" / "Dockerfile").read_text()))
    assert base.startswith(f"pytorch/pytorch:{pin}-cuda"), (base, pin)


def _requirements_module() -> Any:
    spec = importlib.util.spec_from_file_location("image_requirements", IMAGES / "requirements.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_operator_image_installs_the_core_and_operator_extra_less_the_model_side() -> None:
    """The operator image's dependency list: pyproject's core and `operator` extra, less the
    packages only the proxy, the trainer and the chat layer import (the Dockerfile's
    `--leave-out`); a name that leaves pyproject makes the build fail, not pass silently."""
    text = (IMAGES / "operator" / "Dockerfile").read_text()
    (leave_out,) = re.findall(r"--leave-out ([\w -]+?)\s*\\?\n", text)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module = _requirements_module()
    chosen = module.requirements(project, ["operator"], leave_out.split())
    names = {module.requirement_name(r) for r in chosen}
    assert {"kopf", "kubernetes-validate", "pydantic", "pyyaml", "httpx"} <= names
    assert not names & {"tokenizers", "jinja2", "kubernetes", "torch", "transformers"}
    with pytest.raises(SystemExit, match="no-such-package"):
        module.requirements(project, ["operator"], ["no-such-package"])


def test_the_build_script_names_the_images_the_chart_and_the_operator_default_to() -> None:
    """`scripts/build-images.sh` with no registry or tag builds exactly the images a default
    install runs: the chart's operator image at its appVersion, and the runtime and default
    SGLang release's engine images the operator names (`--dry-run` prints them)."""
    result = run_tool(["bash", str(ROOT / "scripts" / "build-images.sh"), "--dry-run"], timeout=60)
    assert result.returncode == 0, result.stderr
    built = dict(line.split("=", 1) for line in result.stdout.splitlines())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert built == {
        "operator": f"{values['image']['repository']}:{app_version}",
        "runtime": DEFAULT_RUNTIME_IMAGE,
        f"sglang-{SGLANG_DEFAULT_VERSION}": DEFAULT_SGLANG_IMAGE,
    }
    runtime, sglang = values["jobImages"]["runtime"], values["jobImages"]["sglang"]
    assert f"{runtime['repository']}:{runtime['tag'] or app_version}" == DEFAULT_RUNTIME_IMAGE
    assert f"{sglang['repository']}:{sglang['tag']}" == DEFAULT_SGLANG_IMAGE
