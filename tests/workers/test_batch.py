import io
import pickle

import pytest
import torch

from rlgraph.workers.batch import (LIST_FIELDS, TENSOR_FIELDS, EpisodeSummary, Rollout, Segment, TokenSource,
                                   position_ids_from_mask)


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
    return Rollout.build(prompts, prompt_mask, responses, response_mask, pad, **make_lists(len(prompt_lens)))


def make_lists(rows: int) -> dict[str, list]:
    return dict(
        uid=[i // 2 for i in range(rows)],
        data_source=["src"] * rows,
        ground_truth=[str(i) for i in range(rows)],
        extra_info=[{"index": i} for i in range(rows)],
        prompt_text=[f"p{i}" for i in range(rows)],
        response_text=[f"r{i}" for i in range(rows)],
    )


# One letter per response column: M the model's token, E a token an environment inserted, . padding.
# A model turn, a tool's output, a model turn; a single turn; a short tool output; a conversation cut at R.
CONVERSATIONS = ("MMEEEMM.", "MMM.....", "MEEM....", "MMEMMMMM")
LETTERS = {".": TokenSource.PAD, "M": TokenSource.MODEL, "E": TokenSource.ENV}


def token_sources(rows=CONVERSATIONS) -> torch.Tensor:
    return torch.tensor([[LETTERS[c] for c in row] for row in rows], dtype=torch.int8)


def make_multi_turn(rows=CONVERSATIONS, pad=0, **build) -> Rollout:
    """Rows of `rows` after 2-token prompts (the first one left-padded), sampled by policy versions 3, 3, 2, 2."""
    source = token_sources(rows)
    prompts = torch.arange(len(rows) * 2).view(len(rows), 2) + 20
    prompt_mask = torch.ones_like(prompts)
    prompts[0, 0], prompt_mask[0, 0] = pad, 0
    responses = torch.where(source == TokenSource.PAD, pad, torch.arange(source.shape[1]) + 3 + 10 * (source == 2))
    build.setdefault("policy_version", torch.tensor([3, 3, 2, 2][: len(rows)]))
    return Rollout.build(prompts, prompt_mask, responses, build.pop("loss_mask", None), pad, token_source=source,
                         **build, **make_lists(len(rows)))


def assert_same_rows(a: Rollout, b: Rollout) -> None:
    for name in TENSOR_FIELDS:
        assert torch.equal(getattr(a, name), getattr(b, name)), name
        assert getattr(a, name).dtype == getattr(b, name).dtype, name
    for name in LIST_FIELDS:
        assert getattr(a, name) == getattr(b, name), name
    assert [a.segments(r) for r in range(len(a))] == [b.segments(r) for r in range(len(b))]


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


# --- the general rollout: attention mask, loss mask, reward index, segments, policy version ---


def test_single_turn_defaults_are_the_one_contiguous_response():
    """`build` with only a response mask gives the single-turn rollout: that mask is the response half of
    the attention mask and the loss mask, the reward sits on its last token, version 0."""
    rollout = make_rollout(response_lens=(2, 4, 1, 3))
    response_mask = (torch.arange(4) < torch.tensor([[2], [4], [1], [3]])).long()
    prompt_mask = rollout.attention_mask[:, :3]
    assert torch.equal(rollout.attention_mask, torch.cat([prompt_mask, response_mask], dim=1))
    assert torch.equal(rollout.position_ids, position_ids_from_mask(rollout.attention_mask))
    assert torch.equal(rollout.loss_mask, response_mask) and rollout.loss_mask.dtype == torch.long
    assert rollout.response_mask is rollout.loss_mask  # verl's name for it
    assert torch.equal(rollout.token_source, response_mask.to(torch.int8))  # MODEL = 1, PAD = 0
    assert rollout.reward_index.tolist() == [1, 3, 0, 2]  # response_mask.sum() - 1
    assert rollout.policy_version.tolist() == [0, 0, 0, 0]
    assert rollout.segments(1) == [Segment(TokenSource.MODEL, 0, 4)]


def test_a_multi_turn_row_attends_to_inserted_tokens_but_trains_on_the_models():
    rollout = make_multi_turn()
    source = token_sources()
    assert torch.equal(rollout.attention_mask[:, 2:], (source != 0).long())
    assert torch.equal(rollout.loss_mask, (source == 1).long())
    assert rollout.reward_index.tolist() == [6, 2, 3, 7]  # the last model token
    assert rollout.policy_version.tolist() == [3, 3, 2, 2]
    # positions run on through the inserted tokens, as the model saw them
    assert rollout.position_ids[0, 2:9].tolist() == [1, 2, 3, 4, 5, 6, 7]
    assert rollout.segments(0) == [(TokenSource.MODEL, 0, 2), (TokenSource.ENV, 2, 5), (TokenSource.MODEL, 5, 7)]
    assert rollout.segments(2) == [(TokenSource.MODEL, 0, 1), (TokenSource.ENV, 1, 3), (TokenSource.MODEL, 3, 4)]
    assert [s.stop - s.start for s in rollout.segments(3)] == [2, 1, 5]


def test_loss_mask_and_reward_index_can_be_given():
    # the last turn of row 3 ran out of room: it is attended to but not trained on, the reward sits on turn one
    loss_mask = (token_sources() == 1).long()
    loss_mask[3, 3:] = 0
    rollout = make_multi_turn(loss_mask=loss_mask)
    assert torch.equal(rollout.loss_mask, loss_mask) and torch.equal(rollout.attention_mask[3], torch.ones(10).long())
    assert rollout.reward_index.tolist() == [6, 2, 3, 1]
    explicit = make_multi_turn(reward_index=torch.tensor([1, 0, 0, 7]), policy_version=5)
    assert explicit.reward_index.tolist() == [1, 0, 0, 7] and explicit.policy_version.tolist() == [5] * 4


@pytest.mark.parametrize("change, message", [
    ({"loss_mask": torch.ones(4, 8)}, "row 0, column 7, which token_source marks as padding"),
    ({"reward_index": torch.tensor([0, 0, 0, 8])}, r"reward_index must lie in \[0, 8\)"),
])
def test_inconsistent_fields_are_rejected(change, message):
    with pytest.raises(ValueError, match=message):
        make_multi_turn(**change)


def test_build_needs_a_source_of_the_right_shape():
    with pytest.raises(ValueError, match="token_source has shape"):
        Rollout.build(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 3), None, 0, token_source=torch.ones(1, 2),
                      **make_lists(1))
    with pytest.raises(ValueError, match="needs a response_mask or a token_source"):
        Rollout.build(torch.ones(1, 2), torch.ones(1, 2), torch.ones(1, 3), None, 0, **make_lists(1))


