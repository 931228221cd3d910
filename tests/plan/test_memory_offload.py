"""Offload in the memory estimate: what a role keeps in host memory leaves its device and is listed as host."""

from __future__ import annotations

import json

from rlgraph.plan.model import Plan
from rlgraph.plan.text import render_text

from .helpers import codes, plan_text, spec
from .test_memory import BIG, PPO_STEP, _row

GiB = 2**30
P, SHARDS = 7_000_000_000, 8
POOL = "pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"


def _actor(row, where: str) -> dict[str, int]:
    return {k: v for k, v in getattr(row, where).items() if k.startswith("actor/")}


def test_fsdp_param_offload_moves_params_grads_and_adam_state_to_the_host(tmp_path):
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16 "
                "param_offload = true }\nrole rollout { colocate = actor  n = 4 }", model=BIG)
    plan, diagnostics = plan_text(tmp_path, text)
    assert "offload-unsharded" not in codes(diagnostics)
    for device in range(SHARDS):
        row = _row(plan, device=device)
        # FSDP2's CPUOffloadPolicy: each rank's shards of all three live in host memory, AdamW steps there
        assert _actor(row, "breakdown") == {}
        assert _actor(row, "host") == {"actor/params": P * 4 // SHARDS, "actor/grads": P * 4 // SHARDS,
                                       "actor/optimizer": P * 8 // SHARDS}
        assert row.estimated_bytes == sum(row.breakdown.values())  # the host is not in the device's total


def test_optimizer_offload_keeps_the_moments_on_the_host_between_steps_and_moves_them_in_for_each(tmp_path):
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8  optimizer_offload = true }\n"
                "role rollout { colocate = actor  n = 4 }", model=BIG)
    plan, diagnostics = plan_text(tmp_path, text)
    row = _row(plan)
    assert _actor(row, "host") == {"actor/optimizer": P * 8}  # between steps
    # each optimizer step moves them back beside the params and grads (workers/offload.py state_on_device):
    # under ddp every device steps on the whole model, 16 B/param again, so offload does not make it fit
    assert _actor(row, "breakdown") == {"actor/params": P * 4, "actor/grads": P * 4, "actor/optimizer_step": P * 8}
    assert "out-of-memory" in codes(diagnostics) and "offload-unsharded" not in codes(diagnostics)
    sharded = text.replace("optimizer_offload = true", "optimizer_offload = true  strategy = fsdp")
    plan, diagnostics = plan_text(tmp_path, sharded, name="fsdp.rl")
    assert _actor(_row(plan), "breakdown")["actor/optimizer_step"] == P * 8 // SHARDS  # its shard's moments
    assert "out-of-memory" not in codes(diagnostics)


def test_without_offload_the_same_actor_does_not_fit_and_nothing_is_on_the_host(tmp_path):
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8 }\n"
                "role rollout { colocate = actor  n = 4 }", model=BIG)
    plan, diagnostics = plan_text(tmp_path, text)
    assert "out-of-memory" in codes(diagnostics)
    assert all(row.host == {} for row in plan.memory)


def test_ref_param_offload_leaves_the_device_sharded_or_whole(tmp_path):
    body = ("role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp }\n"
            "role rollout { colocate = actor  n = 4 }\n"
            "role ref { model = big  colocate = actor  dtype = bf16  param_offload = true }")
    plan, _ = plan_text(tmp_path, spec(POOL + body, step=PPO_STEP, model=BIG))
    row = _row(plan)
    assert "ref/params" not in row.breakdown
    assert row.host == {"ref/params": P * 2 // SHARDS}  # bf16, sharded like its fsdp actor
    on_its_own = ("pool refs { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }\n"
                  "role actor { model = big  pool = gpus  replicas = 8  strategy = fsdp }\n"
                  "role rollout { colocate = actor  n = 4 }\n"
                  "role ref { model = big  pool = refs  dtype = bf16  param_offload = true }")
    plan, _ = plan_text(tmp_path, spec(POOL + on_its_own, step=PPO_STEP, model=BIG))
    assert _row(plan, pool="refs").host == {"ref/params": P * 2}  # whole, moved in for each log_prob call
    assert _row(plan, pool="refs").estimated_bytes == 0


def test_plan_text_and_json_show_the_host_lines(tmp_path):
    text = spec(POOL + "role actor { model = big  pool = gpus  replicas = 8  optimizer_offload = true }\n"
                "role rollout { colocate = actor  n = 4 }", model=BIG)
    plan, _ = plan_text(tmp_path, text)
    rendered = render_text(plan, color=False, width=120)
    line = next(line for line in rendered.splitlines() if "actor/optimizer " in line)
    assert "(host)" in line and "offloaded" in line and "52.2 GiB" in line  # 56e9 bytes
    node = next(line for line in rendered.splitlines() if "host memory of node 0" in line)
    assert "417 GiB" in node  # the 8 devices' replicas offload into their node's memory: 8 x 56e9 bytes
    again = Plan.from_json(json.dumps(plan.to_dict()))
    assert again.memory[0].host == {"actor/optimizer": P * 8}
