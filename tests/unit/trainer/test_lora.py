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
    # A name SGLang serves (its fused projection) that this Llama does not have.
    with pytest.raises(ValueError, match="no linear layer named 'qkv_proj'") as info:
        wrap_lora(model, LoraSpec(target_modules=["qkv_proj"]))
    assert "\n" not in str(info.value)


def test_only_the_adapter_trains(policy_dir: Path) -> None:
    model = wrap_lora(load_policy(policy_dir, torch.device("cpu")), LoraSpec(rank=2))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable)
    # B starts at zero: the fresh adapter's policy is the base model (v0).
    assert all(torch.all(p == 0) for n, p in model.named_parameters() if ".lora_B." in n)


def test_an_initial_adapter_is_trained_on_and_a_mismatched_one_refused(
    policy_dir: Path, tmp_path: Path
) -> None:
    from dressage.trainer.lora import iter_adapter, write_adapter

    torch.manual_seed(5)
    first = wrap_lora(load_policy(policy_dir, torch.device("cpu")), LoraSpec(rank=2))
    with torch.no_grad():
        for name, param in first.named_parameters():
            if ".lora_B." in name:
                param.normal_()
    saved = dict(iter_adapter(first, torch.float32))
    write_adapter(first, saved, tmp_path / "sft")
    spec = LoraSpec(rank=2, initial_adapter=str(tmp_path / "sft"))
    resumed = wrap_lora(load_policy(policy_dir, torch.device("cpu")), spec)
    assert dict(iter_adapter(resumed, torch.float32)).keys() == saved.keys()
    for name, tensor in iter_adapter(resumed, torch.float32):
        assert torch.equal(tensor, saved[name]), name
    assert any(p.requires_grad for p in resumed.parameters())
    with pytest.raises(ValueError, match=r"initialAdapter: .* has rank 2 .* asks for rank 4"):
        wrap_lora(load_policy(policy_dir, torch.device("cpu")), spec.model_copy(update={"rank": 4}))


def test_a_lora_checkpoint_holds_the_adapter_and_its_optimizer_state_only(
    policy_dir: Path,
) -> None:
    """The frozen base is loaded from the initial model on every start, never checkpointed."""
    from dressage_testkit.trainer import synthetic_batch

    from dressage.trainer.grpo import GRPOTrainer, TrainerConfig
    from dressage.trainer.shards import load_local_shards, local_shards

    torch.manual_seed(0)
    policy = wrap_lora(load_policy(policy_dir, torch.device("cpu")), LoraSpec(rank=2))
    trainer = GRPOTrainer(policy, TrainerConfig(learning_rate=1e-2, precision="fp32"))
    trainer.train_step(synthetic_batch(1))
    shards = local_shards(trainer)
    assert shards["model"]
    assert all(".lora_A." in n or ".lora_B." in n for n in shards["model"])
    assert shards["optimizer"]["state"]
    # They restore into a fresh wrap of the same base.
    torch.manual_seed(1)
    other = GRPOTrainer(
        wrap_lora(load_policy(policy_dir, torch.device("cpu")), LoraSpec(rank=2)),
        TrainerConfig(learning_rate=1e-2, precision="fp32"),
    )

    def fill(buffers: dict, rows: dict) -> None:  # type: ignore[type-arg]
        for name, tensor in buffers["model"].items():
            tensor.copy_(shards["model"][name])

    load_local_shards(other, fill)
    for name, tensor in other.model.state_dict().items():
        torch.testing.assert_close(tensor, trainer.model.state_dict()[name], rtol=0, atol=0)
