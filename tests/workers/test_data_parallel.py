"""Two replicas, each updating on its half of the batch, end where one worker on the whole batch ends."""

import os
import socket

import torch
import torch.multiprocessing as mp

from .helpers import (actor_settings, critic_settings, critic_update_settings, forward_settings, generate_settings,
                      log_prob_settings, make_items, update_settings)

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]
ACTOR, CRITIC = actor_settings(lr=1e-2), critic_settings(lr=1e-2)


def actor_update(mini_batch_size: int):
    return update_settings(loss_agg="seq-mean-token-mean", mini_batch_size=mini_batch_size)


def make_batch(worker, tokenizer):
    rollout = worker.generate(make_items(PROMPTS, tokenizer), settings=generate_settings(n=2, max_new_tokens=5), seed=3)
    advantages = torch.randn(len(rollout), 1, generator=torch.Generator().manual_seed(0))
    return rollout, advantages.expand(len(rollout), rollout.response_length)


def replica(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist

    from rlgraph.workers import CriticWorker, PolicyWorker

    from .helpers import build_tokenizer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        actor = PolicyWorker(model_dir, ACTOR, seed=0)
        critic = CriticWorker(model_dir, CRITIC, seed=0)
        rollout, advantages = make_batch(actor, build_tokenizer())
        old = actor.log_prob(rollout, settings=log_prob_settings())
        rows = torch.arange(len(rollout)).chunk(world)[rank]
        part = rollout.split(world)[rank]
        actor.update(part, old[rows], advantages[rows], settings=actor_update(2), shuffle=False)
        critic.update(part, critic.values(part, settings=forward_settings()), advantages[rows],
                      settings=critic_update_settings(mini_batch_size=2), shuffle=False)
        torch.save({"actor": actor.state_dict(), "critic": critic.state_dict()}, os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_replicas_match_one_worker_on_the_whole_batch(tiny_model_dir, tokenizer, tmp_path):
    from rlgraph.workers import CriticWorker, PolicyWorker

    mp.start_processes(
        replica, args=(2, free_port(), tiny_model_dir, str(tmp_path)), nprocs=2, join=True, start_method="spawn"
    )
    states = [torch.load(tmp_path / f"{rank}.pt", weights_only=True) for rank in range(2)]

    actor = PolicyWorker(tiny_model_dir, ACTOR, seed=0)
    critic = CriticWorker(tiny_model_dir, CRITIC, seed=0)
    rollout, advantages = make_batch(actor, tokenizer)
    old = actor.log_prob(rollout, settings=log_prob_settings())
    # rank r's mini-batch k holds rows [4r + 2k, 4r + 2k + 2): the same rows as one worker's mini-batch
    # of 4 made of both ranks' k-th pairs, so order the single worker's rows to match
    order = torch.tensor([0, 1, 4, 5, 2, 3, 6, 7])
    single = rollout.select(order)
    actor.update(single, old[order], advantages[order], settings=actor_update(4), shuffle=False)
    critic.update(single, critic.values(single, settings=forward_settings()), advantages[order],
                  settings=critic_update_settings(mini_batch_size=4), shuffle=False)
    for role, worker in (("actor", actor), ("critic", critic)):
        expected = worker.state_dict()
        for state in states:
            for name, value in state[role].items():
                torch.testing.assert_close(value, expected[name], atol=2e-5, rtol=1e-4)  # Adam amplifies ulps
