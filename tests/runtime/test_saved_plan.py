"""`rlgraph run DIR/plan.json`: a run directory's saved plan is enough to reproduce its run."""

from __future__ import annotations

import json

from .helpers import fast, read_metrics

SKIP = ("timing_s/", "startup_s/", "perf/time_per_step", "perf/throughput")


def _trained(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(SKIP)} for r in records]


def test_a_saved_plan_runs_and_reproduces_its_run(run_cli, tmp_path):
    first, again = tmp_path / "first", tmp_path / "again"
    code, out = run_cli("specs/grpo_arith.rl", "--output", first, *fast(steps=2))
    assert code == 0, out
    code, out = run_cli(first / "plan.json", "--output", again)
    assert code == 0, out
    assert _trained(read_metrics(again)) == _trained(read_metrics(first))  # the same seed, the same metrics
    assert json.loads((again / "plan.json").read_text()) == json.loads((first / "plan.json").read_text())
    history = [json.loads(line) for line in (again / "history.jsonl").read_text().splitlines()]
    assert history[-1]["file"].endswith("plan.json") and history[-1]["start"] == "fresh"


def test_a_saved_plan_takes_no_overrides_and_a_broken_one_is_refused_clearly(run_cli, tmp_path):
    run_dir = tmp_path / "p"
    code, out = run_cli("specs/grpo_arith.rl", "--output", run_dir, *fast(steps=1))
    assert code == 0, out
    code, out = run_cli(run_dir / "plan.json", "-s", "train.steps=3")
    assert code == 1 and "runs as it is, without -s overrides" in out

    broken = json.loads((run_dir / "plan.json").read_text())
    del broken["roles"][0]["settings"]["optim"]
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    code, out = run_cli(tmp_path / "broken.json", "--output", tmp_path / "b")
    assert code == 1 and "ActorSettings: missing optim" in out and "Traceback" not in out
