"""One GRPO step on a real (very small) Llama, checkpoints, resume and the rendezvous env."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from dressage_testkit.trainer import gathered_weights, job_spec, small_model, synthetic_batch

from dressage.api.figures import figure, trainer_keys
from dressage.api.job import AsyncRLJobSpec, ModelSpec, TrainingSpec
from dressage.data.groups import Group, TrainBatch
from dressage.data.versions import INITIAL_VERSION, version_label
from dressage.rollout.artifacts.samples import Sample
from dressage.trainer.batch import ScoredSample, to_tensors
from dressage.trainer.checkpoint import RunDir, TrainState
from dressage.trainer.distributed import DistEnv, dist_env_from
from dressage.trainer.grpo import GRPOTrainer, TrainerConfig, load_policy
from dressage.trainer.loss import token_logprobs_and_entropy
from dressage.trainer.session import TrainerSession

torch.set_num_threads(1)
PROMPT = [5, 9, 10]
GOOD, BAD = [20, 2], [21, 2]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_model(tmp_path_factory.mktemp("model"))


def _response_logprob(model: torch.nn.Module, response: list[int]) -> float:
    sample = Sample.build(
        prompt_tokens=PROMPT,
        response_tokens=response,
        response_versions=["v0"] * len(response),
        rollout_log_probs=[0.0] * len(response),
    )
    t = to_tensors([ScoredSample(sample, 0.0)], pad_id=0)
    with torch.no_grad():
        logits = model(input_ids=t.input_ids, attention_mask=t.attention_mask).logits[:, :-1]
    lp, _ = token_logprobs_and_entropy(logits, t.targets)
    return float((lp * t.loss_mask).sum())


def _preference_batch(model: torch.nn.Module) -> TrainBatch:
    samples = tuple(
        Sample.build(
            prompt_tokens=PROMPT,
            response_tokens=response,
            response_versions=["v0"] * len(response),
            # On-policy: the rollout logprobs are the policy's own.
            rollout_log_probs=[_response_logprob(model, response) / len(response)] * len(response),
            reward=reward,
            group_id="g",
            parent_traj_id=f"t{i}",
        )
        for i, (response, reward) in enumerate([(GOOD, 1.0), (BAD, 0.0)])
    )
    return TrainBatch(groups=(Group("g", samples),))


def test_grpo_steps_raise_the_rewarded_answer_and_lower_the_other(model_dir: Path) -> None:
    model = load_policy(model_dir, torch.device("cpu"))
    trainer = GRPOTrainer(model, TrainerConfig(learning_rate=1e-2))
    good0, bad0 = _response_logprob(model, GOOD), _response_logprob(model, BAD)
    for _ in range(3):
        metrics = trainer.train_step(_preference_batch(model))
    assert _response_logprob(model, GOOD) > good0 + 0.5
    assert _response_logprob(model, BAD) < bad0 - 0.5
    assert metrics["reward"] == 0.5
    assert metrics["samples"] == 2.0
    assert metrics["trained_tokens"] == 4.0
    assert metrics["staleness/version_span_mean"] == 1.0
    assert 0.0 <= metrics["clip_fraction"] <= 1.0
    assert metrics["entropy"] > 0.0
    # Every figure the declaration says the trainer fills is in the step's figures (the MoE
    # routing ones only with routing replay on).
    routing = {figure("routing_agreement").key, figure("routed_token_fraction").key}
    assert trainer_keys() - routing <= set(metrics)


def test_logprob_diff_is_zero_on_policy_and_positive_off_policy(model_dir: Path) -> None:
    model = load_policy(model_dir, torch.device("cpu"))
    trainer = GRPOTrainer(model, TrainerConfig(learning_rate=1e-9))
    # Per-token rollout logprobs equal to the policy's own: build them exactly.
    sample = Sample.build(
        prompt_tokens=PROMPT,
        response_tokens=GOOD,
        response_versions=["v0", "v0"],
        rollout_log_probs=[0.0, 0.0],
    )
    t = to_tensors([ScoredSample(sample, 0.0)], pad_id=0)
    with torch.no_grad():
        logits = model(input_ids=t.input_ids, attention_mask=t.attention_mask).logits[:, :-1]
    lp, _ = token_logprobs_and_entropy(logits, t.targets)
    own = [float(x) for x in lp[0][t.loss_mask[0] > 0]]

    def batch(shift: float) -> TrainBatch:
        s = Sample.build(
            prompt_tokens=PROMPT,
            response_tokens=GOOD,
            response_versions=["v0", "v0"],
            rollout_log_probs=[x + shift for x in own],
            reward=1.0,
            group_id="g",
            parent_traj_id="t",
        )
        return TrainBatch(groups=(Group("g", (s,)),))

    assert trainer.train_step(batch(0.0))["train_rollout_logprob_abs_diff"] == pytest.approx(
        0.0, abs=1e-5
    )
    assert trainer.train_step(batch(0.3))["train_rollout_logprob_abs_diff"] == pytest.approx(
        0.3, abs=1e-3
    )
    # The mismatch figures, with the rollout 0.3 nats above the policy on every token:
    # k1 = mean(rollout - train) = 0.3, k3 = mean(exp(-0.3) - 1 + 0.3).
    figures = trainer.train_step(batch(0.3))
    assert figures["mismatch_kl_k1"] == pytest.approx(0.3, abs=1e-3)
    assert figures["mismatch_kl_k3"] == pytest.approx(math.exp(-0.3) - 1 + 0.3, abs=1e-3)
    assert figures["is_ess_fraction"] == pytest.approx(1.0)  # no correction: weights all 1


def test_truncated_importance_sampling_reaches_the_step(model_dir: Path) -> None:
    """With `tis` and a clip below the tokens' ratio, every weight is clipped."""
    from dressage.trainer.correction import CorrectionConfig

    model = load_policy(model_dir, torch.device("cpu"))
    config = TrainerConfig(
        learning_rate=1e-9, correction=CorrectionConfig(mode="tis", tis_clip=0.5)
    )
    trainer = GRPOTrainer(model, config)
    sample = Sample.build(
        prompt_tokens=PROMPT,
        response_tokens=GOOD,
        response_versions=["v0", "v0"],
        rollout_log_probs=[-30.0, -30.0],  # the rollout found these tokens far less likely
        reward=1.0,
        group_id="g",
        parent_traj_id="t",
    )
    figures = trainer.train_step(TrainBatch(groups=(Group("g", (sample,)),)))
    assert figures["off_policy_clipped_fraction"] == 1.0
    assert figures["off_policy_masked_fraction"] == 0.0


