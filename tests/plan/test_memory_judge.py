"""An LLM judge's memory in the plan (rlgraph/plan/memory.py `judge_step`): its weights, and the KV cache of its
verdicts, which it generates for every sample of the step from prompts that are its template around the sample.
Hand computations, as in test_memory.py."""

from __future__ import annotations

from .helpers import codes, plan_text, spec

GiB = 2**30
P = 7_000_000_000
JUDGE_MODEL = 'model judge_model { path = "models/not-here"  params = 7B  layers = 28  hidden = 3584  heads = 28  kv_heads = 4 }'
TEMPLATE = "{{ prompt }}{{ response }} Is this right? yes or no:"
ACTOR = ("pool gpus { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }\n"
         "role actor { model = policy  pool = gpus }\n"
         "role rollout { colocate = actor  n = 4  max_new_tokens = 8 }\n")
JUDGED_STEP = """\
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> judge.score -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update"""
KV_PER_TOKEN = 2 * 28 * 4 * (3584 // 28) * 2  # K and V x layers x kv_heads x head_dim x bf16


def judge(place: str, engine: str = "hf") -> str:
    return (f'{JUDGE_MODEL}\nrole judge {{ kind = judge  model = judge_model  {place}  engine = {engine}  dtype = bf16  '
            f'template = "{TEMPLATE}"  max_new_tokens = 16 }}\n')


def _device(plan, pool: str):
    [row] = [m for m in plan.memory if m.pool == pool]
    return row


def test_a_judge_on_its_own_pool_holds_its_weights_and_the_kv_cache_of_every_samples_verdict(tmp_path):
    body = ACTOR + "pool judging { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }\n" + \
        judge("pool = judging")
    plan, diagnostics = plan_text(tmp_path, spec(body, step=JUDGED_STEP))
    assert plan.ok, [d.message for d in diagnostics]
    row = _device(plan, "judging")
    # one judge prompt per sample (32 prompts x n = 4), each the template around the sample's prompt (64 tokens at
    # most), its response (8) and its ground truth (counted as long as a response), the template's own text at a
    # token per character at most; a verdict of 16 tokens
    sequences, length = 32 * 4, 64 + 2 * 8 + len(TEMPLATE) + 16
    assert row.breakdown == {"judge/weights": P * 2, "judge/kv_cache": KV_PER_TOKEN * length * sequences}
    assert row.estimated_bytes == P * 2 + KV_PER_TOKEN * length * sequences
    assert not any(key.startswith("judge/") for key in _device(plan, "gpus").breakdown)  # none on the actor's


def test_a_judge_colocated_with_the_actor_shares_its_device_and_peaks_while_it_scores(tmp_path):
    judged, _ = plan_text(tmp_path, spec(ACTOR + judge("colocate = actor"), step=JUDGED_STEP), "judged.rl")
    ruled, _ = plan_text(tmp_path, spec(ACTOR, step=JUDGED_STEP.replace("judge.score", "exact")), "ruled.rl")
    assert judged.ok and ruled.ok
    with_judge, without = _device(judged, "gpus").breakdown, _device(ruled, "gpus").breakdown
    # the tiny actor's update needs less than the 7B judge's verdicts: the device peaks while the judge scores,
    # when the actor holds its weights and AdamW state (no gradients, no activations) and the judge its weights
    # and the KV cache of the step's verdicts, as on a pool of its own
    sequences, length = 32 * 4, 64 + 2 * 8 + len(TEMPLATE) + 16
    resident = {k: without[k] for k in ("actor/params", "actor/optimizer", "rollout/weights")}
    assert with_judge == resident | {"judge/weights": P * 2, "judge/kv_cache": KV_PER_TOKEN * length * sequences}
    assert {"actor/grads", "actor/activations"} <= set(without)  # the ruled step peaks in the update
    assert "judge" in {p.role for p in judged.placements if p.pool == "gpus"}


def test_a_colocated_vllm_judge_keeps_its_share_of_the_device_for_the_whole_step(tmp_path):
    """Unlike a colocated rollout's engine, released while the actor trains, a judge's engine stays: the plan
    counts its memory_fraction of the device at the peak, and an out-of-memory error says so."""
    plan, diagnostics = plan_text(tmp_path, spec(ACTOR + judge("colocate = actor", engine="vllm"), step=JUDGED_STEP))
    row = _device(plan, "gpus")
    assert row.breakdown["judge/weights"] == P * 2
    assert row.breakdown["judge/weights"] + row.breakdown["judge/kv_pool"] == 0.5 * 80 * GiB  # memory_fraction
    assert "out-of-memory" not in codes(diagnostics)


def test_rlgraph_plan_of_the_judge_recipe_shows_the_judges_memory(capsys):
    """specs/grpo_arith_judge.rl as a user plans it: the judge's device in the text, its memory rows in the json."""
    import json

    from rlgraph.cli import main

    from .helpers import REPO

    recipe = str(REPO / "specs" / "grpo_arith_judge.rl")
    assert main(["plan", recipe, "--format", "json"]) == 0
    [row] = [m for m in json.loads(capsys.readouterr().out)["memory"] if m["pool"] == "judging"]
    assert set(row["breakdown"]) == {"judge/weights", "judge/kv_cache"} and all(row["breakdown"].values())
    assert main(["plan", recipe]) == 0
    text = capsys.readouterr().out
    [line] = [line for line in text.splitlines() if "judge#0" in line]  # the judging pool's one device
    size = row["estimated_bytes"] / 2**20
    assert f"{size:.0f} MiB" in line or f"{size:.1f} MiB" in line, line
