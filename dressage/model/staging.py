"""Model staging: a Hugging Face model lands once on the job's storage, before anything reads it.

`dressage stage-model --source ORG/NAME --dest DIR [--revision REV]` downloads the repository
with `huggingface_hub.snapshot_download` (token from `HF_TOKEN`, for gated models) into a
temporary directory beside `DIR` and renames it into place, so a reader never sees half a
model, and writes a marker naming what was staged. A second run finds the marker for the same
source and revision and does nothing: an engine or trainer pod that restarts, or a job that is
recreated on the same storage, never downloads again. With `HF_HUB_OFFLINE` set (a cluster
without internet access, where the model sits in a Hugging Face cache under `HF_HOME`, laid
out as the hub writes it), nothing is downloaded: the cached snapshot of the revision is copied
into place instead (`snapshot_download` with a `local_dir` never reads the cache offline). The
operator runs it as the first step of
a job (`spec.model.source` a hub id, `spec.model.tokenSecret` the token); `dressage run`
does not need it (local paths and `builtin:tiny` are read in place).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = ".dressage-staged.json"
"""Written last into a staged directory: `{"source", "revision"}`."""
TOKEN_ENV = "HF_TOKEN"
OFFLINE_ENV = "HF_HUB_OFFLINE"

Download = Callable[..., Any]
"""`huggingface_hub.snapshot_download`'s signature (repo_id, revision, local_dir, token)."""


class StagingError(RuntimeError):
    """The model could not be staged; the message names the source and the cause."""


def is_staged(dest: Path, source: str, revision: str | None) -> bool:
    """Whether `dest` already holds `source` at `revision`, completely."""
    try:
        marker = json.loads((dest / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(marker, dict)
        and marker.get("source") == source
        and marker.get("revision") == revision
        and (dest / "config.json").is_file()
    )


def stage_model(
    source: str,
    dest: Path,
    *,
    revision: str | None = None,
    token: str | None = None,
    download: Download | None = None,
    offline: bool = False,
) -> bool:
    """Make `dest` hold the model `source` at `revision`; True when it was downloaded now.

    `offline`: copy the revision's snapshot from the local Hugging Face cache instead of
    downloading (`download(..., local_files_only=True)` gives the snapshot directory).

    Raises `StagingError` when the download fails or gives no `config.json`; nothing is left
    at `dest` then (an earlier complete staging stays as it was).
    """
    if is_staged(dest, source, revision):
        return False
    if download is None:
        from huggingface_hub import snapshot_download

        download = snapshot_download
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        try:
            if offline:
                snapshot = download(
                    repo_id=source, revision=revision, token=token, local_files_only=True
                )
                # Cached files are links into the cache's blobs: copy what they point to.
                shutil.copytree(snapshot, tmp, dirs_exist_ok=True)
            else:
                download(repo_id=source, revision=revision, local_dir=str(tmp), token=token)
        except Exception as exc:
            hint = (
                f" (${OFFLINE_ENV} is set: it must be in the Hugging Face cache under $HF_HOME)"
                if offline
                else ("" if token else f" (gated or private models need ${TOKEN_ENV})")
            )
            raise StagingError(
                f"spec.model.source: could not download {source!r}"
                f"{f' at revision {revision!r}' if revision else ''}: "
                f"{type(exc).__name__}: {exc}{hint}"
            ) from exc
        if not (tmp / "config.json").is_file():
            raise StagingError(
                f"spec.model.source: {source!r} has no config.json; it is not a model repository"
            )
        (tmp / MARKER).write_text(
            json.dumps({"source": source, "revision": revision}), encoding="utf-8"
        )
        if dest.exists() and not is_staged(dest, source, revision):
            shutil.rmtree(dest)  # an older or incomplete staging of another source
        try:
            os.replace(tmp, dest)
        except OSError:
            # Another stager (a second pod of the job) finished first: keep its copy.
            if not is_staged(dest, source, revision):
                raise
            return False
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--source", required=True, help="Hugging Face model id (org/name)")
    parser.add_argument("--dest", required=True, type=Path, help="directory on shared storage")
    parser.add_argument("--revision", default=None, help="branch, tag or commit")


def run(args: argparse.Namespace) -> int:
    token = os.environ.get(TOKEN_ENV) or None
    offline = os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")
    try:
        downloaded = stage_model(
            args.source, args.dest, revision=args.revision, token=token, offline=offline
        )
    except StagingError as exc:
        print(f"dressage stage-model: {exc}", file=sys.stderr)
        return 1
    state = "staged" if downloaded else "already staged"
    print(f"model {args.source} {state} at {args.dest}", flush=True)
    return 0
