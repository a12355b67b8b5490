"""A test container's main process and how the test kubelet runs it: a local process (fresh, or
forked from the suite's warm fork server), or, in the container mode, a container of the pod's
image run by podman (`kubelet_container` says how a container's spec becomes its `podman run`);
and the signals and `exec`s a kubelet's container runtime delivers to it.

The kubelet asks a `Runner` which of a pod's paths it rewrites, which program runs, and to
start a container: `LocalProcesses` runs every container here, `Containers` runs those whose
image it names in that image and hands the others to `LocalProcesses`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any, Protocol

from dressage_testkit.forkserver import ForkClient, ForkedProcess

from .kubelet_command import local_program
from .kubelet_container import container_name, podman_reads, podman_run
from .kubelet_wiring import mount_map

Obj = dict[str, Any]
KUBELET_LABEL = "dressage.io/test-kubelet"
"""The label of every container a test kubelet starts: `<pid>.<n>`, its process and instance."""
START_WAIT_S = 30.0
"""How long a signal waits for a container `podman run` is still creating."""
_instances = itertools.count()


class PodView(Protocol):
    """What a runner reads of the kubelet's pod."""

    name: str
    uid: str
    manifest: Obj
    root: Path
    mounts: dict[str, Path]
    """Volume name -> its host directory."""


class Podman:
    """How podman runs on this machine: its program, and its environment (`CONTAINERS_CONF`
    naming the settings this host needs)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.program = shutil.which("podman") or "podman"
        self.env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")}
        self.env.update(env)
        assert all(podman_reads(k) for k in self.env), "podman_reads must cover podman's own"

    def run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.program, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )


class ContainerProcess:
    """A container podman runs, by its `podman run` in the foreground: that process's exit code
    is the container's (128 + N when signal N ended it, as Kubernetes reports it), and it
    removes the container before it exits. Signals reach the container through podman, as a
    kubelet's reach it through the container runtime: SIGTERM and SIGKILL its first process
    (SIGKILL ends the whole container), SIGSTOP and SIGCONT its cgroup (`podman pause`,
    `unpause`)."""

    def __init__(self, podman: Podman, name: str, popen: subprocess.Popen[bytes]) -> None:
        self.podman = podman
        self.name = name
        self.popen = popen
        self.pid = popen.pid
        self.paused = False

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout=timeout)

    def signal(self, sig: signal.Signals) -> None:
        """Deliver `sig`; a container `podman run` is still creating gets it once it runs."""
        if sig == signal.SIGSTOP:
            args, self.paused = ["pause", self.name], True
        elif sig == signal.SIGCONT:
            args, self.paused = ["unpause", self.name], False
        else:
            args = ["kill", f"--signal={sig.name}", self.name]
        deadline = time.monotonic() + START_WAIT_S
        while self.poll() is None:
            done = self.podman.run(*args)
            retry = "no such container" in done.stderr or (
                args[0] == "kill" and "state improper" in done.stderr
            )
            if done.returncode == 0 or not retry or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        if sig == signal.SIGTERM and self.paused:
            self.signal(signal.SIGCONT)  # a frozen container acts on it once continued

    def exec_command(self, argv: list[str]) -> tuple[list[str], dict[str, str]]:
        """The command line (and its environment) that runs `argv` inside the container, with
        the container's user, environment and working directory (`podman exec`)."""
        return [self.podman.program, "exec", self.name, *argv], dict(self.podman.env)


Process = subprocess.Popen[bytes] | ForkedProcess | ContainerProcess
"""A container's main process: a fresh one, one forked from the suite's fork server, or a
container of its image."""


def start_container(argv: list[str], env: dict[str, str], cwd: Path, output: int) -> Process:
    """Start a container's command here with exactly `env`, in `cwd`, its output written to the
    file descriptor `output`, in a session of its own. A `python -m` command is forked from the
    suite's warm server when the environment names one (tests/engine_forks.py), so an engine or
    a torchrun launcher starts without importing torch again."""
    server = ForkClient.for_command(argv, os.environ)
    if server is not None:
        return server.spawn(argv, env, str(cwd), output=output, new_session=True)
    return subprocess.Popen(
        argv,
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )


