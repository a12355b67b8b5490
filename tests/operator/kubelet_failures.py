"""The test kubelet's node: what keeps a pod from starting or running, from causes a test sets
up, reported in the pod's status as the scheduler and the kubelet write it.

A test sets the causes on `Kubelet.node` (a `Node`), or in the API:
- `allocatable`: the node's resources (default: unlimited); a pod whose requests exceed them
  is Unschedulable with the scheduler's message (`kubelet_scheduling`), as is a pod naming a
  claim that is missing or not Bound when `claims_from_api` is set;
- `unpullable`: images the node cannot pull (default: none): the container waits in
  `ErrImagePull` with the runtime's error, then `ImagePullBackOff` with `Back-off pulling
  image "x"` until the back-off passes and it pulls again (kubernetes/kubernetes v1.33,
  pkg/kubelet/images/image_manager.go `EnsureImageExists`; the runtime's error as containerd
  words a missing tag);
- a Secret or ConfigMap, or a key of one, that an `env` or `envFrom` names and the API lacks:
  the container waits in `CreateContainerConfigError` with the kubelet's message
  (pkg/kubelet/kuberuntime/kuberuntime_container.go `startContainer`; the messages of
  pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables`: `secret "x" not found`,
  `couldn't find key k in Secret ns/x`), checked again at each sync;
- a container of an `Always` pod that exits: its termination goes to `lastState.terminated`
  (exit code, `Error`, `Completed` or `OOMKilled`, and the termination message: the log's tail
  with `terminationMessagePolicy: FallbackToLogsOnError`, at most 80 lines and 2048 bytes, as
  kuberuntime_container.go reads it; nothing with the default `File` policy, whose file no
  process here can write). The first restart is immediate, each next one waits a back-off that
  doubles from `backoff_s` up to `max_backoff_s` in `CrashLoopBackOff`, `back-off 10s
  restarting failed container=c pod=p_ns(uid)` (kuberuntime_manager.go `doBackOff`);
- `oom_kill`: the container's processes are killed as the OOM killer kills a cgroup over its
  memory limit (SIGKILL, exit code 137, reason `OOMKilled`), once or at every start.
Back-offs are the kubelet's (10 s, doubling to 5 min) unless a test shortens them.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dressage_testkit.kube import EmulatedCluster

from .kubelet_processes import signal_container
from .kubelet_scheduling import unschedulable
from .kubelet_status import ContainerReport, PodReport, pod_status

if TYPE_CHECKING:
    from .kubelet import Kubelet

Obj = dict[str, Any]
LOG_LINES = 80
LOG_BYTES = 2048
"""How much of a log's tail becomes a termination message (kuberuntime_container.go
`maxTerminationMessageLogLines`, `maxTerminationMessageLogLength`)."""


def go_duration(seconds: float) -> str:
    """A duration as Go's `time.Duration.String()` writes a back-off: `500ms`, `10s`, `5m0s`."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes}m{rest}s" if minutes else f"{rest}s"


def pull_error(image: str) -> str:
    """The runtime's error for an image whose tag does not exist, as containerd words it."""
    return (
        f'rpc error: code = NotFound desc = failed to pull and unpack image "{image}": '
        f'failed to resolve reference "{image}": {image}: not found'
    )


def config_error(cluster: EmulatedCluster, container: Obj) -> str | None:
    """The kubelet's message for an environment it cannot make: a Secret or ConfigMap, or a
    key of one, that the container names and the API lacks (optional ones excepted)."""
    ns = cluster.namespace
    kinds = {"secretKeyRef": ("Secret", "secrets"), "configMapKeyRef": ("ConfigMap", "configmaps")}
    refs = {"secretRef": ("Secret", "secrets"), "configMapRef": ("ConfigMap", "configmaps")}
    for source in container.get("envFrom") or []:
        for key, (kind, plural) in refs.items():
            ref = source.get(key)
            if not ref or ref.get("optional"):
                continue
            if cluster.get(cluster.path("v1", plural, ref["name"])) is None:
                return f'{kind.lower()} "{ref["name"]}" not found'
    for item in container.get("env") or []:
        for key, (kind, plural) in kinds.items():
            ref = (item.get("valueFrom") or {}).get(key)
            if not ref or ref.get("optional"):
                continue
            obj = cluster.get(cluster.path("v1", plural, ref["name"]))
            if obj is None:
                return f'{kind.lower()} "{ref["name"]}" not found'
            if ref["key"] not in (obj.get("data") or {}):
                return f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}"
    return None


