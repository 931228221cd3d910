"""Data parallelism is exact: PPO with the actor and the critic at 2 replicas (a gloo group, gradients
all-reduced) makes the same update as 1 replica on the same global batch."""

from __future__ import annotations

import dataclasses

import pytest
import ray
import torch

from .helpers import SPECS, Started, plan_from_spec
from tests.tolerances import FP32_REORDERED, assert_close_after_adam

BATCH = 16  # prompts; x n = 4 samples -> 64 rows, 32 per replica


def ppo_plan(replicas: int):
    return plan_from_spec(SPECS / "ppo_arith.rl", f"main.devices_per_node={replicas}", f"actor.replicas={replicas}",
                          f"data.batch_size={BATCH}")


def update_settings(started: Started, role: str):
    """The plan's update settings, over the whole batch in one mini-batch, with the loss as a mean over
    sequences: a per-replica mean of equal-sized chunks, averaged over the replicas, is then the global mean
    exactly. (token-mean weighs a replica's tokens by its own token count; see docs/runtime.md, Replicas.)"""
    return dataclasses.replace(started.plan.call(f"{role}.update").settings, epochs=2, mini_batch_size=None,
                               micro_batch=None, loss_agg="seq-mean-token-mean")


def lr(started: Started, role: str) -> float:
    return started.plan.role(role).settings.optim.lr


def calls(started: Started, role: str, method: str):
    return started.plan.call(f"{role}.{method}").settings


def one_update(started: Started, rollout, old_log_prob, values, advantages, returns):
    groups = started.lowered.groups
    actor = groups["actor"].call("update", rollout, old_log_prob, advantages,
                                 settings=update_settings(started, "actor"), shuffle=False)
    critic = groups["critic"].call("update", rollout, values, returns, settings=update_settings(started, "critic"),
                                   shuffle=False)
    metrics = {**_value(actor.result()), **_value(critic.result())}
    states = {role: [ray.get(m.handle.call.remote(role, "state_dict"))[0] for m in groups[role].members]
              for role in ("actor", "critic")}
    return metrics, states


def _value(x):
    return ray.get(x) if isinstance(x, ray.ObjectRef) else x


def test_two_replicas_make_the_same_ppo_update_as_one(ray_session, arith_model):
    with Started(ppo_plan(1)) as single, Started(ppo_plan(2)) as double:
        # --- the group: gloo on cpu, rank = replica, world size 2, rendezvous on rank 0's node
        infos = ray.get([m.handle.data_parallel_info.remote() for m in double.lowered.groups["actor"].members])
        assert [i["rank"] for i in infos] == [0, 1] and {i["world_size"] for i in infos} == {2}
        assert {i["backend"] for i in infos} == {"gloo"}
        assert {i["master_addr"] for i in infos} == {double.lowered.info["actor/0"]["node_ip"]}
        assert [i["local_rank"] for i in infos] == ["0", "1"]
        assert ray.get(single.lowered.processes["actor/0"].data_parallel_info.remote()) == {}

        # --- one global batch, made once
        prompts = [single.prepared.train[i] for i in range(BATCH)]
        group = single.lowered.groups["rollout"]
        rollout = ray.get(group.call("generate", prompts, settings=calls(single, "rollout", "generate"),
                                     seed=1).result())
        old_log_prob = ray.get(single.lowered.groups["actor"].call(
            "log_prob", rollout, settings=calls(single, "actor", "log_prob")).result())
        values = ray.get(single.lowered.groups["critic"].call(
            "values", rollout, settings=calls(single, "critic", "values")).result())
        g = torch.Generator().manual_seed(0)
        advantages = torch.randn(old_log_prob.shape, generator=g)
        returns = values + torch.randn(values.shape, generator=g)

        # log_prob and values split across replicas and joined in order are the same tensors
        split = double.lowered.groups["actor"].call("log_prob", rollout,
                                                    settings=calls(double, "actor", "log_prob")).result()
        assert torch.allclose(split, old_log_prob, **FP32_REORDERED)

        m1, s1 = one_update(single, rollout, old_log_prob, values, advantages, returns)
        m2, s2 = one_update(double, rollout, old_log_prob, values, advantages, returns)

    for name in ("actor/pg_loss", "critic/vf_loss", "actor/grad_norm", "critic/grad_norm"):
        assert m2[name] == pytest.approx(m1[name], rel=1e-4, abs=1e-6), name
    for role in ("actor", "critic"):
        one, (rank0, rank1) = s1[role][0], s2[role]
        assert all(torch.equal(rank0[k], rank1[k]) for k in rank0), role  # the replicas agree bit for bit
        for k in one:
            assert_close_after_adam(rank0[k], one[k], lr=lr(single, role), steps=2, name=f"{role}.{k}")


def fsdp_plan(replicas: int):
    return plan_from_spec(SPECS / "ppo_arith.rl", f"main.devices_per_node={replicas}", f"actor.replicas={replicas}",
                          f"data.batch_size={BATCH}", "actor.strategy=fsdp", "critic.strategy=fsdp")


