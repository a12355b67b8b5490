"""The quickstart pages' commands, run as written: every line of a `bash` block of
docs/quickstart-kind.md and docs/local-run.md that needs no cluster (`kind`, `kubectl` and
`helm` lines need one: tests/chart/test_quickstart_kind.py checks those against the chart and
the operator) runs here from the repository's root, as a user runs it from a clone, and must
succeed. The page is the source: the commands are read from it, never copied here.

What the test machines add, each in the environment and never in the command:
- the Podman settings these machines need (`CONTAINERS_CONF`, tests/images/support.py) and
  `DRESSAGE_CONTAINER_ENGINE=podman`;
- `DRESSAGE_STAND_IN_BASES=1`: the images' bases are the local stand-ins, as no registry can be
  pulled from here. With the tier's images built on them before (the `images` fixture), every
  layer is in the cache and the page's build takes seconds.
- a training run (`dressage run`, `scripts/run-local.sh`) gets `--steps 2 --workdir TMP
  --metrics-port 0` after the command: the page's 150 steps are the learning run's, which
  benchmarks/ measures.

The kind page's Podman path saves the operator and the CPU runtime into one archive; loaded
into an empty Podman store (`podman --root`), the archive gives both references, each at the
image the build made (without `-m`, the second reference would be a tag of the first image).
The build tags the chart's references (`ghcr.io/dressage/...`) in this machine's store; the test
puts back whatever those references named before it ran.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from .support import LOCK, ROOT, Images, podman, podman_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KIND_PAGE = ROOT / "docs" / "quickstart-kind.md"
LOCAL_PAGE = ROOT / "docs" / "local-run.md"
NEEDS_A_CLUSTER = ("kind ", "kubectl ", "helm ")
TRAINS = ("bash scripts/run-local.sh", "dressage run ", ".venv-run/bin/dressage run ")
"""Commands that train the page's job for its full length: cut to a few steps here."""
ARCHIVE = ROOT / "images.tar"
"""Where the page's `podman save -o images.tar` writes, run from the root of a clone."""


def page_commands(page: Path) -> list[str]:
    """Every command line of the page's `bash` blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.DOTALL)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def runs_here(command: str) -> bool:
    return not command.startswith(NEEDS_A_CLUSTER)


def run_as_written(command: str, env: dict[str, str], workdir: Path) -> str:
    """`command` run by bash from the repository's root; its output, or a failure naming it."""
    if command.startswith(TRAINS):
        argv = shlex.split(command, comments=True)  # the page's comment, if any, goes
        command = shlex.join([*argv, "--steps", "2", "--workdir", str(workdir)])
        command += " --metrics-port 0"
    result = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"`{command}` exited with {result.returncode}:\n{output[-4000:]}"
    return output


def image_id(reference: str, *store: str) -> str | None:
    found = podman(*store, "image", "inspect", "--format", "{{.Id}}", reference, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


@dataclass(frozen=True)
class KindPageRun:
    commands: list[str]
    saved: list[str]
    """The references the page's `podman save` names."""
    built: dict[str, str | None]
    """Each saved reference's image id in this machine's store after the page's build."""
    loaded: dict[str, str | None]
    """Each saved reference's image id in an empty store the archive was loaded into."""
    tier: dict[str, str | None]
    """The image ids of the tier's own operator and CPU runtime builds."""


@pytest.fixture(scope="module")
def kind_page(images: Images, tmp_path_factory: pytest.TempPathFactory) -> KindPageRun:
    commands = [c for c in page_commands(KIND_PAGE) if runs_here(c)]
    (save,) = [shlex.split(c) for c in commands if c.startswith("podman save")]
    saved = [a for a in save[2:] if not a.startswith("-") and a != "images.tar"]
    assert not ARCHIVE.exists(), f"{ARCHIVE} exists: the page's save would overwrite it"
    env = {**podman_env(), "DRESSAGE_STAND_IN_BASES": "1"}
    store = tmp_path_factory.mktemp("empty-store")
    root = ("--root", str(store / "root"), "--runroot", str(store / "run"))
    # One build at a time on this machine: the tier's lock (support.ensure_images).
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = {reference: image_id(reference) for reference in saved}
        try:
            for command in commands:
                run_as_written(command, env, tmp_path_factory.mktemp("runs"))
            built = {reference: image_id(reference) for reference in saved}
            assert ARCHIVE.is_file(), "the page's save wrote no images.tar"
            podman(*root, "load", "--input", str(ARCHIVE), timeout=900)
            loaded = {reference: image_id(reference, *root) for reference in saved}
        finally:
            ARCHIVE.unlink(missing_ok=True)
            for reference, previous in before.items():
                if previous is None:
                    podman("rmi", reference, check=False)
                else:
                    podman("tag", previous, reference, check=False)
            podman(*root, "rmi", "--all", "--force", check=False)
            shutil.rmtree(store, ignore_errors=True)
    tier = {"operator": image_id(images.operator), "runtime-cpu": image_id(images.runtime_cpu)}
    return KindPageRun(commands, saved, built, loaded, tier)


def test_the_kind_pages_build_and_save_run_as_written(kind_page: KindPageRun) -> None:
    """The build and the Podman save: the page's commands that need no cluster (the fixture
    fails on the first one that fails); the build reused the tier's images, layer for layer."""
    assert [c.split()[:2] for c in kind_page.commands] == [
        ["bash", "scripts/build-images.sh"],
        ["podman", "save"],
    ], kind_page.commands
    operator, runtime = kind_page.saved
    assert kind_page.built[operator] == kind_page.tier["operator"], kind_page
    assert kind_page.built[runtime] == kind_page.tier["runtime-cpu"], kind_page


def test_the_podman_archive_loads_both_images_into_an_empty_store(
    kind_page: KindPageRun,
) -> None:
    """Both references of the archive, loaded where nothing was, name the images the build
    made: the operator the operator, the CPU runtime the CPU runtime (two different images)."""
    built, loaded = kind_page.built, kind_page.loaded
    assert len(kind_page.saved) == 2, kind_page.saved
    assert None not in built.values(), built
    assert len(set(built.values())) == 2, built
    assert loaded == built


def test_the_local_pages_commands_run_as_written(tmp_path: Path) -> None:
    """`bash scripts/run-local.sh` sets up `.venv-run` and trains; the page's next line runs
    the same job with that environment's `dressage`."""
    commands = [c for c in page_commands(LOCAL_PAGE) if runs_here(c)]
    assert commands, f"no bash block in {LOCAL_PAGE}"
    for i, command in enumerate(commands):
        workdir = tmp_path / f"runs-{i}"
        run_as_written(command, dict(os.environ), workdir)
        history = (workdir / "local-tiny" / "history.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in history] == [1, 2], history