def test_select_split_concat_pickle_and_dict_keep_every_field():
    rollout = make_multi_turn(reward_index=torch.tensor([1, 2, 3, 4]))
    rollout.sample_log_probs = torch.randn(rollout.responses.shape)
    picked = rollout.select([2, 0])
    assert picked.reward_index.tolist() == [3, 1] and picked.policy_version.tolist() == [2, 3]
    assert picked.segments(1) == rollout.segments(0)
    assert_same_rows(Rollout.concat(rollout.split(2)), rollout)
    again = pickle.loads(pickle.dumps(rollout))
    assert_same_rows(again, rollout)
    assert torch.equal(again.sample_log_probs, rollout.sample_log_probs)
    buffer = io.BytesIO()
    torch.save(rollout.to_dict(), buffer)
    buffer.seek(0)
    assert_same_rows(Rollout.from_dict(torch.load(buffer, weights_only=True)), rollout)
    assert_same_rows(rollout.to("cpu"), rollout)

    # joined with a narrower single-turn batch: its rows are re-padded and keep their fields
    single = make_rollout()
    joined = Rollout.concat([single, rollout])
    assert joined.response_length == 8 and joined.prompt_length == 3
    assert joined.reward_index.tolist() == [1, 3, 0, 2, 1, 2, 3, 4]
    assert joined.policy_version.tolist() == [0, 0, 0, 0, 3, 3, 2, 2]
    assert [joined.segments(r) for r in range(8)] == [single.segments(r) for r in range(4)] + [
        rollout.segments(r) for r in range(4)]
    assert torch.equal(joined.loss_mask[4:], rollout.loss_mask) and not joined.loss_mask[:4, 4:].any()
    assert_same_rows(pickle.loads(pickle.dumps(joined)), joined)


def test_a_multi_turn_batch_still_fits_inline_in_ray():
    big = Rollout.concat([make_multi_turn()] * 64)  # 256 rows, three segments in most
    assert len(pickle.dumps(big)) < 100 * 1024
    # what equals its default is not sent: one model turn pickles no larger than its masks need
    single = Rollout.concat([make_rollout()] * 64)
    halves = (single.prompts, single.attention_mask[:, :3].bool(), single.responses, single.loss_mask.bool())
    lists = {name: getattr(single, name) for name in LIST_FIELDS}
    assert len(pickle.dumps(single)) < len(pickle.dumps((halves, lists))) + 200


def test_episodes_and_the_environment_wait_travel_with_the_rows():
    """What each row's episode did follows its row through select, concat, pickling (Ray) and a weights-only
    file; the seconds a generation waited on its environment are the batch's, and concat adds them."""
    rollout = make_multi_turn()
    rollout.episodes = [EpisodeSummary(turns=2, tool_calls=row, tool_errors=0, model_tokens=4, env_tokens=3,
                                       env_reward=0.5, failure="raised: KeyError" if row == 1 else None)
                        for row in range(len(rollout))]
    rollout.env_seconds = 1.5
    assert [e.failed for e in rollout.episodes] == [False, True, False, False]
    assert rollout.episodes[1].to_json()["failed"] is True and rollout.episodes[1].to_json()["tool_calls"] == 1
    picked = rollout.select([3, 1])
    assert picked.episodes == [rollout.episodes[3], rollout.episodes[1]] and picked.env_seconds == 1.5
    joined = Rollout.concat([rollout, picked])
    assert joined.episodes == rollout.episodes + picked.episodes and joined.env_seconds == 3.0
    again = pickle.loads(pickle.dumps(rollout))
    assert again.episodes == rollout.episodes and again.env_seconds == 1.5
    buffer = io.BytesIO()
    torch.save(rollout.to_dict(), buffer)
    buffer.seek(0)
    loaded = Rollout.from_dict(torch.load(buffer, weights_only=True))
    assert loaded.episodes == rollout.episodes and loaded.env_seconds == 1.5
    assert make_rollout().env_seconds == 0.0 and make_rollout().episodes is None  # one turn
