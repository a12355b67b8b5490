"""`spec.model.lora`: train a LoRA adapter instead of the full weights.

With `lora` set the trainer wraps the policy with PEFT (`peft.get_peft_model` with a
`LoraConfig` built from these fields): the base weights are frozen, only the adapter's `A` and
`B` matrices are trained, and each weight version after `v0` is an adapter in PEFT's format
(`adapter_config.json` + `adapter_model.safetensors`), the format SGLang's
`/load_lora_adapter` and the Hub load. `v0` is the base model itself.

Target module names are checked here for their form only; `dressage.trainer.lora` checks them
against the model's own modules before the run starts (with a did-you-mean), since the model
is not readable where a manifest is validated.

This module is torch-free (the operator validates a job with it).
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from dressage.api.base import ApiModel

MAX_LORA_RANK = 1024
"""The largest `rank` a job may ask for."""
DEFAULT_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
"""The attention projections of a Llama/Qwen-style decoder: what `targetModules` defaults to."""
SGLANG_LORA_TARGET_MODULES = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
    "qkv_proj",
    "gate_up_proj",
)
"""Module names SGLang's `--lora-target-modules` accepts besides `all` (0.5.2
`server_args.py`: `choices=SUPPORTED_LORA_TARGET_MODULES + [LORA_TARGET_ALL_MODULES]`, with
`SUPPORTED_LORA_TARGET_MODULES` the names above), so the operator can pass a job's
`targetModules` to the engines unchanged."""
_MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LoraSpec(ApiModel):
    """A LoRA adapter to train on the frozen base model (PEFT's `LoraConfig`)."""

    rank: int = Field(default=16, ge=1, le=MAX_LORA_RANK)
    """The adapter's rank `r`; the engines are started with `--max-lora-rank` at least this."""
    alpha: float = Field(default=32.0, gt=0.0)
    """`lora_alpha`: the adapter's update is scaled by `alpha / rank`."""
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    """`lora_dropout` on the adapter's input while training (the engines apply none)."""
    target_modules: list[str] = Field(
        default_factory=lambda: list(DEFAULT_TARGET_MODULES), min_length=1
    )
    """Names of the linear layers that get an adapter (the last part of the module's name, as
    PEFT matches them: `q_proj` adapts `model.layers.*.self_attn.q_proj`). Checked against the
    model's modules before the run starts; the engines serve the names SGLang knows
    (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj`)."""
    initial_adapter: str | None = Field(default=None, min_length=1)
    """A PEFT adapter directory to start from (its rank, alpha and target modules must match
    the fields above); unset: a fresh adapter (`B = 0`, so `v0` is the base model)."""

    @field_validator("target_modules")
    @classmethod
    def _check_target_modules(cls, names: list[str]) -> list[str]:
        for name in names:
            if not _MODULE_NAME.match(name):
                raise ValueError(
                    f"model.lora.targetModules: {name!r} is not a module name "
                    "(the last part of a module's dotted name, e.g. q_proj)"
                )
        if len(set(names)) != len(names):
            raise ValueError("model.lora.targetModules: names must be unique")
        return names

    @property
    def scaling(self) -> float:
        """`alpha / rank`, the factor PEFT applies to the adapter's update."""
        return self.alpha / self.rank
