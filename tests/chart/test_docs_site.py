"""The docs site builds with `mkdocs build --strict`, and a broken link fails that build.

Strict mode turns every warning into a failure: a nav entry or a link to a page that does not
exist, an anchor a page does not have, a link out of `docs/` (repository files are named as
code spans instead), and a page left out of the navigation. The site is built into a temporary
directory, never into the tree. The same pages are read on GitHub, which renders neither
includes nor attribute lists: every page is its own text, and its anchors are `<a id>`s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.chart.tools import ROOT


def build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the site configured at `root`, run from `root`, into `site`."""
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, (
        "`mkdocs build --strict` failed (a broken link, anchor, nav entry or included file; "
        "mkdocs-material is in the dev extra):\n" + done.stdout + done.stderr
    )
    assert (tmp_path / "site" / "reference" / "job" / "index.html").is_file()
    assert (tmp_path / "site" / "benchmarks" / "index.html").is_file()


def _copy_site(dest: Path) -> Path:
    """The site's sources (mkdocs.yml and docs/) under `dest`."""
    shutil.copy(ROOT / "mkdocs.yml", dest / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", dest / "docs")
    return dest


@pytest.mark.parametrize(
    ("broken", "named"),
    [
        ("[a page](no-such-page.md)", "no-such-page.md"),
        ("[an anchor](concepts.md#no-such-anchor)", "no-such-anchor"),
        ("[a repository file](../examples/local-tiny.yaml)", "examples/local-tiny.yaml"),
        ('[an HTML anchor](reference/cli.md#dressage-no-such-command)', "no-such-command"),
    ],
    ids=["page", "anchor", "out-of-docs", "html-anchor"],
)
def test_a_broken_link_fails_the_build(tmp_path: Path, broken: str, named: str) -> None:
    (tmp_path / "src").mkdir()
    root = _copy_site(tmp_path / "src")
    clean = build(root, tmp_path / "clean")
    assert clean.returncode == 0, clean.stdout + clean.stderr
    page = root / "docs" / "concepts.md"
    page.write_text(page.read_text(encoding="utf-8") + f"\n{broken}\n", encoding="utf-8")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0, f"the build passed with {broken!r} on a page"
    assert named in done.stdout + done.stderr


def test_a_page_left_out_of_the_nav_fails_the_build(tmp_path: Path) -> None:
    """A page no reader can reach from the navigation is a warning, so a failure."""
    (tmp_path / "src").mkdir()
    root = _copy_site(tmp_path / "src")
    (root / "docs" / "orphan.md").write_text("# Orphan\n", encoding="utf-8")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0, "the build passed with a page outside the nav"
    assert "orphan.md" in done.stdout + done.stderr


PAGES = sorted((ROOT / "docs").rglob("*.md"))

_INCLUDE = re.compile(r"^-{2}8<-{2}", re.MULTILINE)
_ATTR_ANCHOR = re.compile(r"^#+ .*\{ *#[\w-]+ *\}\s*$", re.MULTILINE)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_the_page_reads_the_same_on_github(page: Path) -> None:
    """No include line (GitHub would show the line, not the page) and no heading with an
    attribute-list anchor (GitHub would show `{ #id }` as text)."""
    text = page.read_text(encoding="utf-8")
    assert not _INCLUDE.search(text), f"{page.name} includes another file: move the text here"
    bad = _ATTR_ANCHOR.findall(text)
    assert not bad, f"{page.name}: write the anchor as <a id=...> before the heading: {bad[0]}"


def test_an_html_anchor_is_one_the_site_resolves(tmp_path: Path) -> None:
    """The generated reference's `<a id>` anchors are anchors mkdocs knows: a link to one
    builds (its twin with a wrong id fails above)."""
    (tmp_path / "src").mkdir()
    root = _copy_site(tmp_path / "src")
    page = root / "docs" / "concepts.md"
    link = "[validate](reference/cli.md#dressage-validate)"
    page.write_text(page.read_text(encoding="utf-8") + f"\n{link}\n", encoding="utf-8")
    done = build(root, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