def _spec(**training: object) -> AsyncRLJobSpec:
    return AsyncRLJobSpec(model=ModelSpec(source="unused"), training=TrainingSpec(**training))  # type: ignore[arg-type]


def test_session_commit_writes_weights_then_checkpoint_and_resumes(
    model_dir: Path, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    spec = _spec(learning_rate=1e-3)
    session = TrainerSession.open(spec, model_dir=model_dir, run_dir=run)
    assert not session.resumed
    assert session.weights_dir == model_dir
    for step in range(1, 4):
        session.trainer.train_step(synthetic_batch(step))
        version, path = session.commit_step({"next_prompt": 8 * step})
        assert version == version_label(step)
        assert (path / "model.safetensors").is_file()
        assert (path / "tokenizer.json").is_file()
    # The checkpoint of the last step is written in the background.
    session.wait_for_checkpoint()
    assert run.latest_step() == 3
    assert json.loads((run.checkpoints_root / "latest.json").read_text()) == {"step": 3}
    # Old checkpoints and weights are pruned; the newest ones stay.
    assert sorted(p.name for p in run.checkpoints_root.glob("step-*")) == [
        "step-000002",
        "step-000003",
    ]
    assert {"v2", "v3"} <= {p.name for p in run.weights_root.iterdir()}

    resumed = TrainerSession.open(spec, model_dir=model_dir, run_dir=run)
    assert resumed.resumed
    assert resumed.state == TrainState(step=3, version_index=3, collector={"next_prompt": 24})
    assert resumed.weights_dir == run.weights_dir("v3")
    for name, tensor in session.trainer.module.state_dict().items():
        torch.testing.assert_close(resumed.trainer.module.state_dict()[name], tensor)
    # The optimizer state came back too: its step counter matches.
    saved = session.trainer.optimizer.state_dict()["state"][0]["step"]
    assert resumed.trainer.optimizer.state_dict()["state"][0]["step"] == saved


def test_latest_pointer_names_only_complete_checkpoints(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.load_state() is None
    # A half-written checkpoint directory (killed mid-write) is invisible.
    (run.checkpoints_root / ".step-000001.tmp").mkdir(parents=True)
    assert run.latest_step() is None


def test_dist_env_from_torchrun_and_operator_variables() -> None:
    assert dist_env_from({}) == DistEnv(rank=0, world_size=1, local_rank=0)
    torchrun = {
        "WORLD_SIZE": "4",
        "RANK": "3",
        "LOCAL_RANK": "1",
        "MASTER_ADDR": "h",
        "MASTER_PORT": "1",
    }
    assert dist_env_from(torchrun) == DistEnv(rank=3, world_size=4, local_rank=1)
    per_node = {"WORLD_SIZE": "2", "NODE_RANK": "1", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
    env = dist_env_from(per_node)
    assert env.rank == 1
    assert not env.is_main


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"WORLD_SIZE": "x"}, "WORLD_SIZE must be an integer"),
        ({"WORLD_SIZE": "2", "RANK": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "RANK=2"),
        ({"WORLD_SIZE": "2", "RANK": "0", "MASTER_PORT": "1"}, "MASTER_ADDR is required"),
    ],
)
def test_dist_env_errors_name_the_variable(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dist_env_from(environ)


def test_the_checkpoint_keeps_the_steps_history_record(model_dir: Path, tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    session = TrainerSession.open(_spec(learning_rate=1e-3), model_dir=model_dir, run_dir=run)
    session.trainer.train_step(synthetic_batch(1))
    session.commit_step({"next_prompt": 8}, {"step": 1, "reward": 0.5})
    session.wait_for_checkpoint()
    saved = run.load_state()
    assert saved is not None
    assert saved.record == {"step": 1, "reward": 0.5}


def test_the_trainer_starts_at_the_initial_version_engines_are_started_with() -> None:
    state = TrainState()
    assert state.version == INITIAL_VERSION
    assert state.next_version() == "v1"


def _trained(model_dir: Path, steps: int, **config: object) -> tuple[GRPOTrainer, list]:
    trainer = GRPOTrainer(
        load_policy(model_dir, torch.device("cpu")),
        TrainerConfig(learning_rate=1e-2, **config),  # type: ignore[arg-type]
    )
    history = [trainer.train_step(synthetic_batch(step)) for step in range(1, steps + 1)]
    return trainer, history


def test_micro_batched_gradient_accumulation_equals_one_big_batch(model_dir: Path) -> None:
    big, big_history = _trained(model_dir, 2)
    # 8 padded tokens per pass: every synthetic sample (3..9 tokens) gets its own pass or two.
    small, small_history = _trained(model_dir, 2, max_tokens_per_micro_batch=8)
    # Only the order of float32 sums differs; AdamW divides by sqrt(v), so a gradient entry
    # near zero can carry that rounding into its update at ~1e-5 (updates are ~lr = 1e-2).
    for name, tensor in big.module.state_dict().items():
        torch.testing.assert_close(small.module.state_dict()[name], tensor, rtol=1e-4, atol=1e-5)
    for ours, theirs in zip(small_history, big_history, strict=True):
        for key in ("loss", "entropy", "clip_fraction", "grad_norm", "trained_tokens"):
            assert ours[key] == pytest.approx(theirs[key], rel=1e-5), key


def test_activation_checkpointing_and_logprob_chunking_leave_the_update_unchanged(
    model_dir: Path,
) -> None:
    plain, _ = _trained(model_dir, 1)
    other, _ = _trained(model_dir, 1, activation_checkpointing=True, logprob_chunk_tokens=3)
    for name, tensor in plain.module.state_dict().items():
        torch.testing.assert_close(other.module.state_dict()[name], tensor, rtol=1e-4, atol=1e-5)


def test_bf16_compute_keeps_float32_master_weights_and_learns(model_dir: Path) -> None:
    model = load_policy(model_dir, torch.device("cpu"))
    trainer = GRPOTrainer(model, TrainerConfig(learning_rate=1e-2, precision="bf16"))
    good0 = _response_logprob(model, GOOD)
    for _ in range(3):
        trainer.train_step(_preference_batch(model))
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert _response_logprob(model, GOOD) > good0 + 0.5


def test_published_weights_are_written_in_the_serving_dtype(
    model_dir: Path, tmp_path: Path
) -> None:
    from safetensors.torch import load_file

    trainer, _ = _trained(model_dir, 1, serving_dtype="bfloat16")
    trainer.save_pretrained(tmp_path / "out")
    saved = load_file(str(tmp_path / "out" / "model.safetensors"))
    master = gathered_weights(trainer)
    assert saved.keys() == master.keys()
    for name, tensor in saved.items():
        assert tensor.dtype == torch.bfloat16, name
        torch.testing.assert_close(tensor, master[name].to(torch.bfloat16))
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["dtype"] == "bfloat16"
    # The trainer's own master weights stay float32.
    assert all(t.dtype == torch.float32 for t in master.values())


def test_a_session_resumed_from_its_checkpoint_continues_identically(
    model_dir: Path, tmp_path: Path
) -> None:
    spec = job_spec(learning_rate=1e-2, checkpoint_in_background=True)

    def train(session: TrainerSession, until: int) -> None:
        while session.state.step < until:
            session.trainer.train_step(synthetic_batch(session.state.step + 1))
            session.commit_step({"next_prompt": session.state.step})
        session.wait_for_checkpoint()

    straight = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "a"))
    train(straight, 3)
    first = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "b"))
    train(first, 2)
    resumed = TrainerSession.open(spec, model_dir=model_dir, run_dir=RunDir(tmp_path / "b"))
    assert resumed.state.step == 2
    train(resumed, 3)
    for name, tensor in straight.trainer.module.state_dict().items():
        assert torch.equal(resumed.trainer.module.state_dict()[name], tensor), name


