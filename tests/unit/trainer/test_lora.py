"""LoRA on the trainer side: target modules are checked against the model's own linear layers
before anything trains (a one-line error with a did-you-mean), and PEFT freezes the base."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from dressage_testkit.trainer import small_model

from dressage.api.lora import LoraSpec
from dressage.trainer.grpo import load_policy
from dressage.trainer.lora import check_target_modules, linear_module_names, wrap_lora


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_model(tmp_path_factory.mktemp("model"))


def test_the_linear_layers_of_a_llama_are_its_projections_and_head(policy_dir: Path) -> None:
    names = linear_module_names(load_policy(policy_dir, torch.device("cpu")))
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                     "down_proj", "lm_head"}  # fmt: skip


def test_a_misspelt_target_module_is_refused_with_the_closest_name(policy_dir: Path) -> None:
    model = load_policy(policy_dir, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"targetModules: .* 'qproj': did you mean 'q_proj'\?"):
        check_target_modules(model, ["v_proj", "qproj"])
    with pytest.raises(ValueError, match="no linear layer named 'attention'") as info:
        wrap_lora(model, LoraSpec(target_modules=["attention"]))
    assert "\n" not in str(info.value)


def test_only_the_adapter_trains(policy_dir: Path) -> None:
    model = wrap_lora(load_policy(policy_dir, torch.device("cpu")), LoraSpec(rank=2))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # B starts at zero: the fresh adapter's policy is the base model (v0).
    assert all(torch.all(p == 0) for n, p in model.named_parameters() if ".lora_B." in n)
