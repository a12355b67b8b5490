"""The test kubelet's stand-in for SGLang: the operator's `python -m sglang.launch_server`
command as the embedded engine's (`dressage engine serve`)."""

from __future__ import annotations

from dressage.engine.embedded.release_profiles import stand_in_release


def sglang_as_embedded(argv: list[str], release: str | None = None) -> list[str]:
    """`python -m sglang.launch_server ARGS` as `dressage engine serve` arguments, playing
    SGLang `release` (None: the embedded engine's default).

    Mapped: `--model-path` (to `--model`), `--host`, `--port`, `--weight-version`,
    `--max-queued-requests`; SGLang's LoRA flags (`--enable-lora`, `--max-lora-rank`,
    `--lora-target-modules`, `--max-loras-per-batch`), which it takes as they are. Accepted
    and dropped: `--tp-size 1` (one process), `--dtype` (the embedded engine computes in
    float32), `--enable-metrics` (it serves no `/metrics`), `--enable-deterministic-inference`
    (it always draws from each request's seed), `--uvicorn-access-log-exclude-prefixes` and its
    paths (it writes no access log at all). Anything else is refused, so a flag the
    operator starts sending shows up here as a failing test instead of being ignored.
    """
    out = ["-m", "dressage", "engine", "serve"]
    i = 0
    while i < len(argv):
        flag, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if flag in (
            "--model-path",
            "--host",
            "--port",
            "--weight-version",
            "--max-queued-requests",
        ):
            assert value is not None, flag
            out += ["--model" if flag == "--model-path" else flag, value]
            i += 2
        elif flag == "--tp-size":
            assert value == "1", "the embedded engine is one process: --tp-size must be 1"
            i += 2
        elif flag == "--dtype":
            i += 2
        elif flag in ("--enable-metrics", "--enable-deterministic-inference"):
            i += 1
        elif flag == "--enable-lora":  # the embedded engine takes SGLang's LoRA flags as is
            out.append(flag)
            i += 1
        elif flag in ("--max-lora-rank", "--max-loras-per-batch"):
            assert value is not None, flag
            out += [flag, value]
            i += 2
        elif flag == "--lora-target-modules":
            out.append(flag)
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                out.append(argv[i])
                i += 1
        elif flag == "--uvicorn-access-log-exclude-prefixes":
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):
                assert argv[i].startswith("/"), f"{flag} takes paths, not {argv[i]!r}"
                i += 1
        else:
            raise AssertionError(f"the test kubelet has no embedded-engine mapping for {flag}")
    if release is not None:
        out += ["--sglang-release", stand_in_release(release)]
    return out
