"""A trainer bound to its run directory: resume, commit a step, know the live weights.

`TrainerSession.open` resumes from the newest complete checkpoint in the run directory (every
rank's shards of the float32 weights and, when it has them, of the optimizer state, version
counter, collector position) or starts at step 0 from the initial model. `commit_step` turns
one optimizer step into a new weight version: the ranks gather the weights in the serving
dtype and rank 0 writes them as a Hugging Face checkpoint (every step when engines load them
from disk, only with a checkpoint when they are broadcast: `write_every_version`); every
`checkpoint_every` steps each rank then snapshots its shards (the optimizer state only every
`optimizer_every` steps) and writes them in a thread. The caller publishes the version before
the write is waited for (`commit_step(wait=False)`, then `finish_commit`), and where
`checkpoint_in_background` the checkpoint completes during the next step. Every rank advances
the same counters, so all ranks agree on the step and version without talking.

Resuming from a checkpoint without optimizer state takes its weights and counters and the
optimizer state of the newest complete checkpoint before it that has one: the AdamW moments
(and step count) are then a few steps old, which a warning says. With no such checkpoint the
moments start fresh, with a warning too. Both are deterministic: the same checkpoints resume
to the same state.

A checkpoint written by a gang of another world size (`spec.trainer.nodes` or `gpusPerNode`
changed: the operator restarts the gang from the checkpoint) is resharded as it is read
(`RunDir.load_local`), with a warning naming both sizes; the weights and the optimizer state
may come from checkpoints of different sizes.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from dressage.api.job import AsyncRLJobSpec
from dressage.data.versions import version_label
from dressage.trainer.checkpoint import RunDir, TrainState
from dressage.trainer.correction import CorrectionConfig
from dressage.trainer.distributed import DistEnv, barrier, broadcast_object
from dressage.trainer.grpo import (
    DTYPES,
    GRPOTrainer,
    TrainerConfig,
    load_policy,
    write_pretrained,
)
from dressage.trainer.lora import iter_adapter, wrap_lora, write_adapter
from dressage.trainer.shards import load_local_shards, local_shards

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
        precision=spec.training.precision,
        max_tokens_per_micro_batch=spec.training.max_tokens_per_micro_batch,
        activation_checkpointing=spec.training.activation_checkpointing,
        serving_dtype=serving_dtype(spec),
        correction=CorrectionConfig.from_spec(spec.training.off_policy_correction),
        routing_replay=spec.rollout.routing_replay,
    )


def serving_dtype(spec: AsyncRLJobSpec) -> str:
    """The dtype published weights are written in: `spec.model.dtype`, float32 for a CPU
    trainer (whose engines run on CPU too)."""
    return spec.model.dtype if spec.trainer.gpus_per_node > 0 else "float32"


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
    checkpoint_in_background: bool = False
    """Whether `commit_step` returns while the checkpoint is still being written."""
    pending: Future[Any] | None = None
    """The background write of this rank's newest checkpoint shards."""
    pinned_versions: set[str] = field(default_factory=set)
    """Versions whose weights pruning always keeps: the best-evaluated one
    (`spec.evaluation`), set by the pipeline as evaluations complete."""
    optimizer_every: int = 1
    """Checkpoints carry the optimizer state every this many steps (a multiple of
    `checkpoint_every`)."""
    write_every_version: bool = True
    """Write every version's weights as a Hugging Face checkpoint (engines load them from
    disk); otherwise only at checkpoint steps (engines get them over the network)."""
    lora: bool = False
    """The policy trains a LoRA adapter (`spec.model.lora`): a version after `v0` is written
    as the adapter alone (`dressage.trainer.lora.write_adapter`), the base never again."""
    optimizer_step: int | None = None
    """The checkpoint whose optimizer state this session resumed from, when older than the
    checkpoint it resumed (None: the same one, or a fresh start)."""

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
        # Rank 0 picks the checkpoint, so that every rank resumes from the same one.
        step = broadcast_object(run_dir.latest_step(), env)
        saved = None if step is None else run_dir.load_state(step)
        state = saved or TrainState()
        model = load_policy(model_dir, device)
        if spec.model.lora is not None:
            model = wrap_lora(model, spec.model.lora)
        trainer = GRPOTrainer(model, config or trainer_config(spec), env, device)
        if saved is not None:
            optimizer_step = run_dir.optimizer_step(saved.step)
            reads = {saved.step} if optimizer_step is None else {saved.step, optimizer_step}
            for read in sorted(reads):
                written_by = run_dir.world_size(read)
                if written_by != env.world_size:
                    warnings.warn(
                        f"checkpoint {run_dir.checkpoint_dir(read)} was written by {written_by} "
                        f"trainer ranks: resharding it to {env.world_size} "
                        "(spec.trainer.nodes x gpusPerNode changed)",
                        stacklevel=2,
                    )
            load_local_shards(
                trainer,
                functools.partial(run_dir.load_local, saved.step, env.rank, env.world_size),
                None
                if optimizer_step is None
                else functools.partial(
                    run_dir.load_local, optimizer_step, env.rank, env.world_size
                ),
            )
            if optimizer_step is None:
                warnings.warn(
                    f"resuming at step {saved.step} with fresh optimizer moments: no "
                    "checkpoint up to it has optimizer state (training.optimizerCheckpointEvery)",
                    stacklevel=2,
                )
            elif optimizer_step != saved.step:
                warnings.warn(
                    f"resuming the weights of step {saved.step} with the optimizer state of "
                    f"step {optimizer_step} (training.optimizerCheckpointEvery): the AdamW "
                    f"moments are {saved.step - optimizer_step} steps old",
                    stacklevel=2,
                )
        else:
            optimizer_step = None
        extras = [model_dir / n for n in TOKENIZER_FILES if (model_dir / n).is_file()]
        return cls(
            trainer=trainer,
            run_dir=run_dir,
            state=state,
            env=env,
            initial_model_dir=Path(model_dir),
            checkpoint_every=spec.training.checkpoint_every,
            checkpoint_in_background=(
                device.type == "cuda"
                if spec.training.checkpoint_in_background is None
                else spec.training.checkpoint_in_background
            ),
            resumed=saved is not None,
            extra_files=extras,
            lora=spec.model.lora is not None,
            optimizer_every=spec.training.optimizer_every,
            write_every_version=spec.inference.weight_sync == "disk",
            optimizer_step=(
                optimizer_step if saved is not None and optimizer_step != saved.step else None
            ),
        )

    @property
    def weights_dir(self) -> Path:
        """The checkpoint directory of the current weight version (with LoRA, after `v0`, the
        adapter directory of the current version; `v0` is the base model)."""
        if self.state.version_index == 0:
            return self.initial_model_dir
        return self.run_dir.weights_dir(self.state.version)

    @property
    def engine_start(self) -> tuple[Path, str]:
        """The checkpoint and label an engine starts on: the current version's, or for a LoRA
        job the base model as `v0` (the publisher then loads the current version's adapter)."""
        if self.lora:
            return self.initial_model_dir, version_label(0)
        return self.weights_dir, self.state.version

    def commit_step(
        self,
        collector_state: Mapping[str, Any],
        record: Mapping[str, Any] | None = None,
        *,
        wait: bool = True,
    ) -> tuple[str, Path]:
        """After an optimizer step: issue the next version and persist it (rank 0 writes),
        with the step's history `record` in the checkpoint.

        Returns the new version label and the directory its weights are written to (when the
        session writes them, see `write_every_version`). With `wait=False` a checkpoint
        written in line is only started: the caller publishes the version, then calls
        `finish_commit`. All ranks must call this together (it ends with a barrier).
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
        checkpoint = self.state.step % self.checkpoint_every == 0
        if self.lora:
            # The adapter only: megabytes, so every version is written whatever the transport.
            serving = DTYPES[self.trainer.config.serving_dtype]
            module = self.trainer.module
            adapter = {name: t.to("cpu") for name, t in iter_adapter(module, serving)}
            if self.env.is_main:
                save_adapter = functools.partial(write_adapter, self.trainer.module, adapter)
                self.run_dir.write_weights(version, save_adapter)
            del adapter
        elif self.write_every_version or checkpoint:
            weights = self.trainer.publishable_state_dict()
            if self.env.is_main:
                dtype = self.trainer.config.serving_dtype
                save = functools.partial(
                    write_pretrained, self.trainer.module, weights, dtype=dtype
                )
                self.run_dir.write_weights(version, save, self.extra_files)
            del weights  # rank 0's full copy in the serving dtype; free it before checkpointing
        if checkpoint:
            self._start_checkpoint(optimizer=self.state.step % self.optimizer_every == 0)
            if wait:
                self.finish_commit()
        barrier(self.env)
        return version, path

    def finish_commit(self) -> None:
        """Wait for the step's checkpoint when it is written in line (not in the background).
        Collective: every rank calls it after `commit_step(wait=False)`."""
        if not self.checkpoint_in_background:
            self.wait_for_checkpoint()

    def _start_checkpoint(self, *, optimizer: bool) -> None:
        # One checkpoint write in flight per rank: the previous one has had a whole step.
        self.wait_for_checkpoint()
        if self.env.is_main:
            # The newest complete checkpoints, the newest one with optimizer state and the one
            # about to be written are kept.
            keep_steps = (KEEP_CHECKPOINTS - 1) * self.checkpoint_every
            latest = self.run_dir.latest_step()
            keep = set() if latest is None else {self.run_dir.optimizer_step(latest)}
            self.run_dir.prune(
                keep_steps,
                self._versions_to_keep(),
                keep_checkpoints={s for s in keep if s is not None},
            )
            self.run_dir.write_state(self.state, self.env.world_size, optimizer=optimizer)
        barrier(self.env)
        shards = local_shards(self.trainer, optimizer=optimizer)
        self.pending = self.run_dir.save_shards(self.state.step, self.env.rank, shards)

    def wait_for_checkpoint(self) -> None:
        """Block until every rank's newest checkpoint shards are written (raises this rank's
        write error). Collective: every rank must call it."""
        if self.pending is not None:
            pending, self.pending = self.pending, None
            pending.result()
        barrier(self.env)

    def _versions_to_keep(self) -> set[str]:
        # The three newest versions (an engine may still be reading the previous one) and
        # the version of every checkpoint that pruning keeps.
        latest = self.state.version_index
        keep = {version_label(i) for i in range(max(0, latest - 2), latest + 1)}
        for back in range(KEEP_CHECKPOINTS * self.checkpoint_every):
            keep.add(version_label(max(0, latest - back)))
        return keep | self.pinned_versions
