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


def test_a_stage_batch_sends_the_calls_of_one_process_as_one_task(ray_session, arith_model):
    """StageBatch: actor.log_prob, ref.log_prob and critic.values on the same process become one actor task
    (their refs share a task id), read the Rollout once, and give the results the separate calls give."""
    import ray

    from rlgraph.runtime.errors import WorkerError
    from rlgraph.runtime.group import StageBatch

    from .helpers import SPECS, Started, plan_from_spec

    with Started(plan_from_spec(SPECS / "ppo_arith.rl", "data.batch_size=16")) as started:
        groups = started.lowered.groups
        prompts = [started.prepared.train[i] for i in range(16)]
        settings = {call.label: call.settings for call in started.plan.calls}
        rollout = groups["rollout"].call("generate", prompts, settings=settings["rollout.generate"], seed=1).result()
        calls = (("actor", "log_prob"), ("ref", "log_prob"), ("critic", "values"))
        alone = [ray.get(groups[role].call(method, rollout, settings=settings[f"{role}.{method}"]).result())
                 for role, method in calls]
        with StageBatch():
            pendings = [groups[role].call(method, rollout, settings=settings[f"{role}.{method}"])
                        for role, method in calls]
        assert len({p.results[0].task_id() for p in pendings}) == 1
        for pending, expected in zip(pendings, alone):
            assert torch.equal(ray.get(pending.result()), expected) and pending.seconds() > 0

        # a failing call in the batch is reported as that call's failure
        with StageBatch():
            ok = groups["ref"].call("log_prob", rollout, settings=settings["ref.log_prob"])
            bad = groups["critic"].call("values", "not a rollout", settings=settings["critic.values"])
        with pytest.raises(ray.exceptions.RayTaskError) as info:
            ray.get(bad.times)
        assert isinstance(info.value.cause, WorkerError) and info.value.cause.role == "critic"
        assert ok.results[0].task_id() == bad.results[0].task_id()
