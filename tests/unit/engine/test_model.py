"""The embedded engine's decoder matches `transformers` and is consistent with itself."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dressage.engine.embedded.model import (
    MIN_BUCKET,
    SPLIT_ABOVE,
    Decoder,
    KVCache,
    full_logits,
    length_buckets,
    load_weights,
    parameter_shapes,
    replace_weights,
)
from dressage.model import build_tiny_model

torch.set_num_threads(1)

PROMPT = [5, 9, 80, 9, 88, 2, 103, 6, 40, 41, 42, 43]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def test_logits_match_transformers(checkpoint: Path) -> None:
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    with torch.no_grad():
        reference = model(torch.tensor([PROMPT])).logits[0]
    ours = full_logits(load_weights(checkpoint), PROMPT)
    torch.testing.assert_close(ours, reference, atol=1e-4, rtol=0)


def test_incremental_and_batched_decode_match_full_forward(checkpoint: Path) -> None:
    weights = load_weights(checkpoint)
    reference = full_logits(weights, PROMPT)
    decoder = Decoder(weights.shape, 64)
    cache = KVCache(weights.shape, 4, 64)
    # Slot 3 holds the prompt's first 4 tokens, slot 1 its first 7: different lengths, one batch.
    last3 = decoder.prefill(weights, cache, 3, PROMPT[:4])[-1]
    last1 = decoder.prefill(weights, cache, 1, PROMPT[:7])[-1]
    torch.testing.assert_close(last3, reference[3], atol=1e-4, rtol=0)
    torch.testing.assert_close(last1, reference[6], atol=1e-4, rtol=0)
    for step in range(5):
        p3, p1 = 4 + step, 7 + step
        logits = decoder.decode(weights, cache, [3, 1], [PROMPT[p3], PROMPT[p1]], [p3, p1])
        torch.testing.assert_close(logits[0], reference[p3], atol=1e-4, rtol=0)
        torch.testing.assert_close(logits[1], reference[p1], atol=1e-4, rtol=0)


def test_missing_or_misshapen_tensor_is_named(checkpoint: Path, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (bad / name).write_bytes((checkpoint / name).read_bytes())
    tensors = load_file(str(checkpoint / "model.safetensors"))
    tensors["model.norm.weight"] = torch.ones(3)
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model\.norm\.weight has shape \(3,\)"):
        load_weights(bad)
    del tensors["lm_head.weight"]
    tensors["model.norm.weight"] = torch.ones(128)
    save_file(tensors, str(bad / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lm_head\.weight is missing"):
        load_weights(bad)


def test_parameter_shapes_are_the_checkpoints_tensors(checkpoint: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(checkpoint / "model.safetensors"))
    shapes = parameter_shapes(load_weights(checkpoint).shape)
    assert {name: tuple(t.shape) for name, t in tensors.items()} == shapes


def test_replaced_weights_equal_a_checkpoint_of_those_weights(
    checkpoint: Path, tmp_path: Path
) -> None:
    other = load_weights(build_tiny_model(tmp_path / "other", seed=3))
    weights = load_weights(checkpoint)
    from safetensors.torch import load_file

    new = load_file(str(tmp_path / "other" / "model.safetensors"))
    half = dict(list(new.items())[: len(new) // 2])
    partial = replace_weights(weights, half)
    replaced = replace_weights(partial, {k: v for k, v in new.items() if k not in half})
    torch.testing.assert_close(full_logits(replaced, PROMPT), full_logits(other, PROMPT))
    # The originals are untouched, and a partial replacement is neither model.
    torch.testing.assert_close(
        full_logits(weights, PROMPT), full_logits(load_weights(checkpoint), PROMPT)
    )
    assert not torch.allclose(full_logits(partial, PROMPT), full_logits(other, PROMPT))


def test_a_new_embedding_is_the_output_projection_of_tied_weights(checkpoint: Path) -> None:
    import dataclasses

    weights = load_weights(checkpoint)
    tied = dataclasses.replace(weights, lm_head=weights.embed)
    embed = torch.randn_like(weights.embed)
    assert replace_weights(tied, {"model.embed_tokens.weight": embed}).lm_head is embed
    # Untied weights keep their own projection; a sent lm_head.weight replaces it either way.
    assert replace_weights(weights, {"model.embed_tokens.weight": embed}).lm_head is weights.lm_head
    head = torch.randn_like(weights.embed)
    both = {"model.embed_tokens.weight": embed, "lm_head.weight": head}
    assert replace_weights(tied, both).lm_head is head


def test_rows_of_very_different_lengths_decode_as_the_full_forward_does(
    checkpoint: Path,
) -> None:
    """One long context in a batch of short ones: rows attend in length buckets
    (`length_buckets`), each over its own longest context, and match the full forward."""
    weights = load_weights(checkpoint)
    sequence = (PROMPT * 20)[:150]
    reference = full_logits(weights, sequence)
    decoder = Decoder(weights.shape, 160)
    cache = KVCache(weights.shape, 42, 160)
    # slot -> prompt length: buckets of 32, 64 and 256 (41 rows x 150 positions: split).
    starts = {0: 3, 2: 20, 4: 40, 1: 140, **{s: 5 + s for s in range(5, 42)}}
    for slot, length in starts.items():
        decoder.prefill(weights, cache, slot, sequence[:length])
    slots = list(starts)
    for step in range(3):
        positions = [starts[s] + step for s in slots]
        assert len(length_buckets(positions)) == 3
        logits = decoder.decode(weights, cache, slots, [sequence[p] for p in positions], positions)
        for row, position in enumerate(positions):
            torch.testing.assert_close(logits[row], reference[position], atol=1e-4, rtol=0)


@given(st.lists(st.integers(0, 2000), min_size=1, max_size=64))
def test_length_buckets_cover_every_row_once_and_at_most_double_the_work(
    positions: list[int],
) -> None:
    buckets = length_buckets(positions)
    assert sorted(r for bucket in buckets for r in bucket) == list(range(len(positions)))
    padded = sum(len(b) * (max(positions[r] for r in b) + 1) for b in buckets)
    if len(positions) * (max(positions) + 1) > SPLIT_ABOVE:
        assert padded <= 2 * sum(p + 1 for p in positions) + MIN_BUCKET * len(positions)
    else:
        assert len(buckets) == 1
