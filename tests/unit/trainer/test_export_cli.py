"""`dressage export`: a LoRA version copied is a PEFT directory PEFT loads, and `--merge`
writes a Hugging Face checkpoint whose logits are the base-plus-adapter's (PEFT's forward)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dressage_testkit.trainer import small_model

from dressage.api.lora import LoraSpec
from dressage.cli import main
from dressage.trainer.grpo import load_policy
from dressage.trainer.lora import iter_adapter, load_adapter, wrap_lora, write_adapter

IDS = torch.tensor([[3, 10, 11, 12, 13, 14]])


@pytest.fixture(scope="module")
def version(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("export")
    base = small_model(root / "base")
    torch.manual_seed(1)
    model = wrap_lora(load_policy(base, torch.device("cpu")), LoraSpec(rank=4))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".lora_B." in name:
                param.normal_(0.0, 0.2)
    write_adapter(model, dict(iter_adapter(model, torch.float32)), root / "v1")
    return base, root / "v1"


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(IDS).logits  # type: ignore[no-any-return]


def test_a_merged_export_is_a_checkpoint_with_the_adapters_logits(
    version: tuple[Path, Path], tmp_path: Path
) -> None:
    base, adapter = version
    assert main(["export", str(adapter), "--out", str(tmp_path / "m"), "--merge",
                 "--dtype", "float32"]) == 0  # fmt: skip
    merged = load_policy(tmp_path / "m", torch.device("cpu"))
    assert (tmp_path / "m" / "tokenizer.json").is_file()
    expected = _logits(load_adapter(load_policy(base, torch.device("cpu")), adapter))
    torch.testing.assert_close(_logits(merged), expected, atol=1e-5, rtol=0)
    assert not torch.allclose(_logits(load_policy(base, torch.device("cpu"))), expected)


def test_an_adapter_export_is_a_peft_directory(version: tuple[Path, Path], tmp_path: Path) -> None:
    base, adapter = version
    assert main(["export", str(adapter), "--out", str(tmp_path / "a")]) == 0
    copied = load_adapter(load_policy(base, torch.device("cpu")), tmp_path / "a")
    original = load_adapter(load_policy(base, torch.device("cpu")), adapter)
    torch.testing.assert_close(_logits(copied), _logits(original), atol=0, rtol=0)


def test_a_directory_that_is_no_adapter_is_refused(tmp_path: Path) -> None:
    assert main(["export", str(tmp_path), "--out", str(tmp_path / "x"), "--merge"]) == 2
