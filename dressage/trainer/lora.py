"""LoRA training with PEFT: wrap the policy, check its target modules, write its adapters.

`wrap_lora` turns the Hugging Face policy into a `peft.PeftModel` (`get_peft_model` with a
`LoraConfig` from `spec.model.lora`, or `PeftModel.from_pretrained` on its `initialAdapter`):
the base weights are frozen (`requires_grad=False`) and only the adapter's `lora_A`/`lora_B`
matrices train. The wrapped model is still the `GRPOTrainer`'s module: PEFT forwards
`get_decoder`, `get_output_embeddings`, `config` and `_no_split_modules` to the base model, and
FSDP2 shards it layer by layer as before (`fully_shard` on each decoder layer, whose
parameters are the frozen base weights and the trainable adapter together: FSDP2 keeps a
frozen parameter's shard without a gradient).

A weight version after `v0` is the adapter alone, written in PEFT's format
(`adapter_config.json` + `adapter_model.safetensors`, `save_pretrained`'s layout), which
SGLang's `/load_lora_adapter` and `PeftModel.from_pretrained` both read.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from dressage.api.lora import LoraSpec

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def linear_module_names(model: torch.nn.Module) -> set[str]:
    """The last parts of the names of `model`'s linear layers (what `targetModules` names)."""
    return {
        name.rsplit(".", 1)[-1]
        for name, module in model.named_modules()
        if name and isinstance(module, torch.nn.Linear)
    }


def check_target_modules(model: torch.nn.Module, names: Iterable[str]) -> None:
    """Raise a one-line `ValueError` naming the first of `names` that is not one of the model's
    linear layers, with the closest name it has (did-you-mean) and the ones it has."""
    known = linear_module_names(model)
    for name in names:
        if name in known:
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(
            f"model.lora.targetModules: {type(model).__name__} has no linear layer named "
            f"{name!r}: {hint}its linear layers are {', '.join(sorted(known))}"
        )


def lora_config(spec: LoraSpec) -> Any:
    """PEFT's `LoraConfig` for `spec` (a causal LM; no bias trained)."""
    from peft import LoraConfig

    return LoraConfig(
        r=spec.rank,
        lora_alpha=spec.alpha,  # type: ignore[arg-type]  # typed int; scaled as any number
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def wrap_lora(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    """`model` with a LoRA adapter (PEFT), the base frozen; target modules checked first.

    With `spec.initial_adapter` the adapter's weights come from that PEFT directory (trainable),
    whose rank and target modules must match `spec`."""
    check_target_modules(model, spec.target_modules)
    with quiet_peft():
        return _wrap(model, spec)


@contextmanager
def quiet_peft() -> Iterator[None]:
    """PEFT 0.21 asks transformers 5 for `is_gradient_checkpointing`, deprecated there (a
    `FutureWarning` on every wrap and load); nothing else is silenced."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing`", FutureWarning)
        yield


def load_adapter(base: torch.nn.Module, adapter_dir: str | Path) -> torch.nn.Module:
    """`base` with the PEFT adapter in `adapter_dir` (`PeftModel.from_pretrained`, frozen)."""
    from peft import PeftModel

    with quiet_peft():
        loaded: torch.nn.Module = PeftModel.from_pretrained(base, str(adapter_dir))
    return loaded


def _wrap(model: torch.nn.Module, spec: LoraSpec) -> torch.nn.Module:
    from peft import PeftModel, get_peft_model

    if spec.initial_adapter is None:
        wrapped: torch.nn.Module = get_peft_model(model, lora_config(spec))
        return wrapped
    from peft import PeftConfig

    saved = PeftConfig.from_pretrained(spec.initial_adapter)
    rank = getattr(saved, "r", None)
    targets = set(getattr(saved, "target_modules", None) or ())
    if rank != spec.rank or targets != set(spec.target_modules):
        raise ValueError(
            f"model.lora.initialAdapter: {spec.initial_adapter} has rank {rank} and target "
            f"modules {sorted(targets)}, the job asks for rank {spec.rank} and "
            f"{sorted(spec.target_modules)}"
        )
    loaded: torch.nn.Module = PeftModel.from_pretrained(
        model,
        spec.initial_adapter,
        is_trainable=True,
    )
    return loaded


def is_peft(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def adapter_names(model: torch.nn.Module) -> list[str]:
    """Names of the trainable adapter parameters in `model.state_dict()` order."""
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    return [name for name in model.state_dict() if name in trainable]


def _full(tensor: torch.Tensor) -> torch.Tensor:
    full = getattr(tensor, "full_tensor", None)
    return full() if callable(full) else tensor


def iter_adapter(model: torch.nn.Module, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """The adapter's full tensors in `dtype`, by the names PEFT saves them under
    (`base_model.model....lora_A.weight`, without the adapter name).

    Collective on a sharded model, like `GRPOTrainer.iter_publishable`: every rank consumes
    it in step."""
    from peft.utils import get_peft_model_state_dict

    state = model.state_dict()
    local = {name: state[name] for name in adapter_names(model)}
    gathered = {name: _full(t.detach().to(dtype)).contiguous() for name, t in local.items()}
    peft_model: Any = model
    yield from get_peft_model_state_dict(peft_model, state_dict=gathered).items()


def write_adapter(model: torch.nn.Module, state: dict[str, torch.Tensor], out_dir: Path) -> None:
    """Write `state` (from `iter_adapter`) as a PEFT adapter directory: `adapter_config.json`
    and `adapter_model.safetensors`, as `PeftModel.save_pretrained` lays them out."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    peft_model: Any = model
    config = peft_model.peft_config["default"]
    config.save_pretrained(str(out_dir))
    save_file(
        {k: v.to("cpu").contiguous() for k, v in state.items()},
        str(out_dir / ADAPTER_WEIGHTS),
        metadata={"format": "pt"},
    )


def merge_adapter(base_dir: Path, adapter_dir: Path, out_dir: Path, dtype: str) -> Path:
    """Write a full Hugging Face checkpoint of `base_dir` with the adapter in `adapter_dir`
    merged into its weights (`merge_and_unload`), in `dtype`, with the base's tokenizer."""
    import shutil

    from transformers import AutoModelForCausalLM

    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    base: Any = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    peft_model: Any = load_adapter(base, adapter_dir)
    merged: Any = peft_model.merge_and_unload()
    merged.to(dtypes[dtype]).save_pretrained(str(out_dir), safe_serialization=True)
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "generation_config.json",
    ):
        if (Path(base_dir) / name).is_file():
            shutil.copy2(Path(base_dir) / name, Path(out_dir) / name)
    return Path(out_dir)
