"""The vllm engine on a CPU pool: the plan counts the KV cache the engine will be given (one function in
rlgraph/contract/engines.py sizes both), resident, beside its own copy of the weights."""

from __future__ import annotations

import json
from pathlib import Path

from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec
from rlgraph.workers.engines.vllm import engine_args

REPO = Path(__file__).resolve().parents[2]
ARITH_CONFIG = REPO / "rlgraph" / "models" / "weights" / "arith-gpt" / "config.json"


def _rollout_row(spec: str, *overrides: str):
    plan, _ = plan_spec(compile_spec(str(REPO / spec), list(overrides)))
    return next(r for r in plan.memory if any(k.startswith("rollout/") for k in r.breakdown))


def test_the_plan_counts_the_kv_cache_the_engine_gets_on_cpu():
    config = json.loads(ARITH_CONFIG.read_text())
    for limit in (None, 32):
        overrides = [f"rollout.max_sequences={limit}"] if limit else []
        row = _rollout_row("specs/grpo_arith_vllm.rl", *overrides)
        args = engine_args("m", config, dtype="float32", on_gpu=False, memory_fraction=0.5, tp=1, max_sequences=limit)
        assert row.breakdown["rollout/kv_pool"] == args["kv_cache_memory_bytes"]
        assert row.breakdown["rollout/weights"] > 0  # a copy of its own, even colocated with the actor


def test_on_its_own_pool_the_engine_is_all_that_device_holds():
    row = _rollout_row("specs/grpo_arith_vllm_async.rl")
    assert set(row.breakdown) == {"rollout/weights", "rollout/kv_pool"}
