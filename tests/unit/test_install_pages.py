"""Every page that installs the operator on a cluster says where its images come from.

Nothing is published under the chart's default registry (`ghcr.io/dressage`) yet, so a
`helm install` with the defaults ends in `ImagePullBackOff`. Each install page therefore builds
and pushes the images (`scripts/build-images.sh --push`) in the block that installs the chart,
sets `global.imageRegistry` there, and says in its text that nothing is published yet. The kind
quickstart is the exception by design: it loads locally built images into the cluster
(`image.pullPolicy=Never`, `tests/chart/test_quickstart_kind.py`).

The GPU pages also leave the choice of shared storage to the reader: they apply a file of
`examples/storage/` chosen by the reader (`FILE`), never one platform's claim as is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

INSTALL_PAGES = [
    ROOT / "README.md",
    ROOT / "docs" / "cluster.md",
    ROOT / "docs" / "operations.md",
    ROOT / "charts" / "dressage-operator" / "README.md",
]
NOT_PUBLISHED = re.compile(r"[Nn]othing\s+is\s+published\s+under\s+`ghcr\.io/dressage`\s+yet")
_BLOCK = re.compile(r"^ *```bash\n(.*?)^ *```", re.MULTILINE | re.DOTALL)


def bash_blocks(page: Path) -> list[str]:
    return _BLOCK.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", INSTALL_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_chart_install_names_the_registry_its_images_were_pushed_to(page: Path) -> None:
    installs = [b for b in bash_blocks(page) if "helm install dressage-operator" in b]
    assert installs, f"{page.name} installs no operator"
    for block in installs:
        assert "global.imageRegistry=" in block, f"{page.name}: helm install without a registry"
    assert any("scripts/build-images.sh --registry R --push" in b for b in bash_blocks(page)), (
        f"{page.name} does not build and push the images"
    )
    text = " ".join(page.read_text(encoding="utf-8").split())
    assert NOT_PUBLISHED.search(text), f"{page.name} does not say that no image is published yet"


GPU_PAGES = [ROOT / "README.md", ROOT / "docs" / "cluster.md", INSTALL_PAGES[3]]


@pytest.mark.parametrize("page", GPU_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_shared_claim_is_the_reader_s_choice(page: Path) -> None:
    applied = [
        line
        for block in bash_blocks(page)
        for line in block.splitlines()
        if "examples/storage/" in line
    ]
    assert applied, f"{page.name} makes no shared claim"
    assert all("examples/storage/FILE.yaml" in line for line in applied), applied
    text = page.read_text(encoding="utf-8")
    for claim in sorted((ROOT / "examples" / "storage").glob("*.yaml")):
        assert claim.stem in text, f"{page.name} does not offer {claim.name}"


def test_the_chart_s_notes_name_a_storage_file_that_exists() -> None:
    """What `helm install` prints offers the storage files there are, none as the one to apply."""
    notes = (ROOT / "charts" / "dressage-operator" / "templates" / "NOTES.txt").read_text()
    for path in re.findall(r"examples/[\w/.-]+\.yaml", notes):
        assert path == "examples/storage/FILE.yaml" or (ROOT / path).is_file(), path
    for claim in sorted((ROOT / "examples" / "storage").glob("*.yaml")):
        assert claim.stem in notes, f"NOTES.txt does not offer {claim.name}"
