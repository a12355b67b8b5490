"""A trainer bound to its run directory: resume, commit a step, know the live weights.

`TrainerSession.open` resumes from the newest checkpoint in the run directory (weights of its
version, optimizer, version counter, collector position) or starts at step 0 from the initial
model. `commit_step` turns one optimizer step into a new weight version: rank 0 writes the
weights as a Hugging Face checkpoint and then the resumable checkpoint; every rank advances
the same counters, so all ranks agree on the step and version without talking.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from dressage.api.job import AsyncRLJobSpec
from dressage.data.versions import version_label
from dressage.trainer.checkpoint import RunDir, TrainState
from dressage.trainer.distributed import DistEnv, barrier
from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
)
"""Copied next to every published checkpoint so that SGLang can load it as a model dir."""
KEEP_CHECKPOINTS = 2


def trainer_config(spec: AsyncRLJobSpec) -> TrainerConfig:
    """The optimisation settings a job asks for."""
    return TrainerConfig(
        learning_rate=spec.training.learning_rate,
        clip_epsilon=spec.training.clip_epsilon,
        weight_decay=spec.training.weight_decay,
        max_grad_norm=spec.training.max_grad_norm,
        mask_nonlast_version_tokens=spec.proxy.mask_nonlast_version_tokens,
    )


@dataclass
class TrainerSession:
    trainer: GRPOTrainer
    run_dir: RunDir
    state: TrainState
    env: DistEnv
    initial_model_dir: Path
    checkpoint_every: int = 1
    resumed: bool = False
    extra_files: list[Path] = field(default_factory=list)

    @classmethod
    def open(
        cls,
        spec: AsyncRLJobSpec,
        *,
        model_dir: Path,
        run_dir: RunDir,
        env: DistEnv | None = None,
        device: torch.device | None = None,
        config: TrainerConfig | None = None,
    ) -> TrainerSession:
        env = env or DistEnv()
        device = device or torch.device("cpu")
        torch.manual_seed(spec.training.seed)
        saved = run_dir.load_state()
        state = saved or TrainState()
        weights = run_dir.weights_dir(state.version) if saved else model_dir
        model = load_policy(weights, device)
        trainer = GRPOTrainer(model, config or trainer_config(spec), env, device)
        if saved is not None:
            run_dir.load_optimizer(saved.step, trainer.optimizer)
        extras = [model_dir / n for n in TOKENIZER_FILES if (model_dir / n).is_file()]
        return cls(
            trainer=trainer,
            run_dir=run_dir,
            state=state,
            env=env,
            initial_model_dir=Path(model_dir),
            checkpoint_every=spec.training.checkpoint_every,
            resumed=saved is not None,
            extra_files=extras,
        )

    @property
    def weights_dir(self) -> Path:
        """The checkpoint directory of the current weight version."""
        if self.state.version_index == 0:
            return self.initial_model_dir
        return self.run_dir.weights_dir(self.state.version)

    def commit_step(
        self, collector_state: Mapping[str, Any], record: Mapping[str, Any] | None = None
    ) -> tuple[str, Path]:
        """After an optimizer step: issue the next version and persist it (rank 0 writes),
        with the step's history `record` in the checkpoint.

        Returns the new version label and the directory holding its weights. All ranks must
        call this together (it ends with a barrier).
        """
        version = self.state.next_version()
        self.state = replace(
            self.state,
            step=self.state.step + 1,
            version_index=self.state.version_index + 1,
            collector=dict(collector_state),
            record=None if record is None else dict(record),
        )
        path = self.run_dir.weights_dir(version)
        if self.env.is_main:
            self.run_dir.write_weights(version, self.trainer.save_pretrained, self.extra_files)
            if self.state.step % self.checkpoint_every == 0:
                self.run_dir.write_checkpoint(self.state, self.trainer.optimizer)
                keep = self._versions_to_keep()
                self.run_dir.prune(KEEP_CHECKPOINTS * self.checkpoint_every, keep)
        barrier(self.env)
        return version, path

    def _versions_to_keep(self) -> set[str]:
        # The three newest versions (an engine may still be reading the previous one) and
        # the version of every checkpoint that pruning keeps.
        latest = self.state.version_index
        keep = {version_label(i) for i in range(max(0, latest - 2), latest + 1)}
        for back in range(KEEP_CHECKPOINTS * self.checkpoint_every):
            keep.add(version_label(max(0, latest - back)))
        return keep