def signal_container(process: Process, sig: signal.Signals) -> None:
    """Signal a running container. A container of an image: through podman
    (`ContainerProcess.signal`). A local one: SIGTERM goes to the container's process group
    (its main process and what it did not detach); SIGKILL, SIGSTOP and SIGCONT to every
    process the container started, detached ones too (torchrun starts its workers in sessions
    of their own), as a container's cgroup is killed or frozen whole."""
    if process.poll() is not None:
        return
    if isinstance(process, ContainerProcess):
        process.signal(sig)
        return
    pid = process.pid
    if sig == signal.SIGTERM:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
            os.killpg(pid, signal.SIGCONT)  # a frozen process acts on it once continued
        return
    for member in process_tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(member, sig)


def exec_command(
    process: Process, argv: list[str], env: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run `argv` (resolved as the container's own
    command, with `env` its local environment) in `process`'s container: itself for a local
    container, `podman exec` for a container of an image."""
    if isinstance(process, ContainerProcess):
        return process.exec_command(argv)
    return argv, env


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, parents first (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # it ended meanwhile
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, i = [pid], 0
    while i < len(tree):
        tree.extend(children.get(tree[i], []))
        i += 1
    return tree


class Runner(Protocol):
    """How the test kubelet runs a pod's containers."""

    def mount_map(self, container: Obj, mounts: Mapping[str, Path]) -> list[tuple[str, Path]]:
        """The container's mount paths the kubelet rewrites onto host directories (in its
        command line, environment and ConfigMap files), longest first."""
        ...

    def program(self, container: Obj, argv: list[str], release: Callable[[], str]) -> list[str]:
        """The command line that runs `argv` (resolved); `release` names the SGLang release of
        the pod's job."""
        ...

    def start(
        self,
        pod: PodView,
        container: Obj,
        argv: list[str],
        env: dict[str, str],
        local_env: dict[str, str],
        output: int,
    ) -> Process:
        """Start `container` of `pod` as `argv` with `env` (the container's, resolved), or,
        run here, with `local_env` (that and what a process here needs); its output to the
        file descriptor `output`."""
        ...

    def close(self) -> None:
        """Leave nothing running (the kubelet has stopped every container it started)."""
        ...


class LocalProcesses:
    """Every container a process here (`start_container`): its mount paths rewritten onto the
    host directories, its image's programs this interpreter's (`kubelet_command`)."""

    def mount_map(self, container: Obj, mounts: Mapping[str, Path]) -> list[tuple[str, Path]]:
        return mount_map(container, mounts)

    def program(self, container: Obj, argv: list[str], release: Callable[[], str]) -> list[str]:
        return local_program(argv, release)

    def start(
        self,
        pod: PodView,
        container: Obj,
        argv: list[str],
        env: dict[str, str],
        local_env: dict[str, str],
        output: int,
    ) -> Process:
        return start_container(argv, local_env, pod.root, output)

    def close(self) -> None:
        pass


class Containers:
    """The test kubelet's container mode: a container whose image is one of `images` (None:
    every image) runs in that image, from local storage, with podman; any other runs here
    (`LocalProcesses`), as an image that cannot run on this machine (SGLang's) does.

    Before a pod's first container in an image starts, its volumes are prepared as a kubelet
    prepares them: an `emptyDir` world-writable, and with the pod's `fsGroup` an `emptyDir`'s
    or claim's files given to that group (`own_volume`). Every container is labelled
    `KUBELET_LABEL` with this instance; `close` removes any left, and a new instance removes
    those of test processes that are gone (killed before they could)."""

    def __init__(self, podman: Podman, images: Collection[str] | None = None) -> None:
        self.podman = podman
        self.images = None if images is None else frozenset(images)
        self.local = LocalProcesses()
        self.instance = f"{os.getpid()}.{next(_instances)}"
        self.prepared: set[str] = set()
        """The uids of the pods whose volumes are prepared."""
        self.remove_orphans()

    def runs(self, container: Obj) -> bool:
        """Whether `container` runs in its image."""
        return self.images is None or container.get("image") in self.images

    def mount_map(self, container: Obj, mounts: Mapping[str, Path]) -> list[tuple[str, Path]]:
        return [] if self.runs(container) else self.local.mount_map(container, mounts)

    def program(self, container: Obj, argv: list[str], release: Callable[[], str]) -> list[str]:
        return argv if self.runs(container) else self.local.program(container, argv, release)

    def start(
        self,
        pod: PodView,
        container: Obj,
        argv: list[str],
        env: dict[str, str],
        local_env: dict[str, str],
        output: int,
    ) -> Process:
        if not self.runs(container):
            return self.local.start(pod, container, argv, env, local_env, output)
        if pod.uid not in self.prepared:
            prepare_volumes(pod.manifest, pod.mounts)
            self.prepared.add(pod.uid)
        name = container_name(pod.name, pod.uid, container["name"])
        run = podman_run(
            pod.manifest,
            container,
            name=name,
            argv=argv,
            env=env,
            volumes=pod.mounts,
            labels={KUBELET_LABEL: self.instance},
        )
        popen = subprocess.Popen(
            [self.podman.program, *run.args],
            stdout=output,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**self.podman.env, **run.env},
            start_new_session=True,
        )
        return ContainerProcess(self.podman, name, popen)

    def close(self) -> None:
        self._remove(f"label={KUBELET_LABEL}={self.instance}")

    def remove_orphans(self) -> None:
        """Remove the containers of test kubelets whose process is gone."""
        listed = self.podman.run(
            "ps", "--all", f"--filter=label={KUBELET_LABEL}", "--format={{.Labels}}"
        )
        for owner in set(_label_values(listed.stdout, KUBELET_LABEL)):
            if not _alive(int(owner.split(".")[0])):
                self._remove(f"label={KUBELET_LABEL}={owner}")

    def left(self) -> list[str]:
        """The names of this instance's containers that still exist."""
        listed = self.podman.run(
            "ps",
            "--all",
            f"--filter=label={KUBELET_LABEL}={self.instance}",
            "--format={{.Names}}",
        )
        return listed.stdout.split()

    def _remove(self, selector: str) -> None:
        ids = self.podman.run("ps", "--all", "--quiet", f"--filter={selector}").stdout.split()
        if ids:
            # --ignore: one that ended meanwhile (removed by its run) must not stop the rest.
            self.podman.run("rm", "--force", "--ignore", "--time=0", *ids)