def log_tail(text: str) -> str:
    """The end of a container's log as a termination message: its last run only (after the
    kubelet's `$ command` line), at most `LOG_LINES` lines and `LOG_BYTES` bytes."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
    run = lines[starts[-1] + 1 :] if starts else lines
    tail = "\n".join(run[-LOG_LINES:])
    return tail.encode()[-LOG_BYTES:].decode(errors="replace")


@dataclass
class Node:
    """The emulated node's resources, what it can pull, and the failures it reports (see the
    module docstring)."""

    kubelet: Kubelet
    allocatable: dict[str, str] | None = None
    claims_from_api: bool = False
    unpullable: set[str] = field(default_factory=set)
    backoff_s: float = 10.0
    max_backoff_s: float = 300.0
    sync_s: float = 0.2
    """How often a waiting pod is looked at again (the scheduler's retry, the kubelet's sync)."""
    reports: dict[str, PodReport] = field(default_factory=dict)
    """Pod uid -> its report."""
    oom_pids: set[int] = field(default_factory=set)
    memory_short: set[tuple[str, str]] = field(default_factory=set)
    """(pod, container) OOM-killed at every start (`oom_kill(..., every_start=True)`)."""
    lock: threading.RLock = field(default_factory=threading.RLock)

    def report(self, uid: str) -> PodReport:
        with self.lock:
            return self.reports.setdefault(uid, PodReport())

    def _waiting(self, pod: Any) -> bool:
        """Whether to go on waiting for `pod` (it is not being deleted, the kubelet runs)."""
        return not pod.stopping and not self.kubelet._stop.is_set()

    # --- the scheduler

    def scheduled(self, pod: Any) -> bool:
        """Wait until the scheduler places `pod`, its status saying why not meanwhile; False
        when the pod is deleted first."""
        report = self.report(pod.uid)
        while self._waiting(pod):
            with self.kubelet._lock:
                others = list(self.kubelet.pods.values())
            with self.lock:
                placed = [
                    p.manifest
                    for p in others
                    if p.uid != pod.uid
                    and p.phase not in ("Succeeded", "Failed")
                    and (self.reports.get(p.uid) or PodReport()).scheduled == (True, "")
                ]
                why = unschedulable(
                    self.kubelet.cluster,
                    pod.manifest,
                    self.allocatable,
                    self.claims_from_api,
                    placed,
                )
                before, report.scheduled = report.scheduled, (why is None, why or "")
            if why is None:
                return True
            if before != report.scheduled:
                self.kubelet._set_status(pod, "Pending", ready=False)
            time.sleep(self.sync_s)
        return False

    # --- pulls and configs

    def admitted(self, pod: Any, container: Obj) -> bool:
        """Wait until the pod is placed (`scheduled`, before its first container), then until
        the container's image is pulled and its configuration made, its status saying why not
        meanwhile (see the module docstring); False when the pod is deleted first."""
        if self.report(pod.uid).scheduled != (True, "") and not self.scheduled(pod):
            return False
        state = self.report(pod.uid).container(container["name"])
        backoff = self.backoff_s
        image = container.get("image", "")
        while self._waiting(pod):
            if image in self.unpullable:
                self._wait(pod, state, ("ErrImagePull", pull_error(image)), self.sync_s)
                back_off = ("ImagePullBackOff", f'Back-off pulling image "{image}"')
                self._wait(pod, state, back_off, max(backoff - self.sync_s, 0))
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            why = config_error(self.kubelet.cluster, container)
            if why is None:
                state.waiting = None
                return True
            self._wait(pod, state, ("CreateContainerConfigError", why), self.sync_s)
        return False

    def _wait(self, pod: Any, state: ContainerReport, waiting: tuple[str, str], s: float) -> None:
        if state.waiting != waiting:
            state.waiting = waiting
            self.kubelet._set_status(pod, "Pending", ready=False)
        end = time.monotonic() + s
        while self._waiting(pod) and time.monotonic() < end:
            time.sleep(min(0.05, s))

    # --- ends, restarts and the OOM killer

    def ended(self, pod: Any, container: Any, code: int) -> Obj:
        """Record how `container`'s process ended (once per process) and return the
        `terminated` state."""
        with self.lock:
            return self._ended(pod, container, code)

    def _ended(self, pod: Any, container: Any, code: int) -> Obj:
        state = self.report(pod.uid).container(container.name)
        pid = container.process.pid
        if state.recorded != pid:
            exit_code = 128 - code if code < 0 else code
            oom = pid in self.oom_pids
            reason = "OOMKilled" if oom else "Completed" if exit_code == 0 else "Error"
            spec = pod.manifest["spec"]
            spec = next(
                c
                for c in [*spec.get("initContainers", []), *spec["containers"]]
                if c["name"] == container.name
            )
            message = ""
            if exit_code != 0 and spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
                message = log_tail(self.kubelet.log_text(pod.name, container.name))
            state.terminated = {"exitCode": exit_code, "reason": reason}
            if message:
                state.terminated["message"] = message
            state.recorded = pid
        assert state.terminated is not None
        return state.terminated

    def restart_due(self, pod: Any, container: Any, code: int) -> bool:
        """Whether to restart a container of an `Always` pod that ended now: at once the first
        time, else once its back-off passed, `CrashLoopBackOff` meanwhile."""
        with self.lock:
            due, backing_off = self._restart_due(pod, container, code)
        if backing_off:
            self.kubelet._set_status(pod, "Running", ready=False)
        return due

    def _restart_due(self, pod: Any, container: Any, code: int) -> tuple[bool, bool]:
        """(whether to restart now, whether a back-off began)."""
        state = self.report(pod.uid).container(container.name)
        terminated = self.ended(pod, container, code)
        backing_off = False
        if state.restarted != container.process.pid:
            state.restarted = container.process.pid
            container.ready = container.started = False
            if state.backoff_s == 0:
                state.backoff_s, state.restart_at = self.backoff_s, 0.0
            else:
                state.restart_at = time.monotonic() + state.backoff_s
                state.waiting = (
                    "CrashLoopBackOff",
                    f"back-off {go_duration(state.backoff_s)} restarting failed container="
                    f"{container.name} pod={pod.name}_{self.kubelet.cluster.namespace}({pod.uid})",
                )
                state.backoff_s = min(state.backoff_s * 2, self.max_backoff_s)
                backing_off = True
        if time.monotonic() < state.restart_at:
            return False, backing_off
        state.waiting, state.terminated, state.last = None, None, terminated
        return True, backing_off

    def status_report(self, pod: Any) -> PodReport:
        """`pod`'s report for its status, with the end of each container that ended."""
        for container in list(pod.containers.values()):
            process = container.process
            code = process.poll() if process is not None else None
            if code is not None:
                self.ended(pod, container, code)
        return self.report(pod.uid)

    def pod_status(
        self, pod: Any, phase: str, ready: bool, reason: str | None, message: str | None
    ) -> Obj:
        """The status the kubelet writes for `pod` (`kubelet_status.pod_status`)."""
        containers = list(pod.containers.values())
        report = self.status_report(pod)
        return pod_status(pod.manifest, phase, ready, containers, reason, message, report)

    def oom_kill(self, pod: str, container: str, every_start: bool = False) -> None:
        """Kill the container's processes as the OOM killer does (SIGKILL, `OOMKilled`); with
        `every_start`, again each time it starts until `memory_short` no longer names it."""
        if every_start:
            self.memory_short.add((pod, container))
            threading.Thread(target=self._keep_killing, args=(pod, container), daemon=True).start()
        self._kill(pod, container)

    def _kill(self, pod: str, container: str) -> None:
        with self.kubelet._lock:
            running = self.kubelet.pods.get(pod)
            state = running.containers.get(container) if running is not None else None
        process = state.process if state is not None else None
        if process is not None and process.poll() is None and process.pid not in self.oom_pids:
            self.oom_pids.add(process.pid)
            signal_container(process, signal.SIGKILL)

    def _keep_killing(self, pod: str, container: str) -> None:
        while (pod, container) in self.memory_short and not self.kubelet._stop.is_set():
            self._kill(pod, container)
            time.sleep(0.05)
