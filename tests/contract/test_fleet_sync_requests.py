"""The requests of per-engine weight-update groups (`dressage.weights.fleet`) fit the
installed SGLang release, and the upstream facts that chose the topology hold there.

Upstream (`python/sglang/srt/`): `/init_weights_update_group` takes
`InitWeightsUpdateGroupReqInput` (`managers/io_struct.py`); the model runner's
`init_weights_update_group` (0.5.2 `model_executor/model_runner.py`, 0.5.23
`model_executor/model_runner_components/weight_updater.py`) stores
`init_custom_process_group(..., group_name=group_name)` (0.5.2 `utils.py`, 0.5.23
`utils/common.py`), which reaches `torch.distributed`'s `_new_process_group_helper`: a group
name the process already holds is refused. Only `/destroy_weights_update_group` (from 0.5.3,
`DestroyWeightsUpdateGroupReqInput`) frees one, so every group the fleet forms has a fresh name.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

from dressage.engine import EngineClient, EngineVersionError
from dressage.engine.embedded.endpoints.weights import NAME_TAKEN
from dressage.engine.sglang_support import DESTROY_WEIGHTS_UPDATE_GROUP, supports
from dressage.weights.fleet import FleetWeightSender
from dressage.weights.membership import ENGINE_RANK_OFFSET, GroupNames
from tests.contract.support import SGLANG_VERSION, fake_sglang, sglang

pytestmark = pytest.mark.contract


def _function(path: Path, name: str) -> ast.FunctionDef:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise AssertionError(f"{path}: no function {name}")


def _init_custom_process_group_source() -> Path:
    root = Path(sglang.__file__).parent / "srt"
    for candidate in (root / "utils" / "common.py", root / "utils.py"):
        if candidate.is_file() and "def init_custom_process_group" in candidate.read_text():
            return candidate
    raise AssertionError("no init_custom_process_group in the release's srt/utils")


@pytest.mark.parametrize("ranks_per_engine", [1, 4])
async def test_a_joining_engines_request_fits_init_weights_update_group_req_input(
    ranks_per_engine: int,
) -> None:
    """The fleet asks each engine into a group of its own: rank offset 1, world 1 + its
    tensor-parallel ranks, a name never used before. The fake engine answers without joining,
    so rank 0's rendezvous times out and the engine is reported, not raised."""
    from sglang.srt.managers.io_struct import InitWeightsUpdateGroupReqInput

    fleet = FleetWeightSender(
        master_address="127.0.0.1",
        backend="gloo",
        ranks_per_engine=ranks_per_engine,
        timeout_s=1.0,
        name_token="t0",
    )
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            change = await fleet.update_members([client])
        (body,) = fake.posted("/init_weights_update_group")
    await fleet.aclose()
    req = InitWeightsUpdateGroupReqInput(**body)
    assert (req.rank_offset, req.world_size) == (ENGINE_RANK_OFFSET, 1 + ranks_per_engine)
    assert req.group_name == "weight_update_group-t0-0"
    assert (req.master_address, req.backend) == ("127.0.0.1", "gloo")
    assert list(change.failed) == [fake.url.rstrip("/")]
    assert fleet.members == []


def test_the_release_refuses_a_group_name_it_holds() -> None:
    """`init_custom_process_group` hands `group_name` to `_new_process_group_helper`, whose
    refusal the embedded engine answers with word for word."""
    from torch.distributed import distributed_c10d

    function = _function(_init_custom_process_group_source(), "init_custom_process_group")
    calls = [
        node
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "_new_process_group_helper"
    ]
    assert calls, "init_custom_process_group no longer calls _new_process_group_helper"
    assert any(
        kw.arg == "group_name" and isinstance(kw.value, ast.Name) and kw.value.id == "group_name"
        for call in calls
        for kw in call.keywords
    )
    helper = ast.parse(
        textwrap.dedent(inspect.getsource(distributed_c10d._new_process_group_helper))
    )
    texts = {
        node.value
        for node in ast.walk(helper)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert NAME_TAKEN in texts


async def test_a_leaving_engines_group_is_destroyed_only_where_the_release_can() -> None:
    from sglang.srt.managers import io_struct

    name = GroupNames("weight_update_group", token="t1").next()
    with fake_sglang() as fake:
        async with EngineClient(fake.url) as client:
            if supports(SGLANG_VERSION, DESTROY_WEIGHTS_UPDATE_GROUP):
                await client.destroy_weights_update_group(name)
                (body,) = fake.posted("/destroy_weights_update_group")
                assert io_struct.DestroyWeightsUpdateGroupReqInput(**body).group_name == name
            else:
                with pytest.raises(EngineVersionError):
                    await client.destroy_weights_update_group(name)
                assert fake.posted("/destroy_weights_update_group") == []
