"""A Hugging Face hub cache written by hand, laid out as `huggingface_hub` writes it, so that
offline code paths (`HF_HUB_OFFLINE=1`, `HF_HOME` pointing here) find a model by its hub id.

Layout (`huggingface_hub.constants`, `file_download`): `HF_HOME/hub/models--ORG--NAME/` with
`blobs/<sha256>` holding each file's bytes, `snapshots/<commit>/<file>` a relative link to its
blob, and `refs/<revision>` the commit the revision names.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def write_hub_cache(
    hf_home: Path, repo_id: str, model_dir: Path, *, revision: str = "main"
) -> Path:
    """Put every file of `model_dir` into the cache as `repo_id` at `revision`; returns the
    snapshot directory."""
    repo = Path(hf_home) / "hub" / f"models--{repo_id.replace('/', '--')}"
    files = sorted(p for p in Path(model_dir).iterdir() if p.is_file())
    commit = hashlib.sha1(b"".join(p.read_bytes() for p in files)).hexdigest()
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for path in files:
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = snapshot / path.name
        if not link.exists():
            os.symlink(os.path.relpath(blob, snapshot), link)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / revision).write_text(commit)
    return snapshot
