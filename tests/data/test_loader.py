import itertools

import pytest

from rlgraph.data import EpochBatchSampler, make_dataloader
from rlgraph.data.loader import StatefulDataLoader

DATASET = [{"input_ids": [i] * (1 + i % 3), "index": i} for i in range(10)]


def take(loader, n):
    return [batch["index"] for batch in itertools.islice(loader, n)]


def test_batches_are_dicts_of_unpadded_lists():
    loader = make_dataloader(DATASET, batch_size=4, seed=0)
    assert isinstance(loader, StatefulDataLoader)
    batch = next(iter(loader))
    assert set(batch) == {"input_ids", "index"}
    assert [len(ids) for ids in batch["input_ids"]] == [1 + i % 3 for i in batch["index"]]


def test_epochs_cycle_with_a_fresh_deterministic_shuffle():
    loader = make_dataloader(DATASET, batch_size=4, seed=0)  # 2 full batches per epoch, 2 prompts dropped
    assert loader.batches_per_epoch == 2
    batches = take(loader, 6)
    epochs = [batches[i : i + 2] for i in range(0, 6, 2)]
    assert all(len(set(sum(e, []))) == 8 for e in epochs)  # no repeats within an epoch
    assert epochs[0] != epochs[1] != epochs[2]  # a new order each epoch
    assert loader.epoch == 2
    assert take(make_dataloader(DATASET, batch_size=4, seed=0), 6) == batches  # same seed, same batches
    assert take(make_dataloader(DATASET, batch_size=4, seed=1), 6) != batches


@pytest.mark.parametrize("taken", [0, 1, 3, 4, 7])
def test_resumed_loader_yields_exactly_the_same_batches(taken):
    loader = make_dataloader(DATASET, batch_size=3, seed=7)  # 3 batches per epoch
    stream = iter(loader)
    for _ in range(taken):
        next(stream)
    state = loader.state_dict()
    expected = [next(stream)["index"] for _ in range(5)]  # crosses at least one epoch boundary

    resumed = make_dataloader(DATASET, batch_size=3, seed=7)
    resumed.load_state_dict(state)
    assert take(resumed, 5) == expected
    assert resumed.epoch == loader.epoch


def test_resume_after_three_batches_yields_the_next_two():
    loader = make_dataloader(DATASET, batch_size=4, seed=3)
    stream = iter(loader)
    for _ in range(3):
        next(stream)
    state = loader.state_dict()
    assert state["_index_sampler_state"]["epoch"] == 1  # the third batch opened epoch 1
    expected = [next(stream)["index"] for _ in range(2)]
    resumed = make_dataloader(DATASET, batch_size=4, seed=3)
    resumed.load_state_dict(state)
    assert take(resumed, 2) == expected


def test_state_from_another_seed_is_refused():
    loader = make_dataloader(DATASET, batch_size=4, seed=0)
    take(loader, 1)
    other = make_dataloader(DATASET, batch_size=4, seed=1)
    other.load_state_dict(loader.state_dict())
    with pytest.raises(ValueError, match="same data, filtering and seed"):
        next(iter(other))


def test_finite_loader_for_validation():
    loader = make_dataloader(DATASET, batch_size=4, seed=0, shuffle=False, drop_last=False, num_epochs=1)
    assert len(loader) == 3
    assert [b["index"] for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b["index"] for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]  # each pass starts over


def test_too_few_prompts_for_one_batch():
    with pytest.raises(ValueError, match="fewer than one batch of 32"):
        make_dataloader(DATASET, batch_size=32, seed=0)


def test_sampler_order_is_a_pure_function_of_seed_and_epoch():
    a, b = EpochBatchSampler(10, 4, seed=5), EpochBatchSampler(10, 4, seed=5)
    assert a.order(3) == b.order(3) and a.order(3) != a.order(4)
    assert sorted(a.order(0)) == list(range(10))
