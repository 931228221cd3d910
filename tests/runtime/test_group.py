import pytest
import torch

from rlgraph.runtime.group import merge_results, split_batch


def test_split_and_merge_are_inverse_for_tensors_and_lists():
    x = torch.arange(12).view(6, 2)
    parts = split_batch(x, 3)
    assert [p.shape[0] for p in parts] == [2, 2, 2]
    assert torch.equal(merge_results(parts), x)
    assert split_batch(list(range(4)), 2) == [[0, 1], [2, 3]]
    assert split_batch(0.5, 2) == [0.5, 0.5]  # not a batch: every replica gets it


def test_split_refuses_uneven_batches():
    with pytest.raises(ValueError, match="cannot split a batch of 5"):
        split_batch(torch.zeros(5), 2)


def test_merged_metrics_are_averaged():
    assert merge_results([{"a": 1.0, "b": 2.0}, {"a": 3.0}]) == {"a": 2.0, "b": 2.0}