def test_a_checkpoint_missing_a_ranks_shards_is_not_resumed(
    model_dir: Path, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    session = TrainerSession.open(job_spec(), model_dir=model_dir, run_dir=run)
    for step in (1, 2):
        session.trainer.train_step(synthetic_batch(step))
        session.commit_step({})
    session.wait_for_checkpoint()
    (run.checkpoint_dir(2) / "rank-0.done").unlink()
    assert run.latest_step() == 1


def test_a_checkpoint_of_another_world_size_with_shards_missing_is_refused(
    model_dir: Path, tmp_path: Path
) -> None:
    """Resuming on another gang size reshards from every writing rank's files
    (`tests/integration/test_trainer_reshard.py`); ranks whose files are gone cannot be."""
    run = RunDir(tmp_path / "run")
    session = TrainerSession.open(job_spec(), model_dir=model_dir, run_dir=run)
    session.trainer.train_step(synthetic_batch(1))
    session.commit_step({})
    session.wait_for_checkpoint()
    state = run.checkpoint_dir(1) / "state.json"
    state.write_text(state.read_text().replace('"world_size": 1', '"world_size": 4'))
    (run.checkpoint_dir(1) / "rank-1.done").write_text("")
    (run.checkpoint_dir(1) / "rank-2.done").write_text("")
    (run.checkpoint_dir(1) / "rank-3.done").write_text("")
    with (
        pytest.warns(UserWarning, match="written by 4 trainer ranks: resharding it to 1"),
        pytest.raises(FileNotFoundError, match="step-000001/rank-1"),
    ):
        TrainerSession.open(job_spec(), model_dir=model_dir, run_dir=run)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("precision", "fp8", "training.precision"),
        ("serving_dtype", "int8", "model.dtype"),
        ("max_tokens_per_micro_batch", 0, "maxTokensPerMicroBatch"),
    ],
)
def test_trainer_config_errors_name_the_field(field: str, value: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainerConfig(**{field: value})  # type: ignore[arg-type]


def test_job_fields_reach_the_trainer_config() -> None:
    from dressage.trainer.session import trainer_config

    spec = job_spec(max_tokens_per_micro_batch=512, activation_checkpointing=True, precision="bf16")
    config = trainer_config(spec)
    assert (config.max_tokens_per_micro_batch, config.activation_checkpointing) == (512, True)
    assert config.precision == "bf16"
    assert config.serving_dtype == "float32"  # a CPU trainer serves float32 engines
    gpu = spec.model_copy(update={"trainer": spec.trainer.model_copy(update={"gpus_per_node": 1})})
    assert trainer_config(gpu).serving_dtype == "bfloat16"


def test_a_cpu_session_writes_its_checkpoint_before_commit_returns(
    model_dir: Path, tmp_path: Path
) -> None:
    run = RunDir(tmp_path / "run")
    session = TrainerSession.open(job_spec(), model_dir=model_dir, run_dir=run)
    assert not session.checkpoint_in_background
    session.trainer.train_step(synthetic_batch(1))
    session.commit_step({"next_prompt": 2})
    # In line: a history line written after the commit always has its checkpoint.
    assert run.latest_step() == 1
