"""`scripts/sglang_env_needs.py` finds what a release's contract-tier environment needs beyond
its list: here a directory holding only a release's metadata, over the test's own venv."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from scripts.sglang_env_needs import conflicts, requirements_in

VENV_PACKAGING = metadata.version("packaging")


def release_dir(tmp_path: Path, *requires: str, name: str = "sglang") -> Path:
    """A `pip install --target` directory holding `name` 9.9.9, which requires `requires`."""
    info = tmp_path / f"{name}-9.9.9.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    lines = [f"Metadata-Version: 2.1\nName: {name}\nVersion: 9.9.9\n"]
    lines += [f"Requires-Dist: {r}\n" for r in requires]
    (info / "METADATA").write_text("".join(lines))
    return tmp_path


def test_a_pin_the_venv_does_not_meet_is_a_need(tmp_path: Path) -> None:
    """As 0.5.19's `transformers==5.12.1` beside the venv's newer one."""
    directory = release_dir(tmp_path, "packaging==0.1")
    assert conflicts(directory) == ["packaging==0.1"]


def test_every_requirement_on_the_package_goes_with_it(tmp_path: Path) -> None:
    """The release's pin with what the packages added before require of it (tokenizers: the
    release's `==0.22.2` with its transformers' range)."""
    release_dir(tmp_path, "packaging==0.1")
    release_dir(tmp_path, "packaging>=0.0.1", name="transformers")
    assert conflicts(tmp_path) == ["packaging==0.1,>=0.0.1"]


def test_torch_absent_packages_extras_and_met_pins_are_no_need(tmp_path: Path) -> None:
    """The venv's CPU torch is never replaced; a package the venv lacks is no conflict (the
    import probe finds it if the tier needs it); an extra's requirement does not apply."""
    directory = release_dir(
        tmp_path,
        "torch==0.0.1",
        "surely-not-installed-anywhere==1.0",
        'packaging==0.1; extra == "diffusion"',
        f"packaging=={VENV_PACKAGING}",
    )
    assert conflicts(directory) == []
    assert "surely-not-installed-anywhere" in requirements_in(directory)
