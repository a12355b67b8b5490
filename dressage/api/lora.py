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

import difflib
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
"""Module names SGLang's `--lora-target-modules` accepts besides `all` in every supported
release: 0.5.2 `server_args.py` `choices=SUPPORTED_LORA_TARGET_MODULES +
[LORA_TARGET_ALL_MODULES]`, with `SUPPORTED_LORA_TARGET_MODULES` (`srt/utils.py`) exactly the
names above; 0.5.23 (`srt/utils/common.py`) adds MLA, `embed_tokens` and `lm_head` names. So the
operator passes a job's `targetModules` to the engines unchanged."""
ADAPTERS_KEPT = 2
"""Adapters each engine keeps loaded: the current version's and the one before it, which a
turn still running may use (`dressage.weights.lora`)."""
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
        for name in names:
            if name not in SGLANG_LORA_TARGET_MODULES:
                close = difflib.get_close_matches(name, SGLANG_LORA_TARGET_MODULES, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(
                    f"model.lora.targetModules: SGLang serves no adapter on {name!r}: {hint}"
                    f"it serves {', '.join(SGLANG_LORA_TARGET_MODULES)}"
                )
        return names

    @property
    def scaling(self) -> float:
        """`alpha / rank`, the factor PEFT applies to the adapter's update."""
        return self.alpha / self.rank

    def server_args(self) -> list[str]:
        """SGLang's LoRA flags for engines that serve this job's adapters, as 0.5.2 and 0.5.23
        parse them (`server_args.py`; the embedded engine takes the same): `--enable-lora`;
        `--max-lora-rank` and `--lora-target-modules`, which a server started without
        `--lora-paths` needs ("When no initial --lora-paths is provided, you need to specify
        both --max-lora-rank and --lora-target-modules", 0.5.23 `LoRAManager`);
        `--max-loras-per-batch`, "Maximum number of adapters for a running batch, include
        base-only request": the adapters kept loaded plus the base."""
        return [
            "--enable-lora",
            "--max-lora-rank",
            str(self.rank),
            "--lora-target-modules",
            *self.target_modules,
            "--max-loras-per-batch",
            str(ADAPTERS_KEPT + 1),
        ]
