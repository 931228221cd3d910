import io
import pickle

import pytest
import torch

from rlgraph.workers.batch import LIST_FIELDS, TENSOR_FIELDS, Rollout, position_ids_from_mask


def make_rollout(prompt_lens=(2, 3, 1, 3), response_lens=(2, 4, 1, 3), pad=0) -> Rollout:
    P, R = max(prompt_lens), 4
    prompts = torch.full((len(prompt_lens), P), pad)
    prompt_mask = torch.zeros_like(prompts)
    responses = torch.full((len(prompt_lens), R), pad)
    response_mask = torch.zeros_like(responses)
    for i, (p, r) in enumerate(zip(prompt_lens, response_lens)):
        prompts[i, P - p :] = torch.arange(p) + 10 * (i + 1)
        prompt_mask[i, P - p :] = 1
        responses[i, :r] = torch.arange(r) + 5
        response_mask[i, :r] = 1
    rows = len(prompt_lens)
    return Rollout.build(
        prompts,
        prompt_mask,
        responses,
        response_mask,
        pad,
        uid=[i // 2 for i in range(rows)],
        data_source=["src"] * rows,
        ground_truth=[str(i) for i in range(rows)],
        extra_info=[{"index": i} for i in range(rows)],
        prompt_text=[f"p{i}" for i in range(rows)],
        response_text=[f"r{i}" for i in range(rows)],
    )


def test_position_ids_skip_left_padding():
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]])
    assert position_ids_from_mask(mask).tolist() == [[0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5]]


def test_build_derives_full_sequence_tensors():
    rollout = make_rollout()
    assert rollout.input_ids.shape == (4, 7)
    assert torch.equal(rollout.input_ids[:, :3], rollout.prompts)
    assert torch.equal(rollout.attention_mask[:, 3:], rollout.response_mask)
    # first real prompt token sits at position 0 whatever the padding
    first = rollout.attention_mask.argmax(dim=1)
    assert rollout.position_ids[torch.arange(4), first].tolist() == [0, 0, 0, 0]


def test_select_split_concat_round_trip():
    rollout = make_rollout()
    picked = rollout.select([3, 1])
    assert picked.ground_truth == ["3", "1"] and torch.equal(picked.input_ids[0], rollout.input_ids[3])
    halves = rollout.split(2)
    assert [len(h) for h in halves] == [2, 2] and halves[1].uid == [1, 1]
    joined = Rollout.concat(halves)
    for name in ("input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(getattr(joined, name), getattr(rollout, name))
    assert joined.extra_info == rollout.extra_info
    with pytest.raises(ValueError, match="3 equal chunks"):
        rollout.split(3)


def test_concat_repads_parts_of_different_widths():
    wide = make_rollout(prompt_lens=(5, 1))
    narrow = make_rollout(prompt_lens=(1, 2))
    joined = Rollout.concat([narrow, wide])
    assert joined.prompts.shape == (4, 5)
    # a row keeps its real tokens, its positions and its response
    assert joined.input_ids[0, -5:].tolist() == narrow.input_ids[0, -5:].tolist()
    assert joined.position_ids[1, -4:].tolist() == narrow.position_ids[1, -4:].tolist()
    assert torch.equal(joined.responses[2:], wide.responses)


def test_rollout_pickles_and_loads_with_weights_only():
    rollout = make_rollout()
    again = pickle.loads(pickle.dumps(rollout))
    assert torch.equal(again.input_ids, rollout.input_ids) and again.uid == rollout.uid
    buffer = io.BytesIO()
    torch.save(rollout.to_dict(), buffer)
    buffer.seek(0)
    loaded = Rollout.from_dict(torch.load(buffer, weights_only=True))
    assert torch.equal(loaded.position_ids, rollout.position_ids) and loaded.extra_info == rollout.extra_info


def test_a_pickled_rollout_is_its_halves_and_fits_inline_in_ray():
    """Pickled, the joined tensors are dropped and rebuilt: every field comes back equal, with its dtype,
    and a GRPO-sized batch (256 rows) stays under Ray's 100 KiB limit for objects passed inline."""
    small = make_rollout()
    small.sample_log_probs = torch.randn(small.responses.shape)
    again = pickle.loads(pickle.dumps(small))
    for name in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask",
                 "sample_log_probs"):
        assert torch.equal(getattr(again, name), getattr(small, name)), name
        assert getattr(again, name).dtype == getattr(small, name).dtype, name
    assert again.extra_info == small.extra_info and again.pad_token_id == small.pad_token_id

    big = Rollout.concat([make_rollout()] * 64)  # 256 rows
    size = len(pickle.dumps(big))
    assert size < 100 * 1024, size
    every_field = {name: getattr(big, name) for name in TENSOR_FIELDS + LIST_FIELDS}
    assert size < 0.6 * len(pickle.dumps(every_field))  # what pickling the dataclass as it is would cost


def test_mismatched_rows_are_rejected():
    rollout = make_rollout()
    with pytest.raises(ValueError, match="uid has 3 rows"):
        Rollout(**{**rollout.to_dict(), "uid": [0, 0, 1]})
