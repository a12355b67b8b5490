"""Podman for the tests: whether it can run here, how to call it, and the project's images.

The images tier (`tests/images`) and the test kubelet's container mode run Dressage's images
with podman, the container engine Debian packages. This host's cgroups need podman's settings
in `images/podman/containers.conf` (runc instead of crun, explicit ulimits); every call here,
and every script the tests run, names it with `CONTAINERS_CONF` (an environment variable the
caller's own value overrides), so nothing under /etc changes. The tests apply those settings;
the scripts a user runs (scripts/build-images.sh) never do: a user's podman runs as they set it
up (crun, their limits). `DRESSAGE_CONTAINER_ENGINE=podman` makes the scripts build into
podman's store, where the tests run the images, on a machine that has docker too (CI's).

No registry can be pulled from on the test machines, so `ensure_images` builds the images
with `scripts/build-images.sh --stand-in-bases` (Debian and Python made by debootstrap, the CPU
torch, each tested SGLang release's Python package: `scripts/build-stand-in-bases.sh`), once per
test session and process; a second call returns at once. Podman's layer cache makes a build on
a machine that built them before take seconds. Processes of one session (pytest-xdist
workers) build one after the other (a file lock), so the second finds every layer built.
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_CONF = ROOT / "images" / "podman" / "containers.conf"
BUILD_SCRIPT = ROOT / "scripts" / "build-images.sh"
REGISTRY = "localhost/dressage"
"""Where the tests' images are tagged: never the chart's registry, so a stand-in build never
replaces an image built from the real bases."""
BUILD_TIMEOUT_S = 3600.0
"""A first build here (the stand-in bases, then the three images) takes tens of minutes."""
LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "dressage-images-build.lock"


def podman_env() -> dict[str, str]:
    """The environment every podman call and image script of the tests runs with: this
    process's, with `CONTAINERS_CONF` naming the test machines' settings unless it is already
    set, and the scripts' engine podman."""
    env = dict(os.environ)
    env.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))
    env["DRESSAGE_CONTAINER_ENGINE"] = "podman"
    return env


def podman(
    *args: str, check: bool = True, timeout: float | None = 600, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `podman ARGS...` with the project's settings, output captured as text. With
    `check`, a non-zero exit raises `PodmanError` carrying the command's output."""
    executable = shutil.which("podman")
    if executable is None:
        raise PodmanError(["podman", *args], None, "", "podman is not on PATH")
    result = subprocess.run(
        [executable, *args],
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        check=False,
    )
    if check and result.returncode != 0:
        raise PodmanError(result.args, result.returncode, result.stdout, result.stderr)
    return result


class PodmanError(RuntimeError):
    """A podman command that failed; the message holds its output."""

    def __init__(self, args: list[str], returncode: int | None, stdout: str, stderr: str):
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        tail = (stdout + stderr).strip()[-4000:]
        super().__init__(f"`{' '.join(args)}` exited with {returncode}:\n{tail}")


@functools.cache
def podman_unavailable_reason() -> str | None:
    """Why podman cannot run containers here (for a skip message), None when it can: it must
    be on PATH with runc beside it, and answer `podman info` with the project's settings."""
    if shutil.which("podman") is None:
        return (
            "podman is not on PATH (Debian: apt-get install podman runc debootstrap; "
            "scripts/install-tools.sh installs them as root)"
        )
    if shutil.which("runc") is None:
        return "runc is not on PATH (images/podman/containers.conf names it as the runtime)"
    try:
        podman("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout=120)
    except (PodmanError, subprocess.TimeoutExpired) as exc:
        return f"podman cannot run here: {exc}"
    return None


def require_podman() -> None:
    """Skip the calling test when podman cannot run here, with the reason; on CI (`CI=true`)
    fail instead: `.ci/run` installs podman (scripts/install-tools.sh), so there a missing or
    broken podman is a broken machine, not a reason to test less."""
    import pytest

    reason = podman_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI runs the images tier, and podman cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


@dataclass(frozen=True)
class Images:
    """Local references of the project's images, built on the stand-in bases."""

    operator: str
    runtime: str
    runtime_cpu: str
    """`dressage-runtime:VERSION-cpu`, the kind quickstart's runtime (here on the same stand-in
    torch base as `runtime`: the CPU build of torch from this machine's wheel)."""
    sglang: tuple[tuple[str, str], ...]
    """(SGLang release, engine image) for each tested release, oldest first."""
    bases: tuple[tuple[str, str], ...]
    """(build name, stand-in base) of each image (`all()`'s names)."""
    build_seconds: float
    """How long `ensure_images`' build took in this process (cached layers: seconds)."""

    def sglang_image(self, release: str) -> str:
        """The engine image of one tested SGLang release."""
        return dict(self.sglang)[release]

    def all(self) -> dict[str, str]:
        """Every image by its build name (`operator`, `runtime`, `runtime-cpu`,
        `sglang-<release>`)."""
        named = {"operator": self.operator, "runtime": self.runtime}
        named["runtime-cpu"] = self.runtime_cpu
        named.update({f"sglang-{release}": ref for release, ref in self.sglang})
        return named


def tested_releases() -> tuple[str, ...]:
    from dressage.api.sglang import SGLANG_TESTED_RELEASES

    return SGLANG_TESTED_RELEASES


def build_command() -> list[str]:
    """The build `ensure_images` runs: every image, every tested release, stand-in bases."""
    command = ["bash", str(BUILD_SCRIPT), "--registry", REGISTRY, "--stand-in-bases"]
    for image in ("operator", "runtime", "runtime-cpu", "sglang"):
        command += ["--only", image]
    for release in tested_releases():
        command += ["--sglang-release", release]
    return command


_lock = threading.Lock()


@functools.cache
def _built() -> Images:
    reason = podman_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    started = time.monotonic()
    with LOCK.open("a") as lock_file:
        fcntl.flock(lock_file, fcntl.LOCK_EX)
        result = subprocess.run(
            build_command(),
            cwd=ROOT,
            env=podman_env(),
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
    if result.returncode != 0:
        raise PodmanError(result.args, result.returncode, result.stdout, result.stderr)
    built = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    return Images(
        operator=built["operator"],
        runtime=built["runtime"],
        runtime_cpu=built["runtime-cpu"],
        sglang=tuple((r, built[f"sglang-{r}"]) for r in tested_releases()),
        bases=tuple((k.removesuffix(".base"), v) for k, v in built.items() if k.endswith(".base")),
        build_seconds=time.monotonic() - started,
    )


def ensure_images() -> Images:
    """The project's images, built (or found built) once per process; raises with the build's
    output when it fails, and when podman cannot run (`podman_unavailable_reason`)."""
    with _lock:
        return _built()


def main() -> int:
    """`python -m tests.images.support`: build the images (`ensure_images`) ahead of the images
    tier, as `scripts/test.sh` does in the background while the rest of the suite runs. Exits 0
    when podman cannot run here (the tier itself then skips or fails, with the reason) and 1
    when the build fails (the tier's own `ensure_images` then runs it again and reports it)."""
    reason = podman_unavailable_reason()
    if reason is not None:
        print(f"images not built: {reason}")
        return 0
    try:
        images = ensure_images()
    except (PodmanError, subprocess.TimeoutExpired) as exc:
        print(f"images build failed: {exc}")
        return 1
    print(f"images built in {images.build_seconds:.0f} s: {', '.join(images.all().values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