def test_fsdp_two_replicas_shard_and_make_the_same_ppo_update_as_one(ray_session, arith_model, tmp_path):
    """strategy = fsdp: fully_shard over a gloo group of 2. Generation (synced across ranks), log-probs,
    the update, the gathered weights and a checkpoint all work, and the update equals 1 replica's."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    with Started(ppo_plan(1)) as single, Started(fsdp_plan(2)) as sharded:
        actor = sharded.lowered.groups["actor"]
        assert actor.sharded and sharded.lowered.groups["rollout"].sharded and sharded.lowered.groups["ref"].sharded
        sharded_flags = ray.get([m.handle.call.remote("actor", "__getattribute__", "sharded") for m in actor.members])
        assert [flag for flag, _seconds in sharded_flags] == [True, True]

        # --- generation on sharded weights: each rank its own prompts; ranks whose rows end early keep stepping
        prompts = [single.prepared.train[i] for i in range(BATCH)]
        half = BATCH // 2
        generate = calls(sharded, "rollout", "generate")  # n = 4, max_new_tokens = 4
        per_replica = [((prompts[:half],), {"settings": generate, "seed": 1}),
                       ((prompts[half:],), {"settings": generate, "seed": 2})]
        generated = sharded.lowered.groups["rollout"].call_each("generate", per_replica).result()
        assert len(generated) == BATCH * 4
        # validation's dispatch `one` reaches both ranks of a sharded group and returns rank 0's answer
        greedy_settings = dataclasses.replace(generate, n=1, temperature=0.0)
        greedy = ray.get(sharded.lowered.groups["rollout"].one("generate", prompts, settings=greedy_settings,
                                                                 seed=0).result())
        greedy_one = ray.get(single.lowered.groups["rollout"].one("generate", prompts, settings=greedy_settings,
                                                                   seed=0).result())
        assert torch.equal(greedy.responses, greedy_one.responses)

        rollout = ray.get(single.lowered.groups["rollout"].call("generate", prompts, settings=generate,
                                                                seed=1).result())
        log_prob_settings = calls(single, "actor", "log_prob")
        old_log_prob = ray.get(single.lowered.groups["actor"].call("log_prob", rollout,
                                                                   settings=log_prob_settings).result())
        values = ray.get(single.lowered.groups["critic"].call(
            "values", rollout, settings=calls(single, "critic", "values")).result())
        assert torch.allclose(actor.call("log_prob", rollout, settings=log_prob_settings).result(), old_log_prob,
                              atol=1e-5)
        g = torch.Generator().manual_seed(0)
        advantages = torch.randn(old_log_prob.shape, generator=g)
        returns = values + torch.randn(values.shape, generator=g)

        updates = {}
        for started in (single, sharded):
            groups = started.lowered.groups
            a = groups["actor"].call("update", rollout, old_log_prob, advantages,
                                     settings=update_settings(started, "actor"), shuffle=False)
            c = groups["critic"].call("update", rollout, values, returns, settings=update_settings(started, "critic"),
                                      shuffle=False)
            metrics = {**_value(a.result()), **_value(c.result())}
            # dispatch `one` on the sharded group gathers the whole weights onto rank 0
            weights = {role: _value(groups[role].one("state_dict").result()) for role in ("actor", "critic")}
            updates[started is sharded] = metrics, weights

        # --- a checkpoint of the sharded actor: every rank gathers, rank 0 writes a plain HF folder
        folder = tmp_path / "actor"
        ray.get([m.handle.save.remote("actor", str(folder), str(tmp_path / "actor_optim.pt"))
                 for m in actor.members_for_one()])

    (m1, s1), (m2, s2) = updates[False], updates[True]
    learning_rates = {role: lr(single, role) for role in ("actor", "critic")}
    for name in ("actor/pg_loss", "critic/vf_loss", "actor/grad_norm", "critic/grad_norm"):
        assert m2[name] == pytest.approx(m1[name], rel=1e-4, abs=1e-6), name
    for role in ("actor", "critic"):
        assert s2[role].keys() == s1[role].keys()
        for k in s1[role]:
            assert_close_after_adam(s2[role][k], s1[role][k], lr=learning_rates[role], steps=2, name=f"{role}.{k}")
    saved = AutoModelForCausalLM.from_pretrained(folder)
    assert saved.config.architectures == ["LlamaForCausalLM"]
    torch.testing.assert_close(load_file(str(folder / "model.safetensors"))["model.embed_tokens.weight"],
                               s2["actor"]["model.embed_tokens.weight"])
    optim = torch.load(tmp_path / "actor_optim.pt", weights_only=True)
    assert optim["full"] and optim["optimizer"]["state"]  # the whole AdamW state, keyed by parameter name


def sft_plan(replicas: int):
    return plan_from_spec(SPECS / "sft_arith.rl", f"main.devices_per_node={replicas}", f"actor.replicas={replicas}",
                          f"data.batch_size={BATCH}", "actor.optim.warmup_steps=0")


def test_two_replicas_make_the_same_sft_step_as_one(ray_session):
    from rlgraph.workers.batch import demonstration_rollout

    def sft(started: Started, demos):
        settings = dataclasses.replace(started.plan.call("actor.sft").settings, epochs=2, mini_batch_size=None,
                                       micro_batch=None, loss_agg="seq-mean-token-mean")  # see update_settings
        group = started.lowered.groups["actor"]
        metrics = _value(group.call("sft", demos, settings=settings, shuffle=False).result())
        return metrics, [ray.get(m.handle.call.remote("actor", "state_dict"))[0] for m in group.members]

    with Started(sft_plan(1)) as single, Started(sft_plan(2)) as double:
        demos = demonstration_rollout([single.prepared.train[i] for i in range(BATCH)])  # one global batch
        m1, (one,) = sft(single, demos)
        m2, (rank0, rank1) = sft(double, demos)
        actor_lr = lr(single, "actor")
    for name in ("actor/sft_loss", "actor/grad_norm"):
        assert m2[name] == pytest.approx(m1[name], rel=1e-4, abs=1e-6), name
    assert all(torch.equal(rank0[k], rank1[k]) for k in rank0)  # the replicas agree bit for bit
    for k in one:
        assert_close_after_adam(rank0[k], one[k], lr=actor_lr, steps=2, name=f"actor.{k}")
