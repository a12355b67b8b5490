"""A checkpoint resumed by a gang of another world size: 2 ranks to 1 and to 3, and 1 to 2.

The resumed gang holds exactly the weights and optimizer state the writing gang had (each
gathered whole and compared), and trains on as a run that never changed size does. Gloo
ranks launched by torchrun, as in `test_trainer_fsdp`; one-rank runs train in this process.
Each launched rank writes a `done-rank<R>` marker before its process group is torn down and
the tests judge on the files (gloo occasionally aborts at teardown after all work is done).
"""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from dressage_testkit.trainer import gathered_state, reshard_run, small_model

from dressage.trainer.distributed import DistEnv
from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
LR = 1e-2
END = 4


def _launch(ranks: int, model: Path, out: Path, *runs: tuple[Path, int]) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        "--nproc_per_node", str(ranks), "-m", "dressage_testkit.trainer",
        "--model", str(model), "--out", str(out), "--steps", "0", "--lr", str(LR),
    ]  # fmt: skip
    for run, until in runs:
        cmd += ["--reshard-run", str(run), str(until)]
    done = run_command(cmd, env=env, timeout=300)
    finished = all((out / f"done-rank{r}").is_file() for r in range(ranks))
    assert finished, done.stdout[-3000:] + done.stderr[-3000:]


def _one_rank(model: Path, run: Path, until: int, out: Path) -> tuple[Any, list[str]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = reshard_run(model, run, until, DistEnv(), out, LR)
    return session, [str(w.message) for w in caught]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One rank trains 2 steps and, as the run that never changes size, on to step 4; a
    gang of 2 trains 2 steps from scratch and resumes the one-rank checkpoint of step 2;
    1 rank and a gang of 3 resume the 2-rank checkpoint of step 2. All to step 4."""
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("reshard")
    out = root / "out"
    out.mkdir()
    model = small_model(root / "model")
    _one_rank(model, root / "one", 2, out)
    shutil.copytree(root / "one", root / "one-to-two")
    one_at_2 = torch.load(out / "one-end.pt")
    _one_rank(model, root / "one", END, out)
    _launch(2, model, out, (root / "two", 2), (root / "one-to-two", END))
    for name in ("two-to-one", "two-to-three", "two-stale"):
        shutil.copytree(root / "two", root / name)
    _, warned = _one_rank(model, root / "two-to-one", END, out)
    _launch(3, model, out, (root / "two-to-three", END))
    return {"root": root, "out": out, "model": model, "one_at_2": one_at_2, "warned": warned}


def _assert_same(ours: Any, theirs: Any, where: str = "") -> None:
    if isinstance(ours, torch.Tensor):
        assert isinstance(theirs, torch.Tensor), where
        assert torch.equal(ours, theirs), where
    elif isinstance(ours, dict):
        assert ours.keys() == theirs.keys(), where
        for key in ours:
            _assert_same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _assert_same(a, b, f"{where}.{i}")
    else:
        assert ours == theirs, where


@pytest.mark.parametrize(
    ("resumed", "written"), [("two-to-one", "two"), ("two-to-three", "two"), ("one-to-two", "one")]
)
def test_a_gang_of_another_size_resumes_exactly_the_weights_and_optimizer_state(
    runs: dict[str, Any], resumed: str, written: str
) -> None:
    out = runs["out"]
    before = runs["one_at_2"] if written == "one" else torch.load(out / "two-end.pt")
    after = torch.load(out / f"{resumed}-open.pt")
    assert before["step"] == after["step"] == 2
    assert before["optimizer"] is not None
    _assert_same(after, before)


@pytest.mark.parametrize("resumed", ["two-to-one", "two-to-three", "one-to-two"])
def test_training_resumed_on_another_size_matches_a_run_that_never_changed_size(
    runs: dict[str, Any], resumed: str
) -> None:
    straight = torch.load(runs["out"] / "one-end.pt")
    trained = torch.load(runs["out"] / f"{resumed}-end.pt")
    assert straight["step"] == trained["step"] == END
    initial = torch.load(runs["out"] / "two-end.pt")["model"]
    assert any(not torch.equal(straight["model"][n], initial[n]) for n in initial)
    # Float32 throughout: only the order of the sums differs between gang sizes.
    for name, tensor in straight["model"].items():
        torch.testing.assert_close(trained["model"][name], tensor, rtol=1e-4, atol=1e-5)
    moments = straight["optimizer"]["state"]
    for name, state in trained["optimizer"]["state"].items():
        for key in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(state[key], moments[name][key], rtol=1e-3, atol=1e-7)


def test_the_resharding_is_warned_naming_both_sizes(runs: dict[str, Any]) -> None:
    assert any(
        "written by 2 trainer ranks: resharding it to 1" in message for message in runs["warned"]
    ), runs["warned"]


def test_weights_of_one_size_resume_with_older_optimizer_state_of_another(
    runs: dict[str, Any],
) -> None:
    """The 2-rank checkpoint of step 2 has optimizer state, the 1-rank one of step 3 does not
    (optimizer state every second step): one rank resumes step 3's weights and step 2's
    optimizer state, resharded from the 2 ranks that wrote it."""
    root, out, model = runs["root"], runs["out"], runs["model"]
    first, _ = _one_rank(model, root / "two-stale", 3, out)
    weights_at_3 = gathered_state(first.trainer)["model"]
    del first
    resumed, warned = _one_rank(model, root / "two-stale", 3, out)
    assert (resumed.state.step, resumed.optimizer_step) == (3, 2)
    assert any("step-000002 was written by 2 trainer ranks" in m for m in warned), warned
    state = gathered_state(resumed.trainer)
    _assert_same(state["model"], weights_at_3)
    _assert_same(state["optimizer"], torch.load(out / "two-end.pt")["optimizer"])
