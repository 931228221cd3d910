"""Supervised fine-tuning as a spec, run as a user runs it: specs/sft_arith.rl trains on demonstrations with no
rollout, validates with the NLL of the validation demonstrations and the greedy answers' reward, resumes
bit-identical, and its run is the next stage's model (specs/sft_then_grpo_arith.rl, `path = "run:..."`)."""

from __future__ import annotations

import pytest

from .helpers import fast, killed_after, read_metrics
from .test_resume import weights

SPEC = "specs/sft_arith.rl"
QUICK = ("-s", "actor.optim.warmup_steps=0")  # the spec warms up over 50 steps: a 2-step run would barely move


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("sft")


@pytest.fixture(scope="module")
def sft_run(runs):
    return runs / "full"


def test_sft_run_trains_on_the_demonstrations_and_validates(run_cli, sft_run):
    code, out = run_cli(SPEC, "--output", sft_run, *fast(steps=3, checkpoint_every=1), *QUICK)
    assert code == 0, out
    records = read_metrics(sft_run)
    assert [r["training/global_step"] for r in records] == [0, 1, 2, 3]
    for record in records[1:]:
        assert record["actor/sft_loss"] > 0 and record["actor/grad_norm"] > 0 and record["actor/lr"] > 0
        assert record["timing_s/sync"] == 0.0 and "timing_s/gen" not in record  # no rollout: no sync, no generate
    first, last = records[0], records[-1]
    assert last["val/sft_loss"] < first["val/sft_loss"]  # three steps on the demonstrations lower their val NLL
    assert 0.0 <= last["val/score/mean"] <= 1.0  # the greedy answers, scored by the spec's reward
    assert (sft_run / "checkpoints" / "step_3" / "actor" / "config.json").is_file()


def test_a_killed_sft_run_resumes_bit_identical(run_cli, runs, sft_run):
    part = killed_after(sft_run, runs / "part", step=2)
    code, out = run_cli(SPEC, "--output", part, *fast(steps=3, checkpoint_every=1), *QUICK)
    assert code == 0, out
    assert "resuming from" in out and "(step 2)" in out
    a, b = weights(sft_run / "checkpoints" / "step_3" / "actor"), weights(part / "checkpoints" / "step_3" / "actor")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    assert read_metrics(part)[-1]["val/sft_loss"] == read_metrics(sft_run)[-1]["val/sft_loss"]


def test_the_next_stage_starts_from_the_sft_runs_model(run_cli, runs, sft_run):
    grpo = runs / "grpo"
    code, out = run_cli("specs/sft_then_grpo_arith.rl", "--output", grpo, "-s", f"policy.path=\"run:{sft_run}\"",
                        *fast(steps=1))
    assert code == 0, out
    # the same greedy answers to the same validation prompts (sft_val is builtin:arith/val with its answers), from
    # the same weights: the GRPO stage's score before its first step is the SFT run's last
    assert read_metrics(grpo)[0]["val/score/mean"] == read_metrics(sft_run)[-1]["val/score/mean"]


def test_a_stage_whose_run_has_no_checkpoint_says_what_to_run(run_cli, runs):
    code, out = run_cli("specs/sft_then_grpo_arith.rl", "--output", runs / "early", "-s",
                        f"policy.path=\"run:{runs / 'never-ran'}\"", *fast(steps=1))
    assert code != 0
    assert "has no checkpoint to start from yet" in out


def test_rlgraph_eval_of_the_sft_run_scores_what_its_last_validation_scored(sft_run, capsys, tmp_path):
    import json

    from .test_eval import run_eval

    code, out = run_eval(capsys, sft_run, "-o", tmp_path / "result.json")
    assert code == 0, out
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["metrics"]["score/mean"] == read_metrics(sft_run)[-1]["val/score/mean"]


def test_the_next_stage_says_which_checkpoint_it_starts_from(sft_run):
    from rlgraph.runtime.preflight import preflight

    from .helpers import SPECS, plan_from_spec

    plan = plan_from_spec(SPECS / "sft_then_grpo_arith.rl", f'policy.path="run:{sft_run}"')
    prepared = preflight(plan, starting_locally=False)
    assert prepared.model_paths["actor"] == str((sft_run / "checkpoints" / "step_3" / "actor").resolve())
    assert f"run:{sft_run} is {prepared.model_paths['actor']}" in prepared.notes[0]