def _label_values(text: str, label: str) -> list[str]:
    """The values of `label` in `podman ps --format={{.Labels}}` lines (`map[k:v k:v]`)."""
    out = []
    for line in text.splitlines():
        for pair in line.strip().removeprefix("map[").removesuffix("]").split():
            key, _, value = pair.partition(":")
            if key == label:
                out.append(value)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


EMPTY_DIR_MODE = 0o777
"""What Kubernetes makes an `emptyDir` (pkg/volume/emptydir/empty_dir.go)."""


def prepare_volumes(pod: Obj, volumes: Mapping[str, Path]) -> None:
    """Prepare a pod's volumes' host directories as a kubelet does before its containers
    start: an `emptyDir` world-writable, then, with the pod's `fsGroup`, each `emptyDir` and
    claim given to it (`own_volume`; a ConfigMap's files stay readable by all)."""
    spec = pod.get("spec", {})
    context = spec.get("securityContext") or {}
    group = context.get("fsGroup")
    policy = context.get("fsGroupChangePolicy", "Always")
    for volume in spec.get("volumes") or []:
        path = volumes[volume["name"]]
        if "emptyDir" in volume:
            path.chmod(EMPTY_DIR_MODE)
        if group is not None and ("emptyDir" in volume or "persistentVolumeClaim" in volume):
            own_volume(path, int(group), policy)


def own_volume(root: Path, group: int, policy: str = "Always") -> None:
    """Give a volume's files to `group` as the kubelet's `SetVolumeOwnership` does
    (pkg/volume/volume_linux.go): each file's group `group`, read-write for it, directories
    also searchable and setgid (files made in them get the group); with the policy
    `OnRootMismatch` nothing happens when the root already has that group and those bits."""
    if policy == "OnRootMismatch" and _owned(root, group):
        return
    for path in [root, *root.rglob("*")]:
        info = path.lstat()
        os.lchown(path, -1, group)
        if path.is_symlink():
            continue
        mask = 0o660 | (0o2110 if path.is_dir() else 0)
        path.chmod((info.st_mode & 0o7777) | mask)


def _owned(root: Path, group: int) -> bool:
    info = root.stat()
    wanted = 0o770
    return info.st_gid == group and info.st_mode & wanted == wanted and bool(info.st_mode & 0o2000)
