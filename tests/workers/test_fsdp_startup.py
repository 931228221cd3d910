"""strategy = fsdp on 2 gloo ranks: the model starts on the meta device and only rank 0 reads the weights;
`shard()` fills every rank's shard from rank 0; a sharded `generate` gathers each block once per call."""

import os

import torch
import torch.multiprocessing as mp

from .helpers import (actor_settings, critic_settings, forward_settings, generate_settings, log_prob_settings,
                      make_items, update_settings)
from .test_data_parallel import PROMPTS, free_port

MAX_NEW_TOKENS = 8


def rank_main(rank: int, world: int, port: int, model_dir: str, out_dir: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    from rlgraph.runtime.process import DeviceProcess
    from rlgraph.workers import CriticWorker, PolicyWorker

    from .helpers import build_tokenizer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        actor = PolicyWorker(model_dir, actor_settings(strategy="fsdp"), seed=0)
        critic = CriticWorker(model_dir, critic_settings(strategy="fsdp"), seed=0)
        start = {"actor_on_meta": all(p.is_meta for p in actor.module.parameters()),
                 "critic_on_meta": all(p.is_meta for p in critic.backbone.parameters())}
        actor.shard()
        critic.shard()

        # --- count the all-gathers (FSDP2 issues one per part it unshards) and the decoding steps
        gathers, steps = [], []
        all_gather = dist.all_gather_single
        dist.all_gather_single = lambda *a, **k: gathers.append(1) or all_gather(*a, **k)
        hook = actor.module.register_forward_hook(lambda *_: steps.append(1))
        items = make_items(PROMPTS, build_tokenizer())
        greedy = generate_settings(temperature=0.0, max_new_tokens=MAX_NEW_TOKENS)
        try:
            rollout = actor.generate(items, settings=greedy, seed=0)
        finally:
            dist.all_gather_single = all_gather
            hook.remove()
        parts = sum(isinstance(m, FSDPModule) for m in actor.module.modules())
        local = sum(p.to_local().numel() for p in actor.module.parameters())  # DTensors again: resharded
        tied = actor.module.lm_head.weight is actor.module.model.embed_tokens.weight
        weights = actor.state_dict()  # gathered onto rank 0

        # --- the optimizer state through a checkpoint: rank 0 alone reads the file, the others get their shards
        old = actor.log_prob(rollout, settings=log_prob_settings())
        actor.update(rollout, old, torch.ones_like(old), settings=update_settings(), shuffle=False)
        saved = actor.optimizer_state()  # the whole state on rank 0, {} elsewhere
        file = os.path.join(out_dir, "optim.pt")
        if rank == 0:
            torch.save(saved, file)
        dist.barrier()
        fresh = PolicyWorker(model_dir, actor_settings(strategy="fsdp"), seed=0)
        fresh.shard()
        process = DeviceProcess(f"actor/{rank}", 0, [], num_threads=1)
        process.workers["actor"] = fresh
        process.load_optimizer("actor", file if rank == 0 else os.path.join(out_dir, "no-such-file.pt"))
        reloaded = fresh.optimizer_state()

        torch.save({**start, "gathers": len(gathers), "steps": len(steps), "parts": parts, "local_numel": local,
                    "tied": tied, "inv_freq": actor.module.model.rotary_emb.inv_freq.clone(), "actor": weights,
                    "responses": rollout.responses, "values": critic.values(rollout, settings=forward_settings()),
                    "saved": saved, "reloaded": reloaded, "eos": actor.engine.eos_token_ids},
                   os.path.join(out_dir, f"{rank}.pt"))
    finally:
        dist.destroy_process_group()


def test_fsdp_starts_on_meta_fills_from_rank0_and_gathers_once_per_generate(tiny_model_dir, tokenizer, tmp_path):
    from rlgraph.workers import CriticWorker, PolicyWorker

    mp.start_processes(rank_main, args=(2, free_port(), tiny_model_dir, str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    ranks = [torch.load(tmp_path / f"{rank}.pt", weights_only=True) for rank in range(2)]

    plain = PolicyWorker(tiny_model_dir, actor_settings(), seed=0)
    plain_critic = CriticWorker(tiny_model_dir, critic_settings(), seed=0)
    full = sum(p.numel() for p in plain.module.parameters())
    items = make_items(PROMPTS, tokenizer)
    expected = plain.generate(items, settings=generate_settings(temperature=0.0, max_new_tokens=MAX_NEW_TOKENS),
                              seed=0)
    for rank, out in enumerate(ranks):
        # --- start-up: nothing of the model on any rank before `shard`, then a half each
        assert out["actor_on_meta"] and out["critic_on_meta"], rank
        assert out["local_numel"] < 0.75 * full, rank
        # --- rank 0's weights reached every shard, the tied embedding and the rotary buffer included
        torch.testing.assert_close(out["inv_freq"], plain.module.model.rotary_emb.inv_freq)
        # --- one all-gather per FSDP part for the whole call, however many tokens were decoded
        assert out["steps"] >= MAX_NEW_TOKENS // 2 and out["gathers"] == out["parts"] == 3, rank
        assert out["eos"] == plain.engine.eos_token_ids, rank  # the folder's generation_config, as from_pretrained
        assert out["tied"], rank  # one parameter, as in the checkpoint: the update moves both uses together
        # --- the sharded model answers as the unsharded one
        assert torch.equal(out["responses"], expected.responses), rank
        torch.testing.assert_close(out["values"], plain_critic.values(expected, settings=forward_settings()))
    saved, reloaded = ranks[0]["saved"], ranks[0]["reloaded"]
    assert saved["optimizer"]["state"] and ranks[1]["reloaded"] == {}
    assert reloaded["optimizer"]["param_groups"] == saved["optimizer"]["param_groups"]
    torch.testing.assert_close(reloaded["optimizer"]["state"], saved["optimizer"]["state"], rtol=0, atol=0)
    assert reloaded["scheduler"] == saved["scheduler"]
    gathered = ranks[0]["actor"]
    assert gathered.keys() == plain.state_dict().keys()
    for name, value in plain.state_dict().items():
        assert torch.equal(gathered[name], value), name
