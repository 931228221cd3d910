"""`rlgraph run` end to end on each shipped CPU spec, for two steps; and the rows of a step written to
samples.jsonl and shown (train.samples_every), what a person reads to see what the model generated and what the
reward made of it. The specs with engine = vllm run in test_vllm_run.py (the engine's start-up is paid there, once
a spec), which checks them with `check_run`."""

from __future__ import annotations

import json

import pytest

from .helpers import SPECS, fast, make_reward_model, read_metrics


def cpu_specs(engine: str | None = None) -> list[str]:
    """The shipped specs whose pools are all CPUs; with `engine`, those with a rollout on that engine, else those
    with none on vllm. Not the two stages of SFT then GRPO (the second needs the first's run): test_sft.py runs them
    as stages."""
    from rlgraph.compiler import compile_spec
    from rlgraph.contract.stages import is_stage
    from rlgraph.plan import build_plan

    out = []
    for path in sorted(SPECS.glob("*_arith*.rl")):
        plan = build_plan(compile_spec(str(path)))
        staged = any(is_stage(m.path or "") for m in plan.models.values())
        supervised = not any(c.kind == "role" and c.method == "generate" for c in plan.calls)
        if plan.ok and all(p.device == "cpu" for p in plan.pools) and not staged and not supervised:
            engines = {r.settings.engine for r in plan.roles if r.kind == "rollout"}
            if (engine in engines) if engine else "vllm" not in engines:
                out.append(path.name)
    return out


EXPECTED = [
    "training/global_step", "timing_s/gen", "timing_s/reward", "timing_s/adv",
    "timing_s/update_actor", "timing_s/update_weights", "timing_s/step", "critic/score/mean",
    "critic/rewards/mean", "critic/advantages/mean", "response_length/mean", "actor/pg_loss",
    "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm", "actor/lr",
    "perf/throughput", "perf/total_num_tokens", "perf/time_per_step",
]


POLICY_GRADIENT = ("timing_s/adv", "critic/advantages/mean", "actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl",
                   "actor/entropy")


@pytest.mark.parametrize("spec", cpu_specs())
def test_each_cpu_spec_trains_two_steps(spec, run_cli, arith_model, tmp_path):
    run_dir = tmp_path / "run"
    extra = []
    if "builtin:arith-rm" in (SPECS / spec).read_text():
        # the shipped reward model takes minutes to build on a fresh machine (tests/models builds a small one);
        # these two steps check the plumbing with a stand-in classifier of the same shape
        extra = ["-s", f'scorer.path="{make_reward_model(arith_model, tmp_path / "rm")}"']
    code, out = run_cli(f"specs/{spec}", "--output", run_dir, *fast(steps=2, **{"train.samples_every": 2}), *extra)
    assert code == 0, out
    check_run(run_dir, spec, out, steps=2)
    if spec in SAMPLES_SHOWN:
        check_samples(run_dir, out)


def check_run(run_dir, spec: str, out: str, steps: int) -> None:
    """What every finished run of `spec` (`-s train.steps=<steps>` first of its overrides) leaves behind."""
    assert "Traceback" not in out, out
    records = read_metrics(run_dir)
    assert [r["training/global_step"] for r in records] == list(range(steps + 1))
    assert 0.0 <= records[0]["val/score/mean"] <= 1.0 and "val/score/mean" in records[-1]
    # the step-0 record says where the time to the first step went
    parts = ("preflight", "ray", "placement", "workers", "data_parallel")
    assert all(records[0][f"startup_s/{p}"] >= 0 for p in parts) and records[0]["timing_s/testing"] > 0
    assert sum(records[0][f"startup_s/{p}"] for p in parts) <= records[0]["startup_s/total"]
    assert records[0]["startup_s/workers"] > 0.5  # processes started and the models loaded: never instant
    plan = json.loads((run_dir / "plan.json").read_text())
    rewarded = any(c["kind"] == "reward" for c in plan["calls"])  # a distillation step has no reward
    # a student trained on its divergence from a teacher's distribution (actor.distill) has no advantages
    distills = any(c["method"] == "distill" for c in plan["calls"])
    missing = [k for k in EXPECTED if k not in records[-1]
               and (rewarded or k not in ("timing_s/reward", "critic/score/mean", "critic/rewards/mean"))
               and (not distills or k not in POLICY_GRADIENT)]
    assert not missing, missing
    if distills:
        assert records[-1]["actor/distill_loss"] > 0 and records[-1]["actor/distill_top_k_mass"] > 0
    if any(r["kind"] == "critic" for r in plan["roles"]):
        assert {"timing_s/values", "timing_s/update_critic", "critic/vf_loss", "critic/values/mean"} <= set(records[-1])
    if any(r["kind"] == "ref" for r in plan["roles"]):
        assert "timing_s/ref" in records[-1]
    # old log-probs recomputed by the actor, or kept by generate (`-> responses, old_log_prob`: no such stage)
    recomputes = any(c["method"] == "log_prob" and c["target"] == "actor" for c in plan["calls"])
    assert ("timing_s/old_log_prob" in records[-1]) == recomputes
    assert (run_dir / "spec" / spec).is_file() and (run_dir / "overrides.txt").read_text().startswith(f"train.steps={steps}")
    actor = run_dir / "checkpoints" / f"step_{steps}" / "actor"
    assert (actor / ("adapter_config.json" if "lora" in spec else "config.json")).is_file()  # LoRA: peft's format
    assert (run_dir / "curves.png").is_file()


# one process for every role (the step runs inside it), and roles in processes of their own (the driver's path)
SAMPLES_SHOWN = ("grpo_arith.rl", "ppo_split_arith.rl")


def check_samples(run_dir, out: str) -> None:
    """Two steps with train.samples_every = 2: four rows of step 2's batch in samples.jsonl, one shown."""
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [2] * 4  # step 2 only, four rows of its batch
    assert all(set(s) == {"step", "uid", "data_source", "prompt", "response", "ground_truth", "score", "advantage"}
               for s in samples)
    assert len({s["uid"] for s in samples}) == 4  # rows of different prompts
    for s in samples:
        assert s["prompt"].endswith("=") and s["score"] in (0.0, 1.0) and isinstance(s["advantage"], float)
        assert s["data_source"] and s["ground_truth"]
    assert f"step 2 sample: {samples[0]['prompt']!r}" in " ".join(out.split())
