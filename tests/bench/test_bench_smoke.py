"""The benchmark scripts still start: each in its 1-2-step smoke mode, to scratch files.

Not timed tests: they prove that `make bench` would not die on a renamed function or a changed
metric name. The scripts run at once (in parallel, each in its own process, each with its own
private Ray instance where it needs one), so the module takes about as long as the slowest one.
The TRL smoke run is skipped when bench/.venv-trl is absent (`make bench` creates it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TRL_VENV = ROOT / "bench" / ".venv-trl"

SMOKE = {
    "floor": ["bench/bench_floor.py", "--smoke"],
    "profile": ["bench/profile_step.py", "--smoke"],
    "overhead": ["bench/bench_overhead.py", "--smoke"],
    "startup": ["bench/bench_startup.py", "--smoke"],
    "trl": ["bench/bench_trl.py", "--smoke", "--no-install"],
}


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("bench")
    started = time.perf_counter()
    running = {}
    env = dict(os.environ, RLGRAPH_BENCH_RUN_ID="smoke-test")  # one run, as run_all.py makes it
    for name, args in SMOKE.items():
        if name == "trl" and not (TRL_VENV / ".complete").exists():
            continue
        log = open(out / f"{name}.log", "w")
        running[name] = (subprocess.Popen([sys.executable, *args, "--output", str(out / f"{name}.json")], cwd=ROOT,
                                          stdout=log, stderr=subprocess.STDOUT, env=env), log)
    codes = {}
    for name, (process, log) in running.items():
        codes[name] = process.wait(timeout=300)
        log.close()
    return {"dir": out, "codes": codes, "seconds": time.perf_counter() - started}


def _result(runs, name: str) -> dict:
    log = (runs["dir"] / f"{name}.log").read_text()
    assert runs["codes"][name] == 0, log[-4000:]
    return json.loads((runs["dir"] / f"{name}.json").read_text())


def test_floor_runs_both_sides(smoke_runs):
    result = _result(smoke_runs, "floor")
    ppo, grpo = result["results"]
    assert ppo["floor_step_s"] > 0 and ppo["work"]["critic"] is not None  # the floor of PPO, alone
    assert grpo["stages"]["step"]["floor_s"] > 0 and grpo["stages"]["step"]["rlgraph_s"] > 0
    assert grpo["work"]["n"] == 8 and grpo["work"]["prompts"] == 32  # read off specs/grpo_arith.rl


def test_profile_splits_the_step(smoke_runs):
    (res,) = _result(smoke_runs, "profile")["results"]
    m = res["medians_s"]
    # grpo_arith: generate (keeping the old log-probs), ref.log_prob, actor.update
    assert m["step"] > 0 and m["worker compute"] > 0 and res["role_calls_per_step"] == 3


def test_overhead_measures_a_ray_call(smoke_runs):
    result = _result(smoke_runs, "overhead")
    assert result["noop_call_ms"] > 0 and result["rollout_ref_call_ms"] > 0 and result["rollout_pickle_bytes"] > 0


def test_startup_times_the_cli(smoke_runs):
    result = _result(smoke_runs, "startup")
    assert set(result["cli"]) == {"python -c pass", "rlgraph --help", "rlgraph run --help"}
    assert all(row["median_s"] > 0 for row in result["cli"].values())


def test_trl_trainers_start(smoke_runs):
    if "trl" not in smoke_runs["codes"]:
        pytest.skip("bench/.venv-trl is absent; `make bench` creates it")
    result = _result(smoke_runs, "trl")
    assert result["run_id"] == "smoke-test" and "error" not in result
    for algo in ("grpo", "ppo"):
        (run,) = result["comparisons"][algo]["runs"]  # smoke: one seed
        trl = run["trl"]
        assert "error" not in trl, trl
        assert trl["steps"] >= 1 and 0 <= trl["accuracy_end"] <= 1
        assert trl["step_ends_s"][-1] == trl["train_wall_s"]  # the records the budget check reads


def test_the_doc_renders_from_the_results(smoke_runs, tmp_path):
    """run_all.py --docs-only over the smoke results: every section that has a result renders."""
    results = tmp_path / "results"
    results.mkdir()
    for name in ("floor", "profile", "overhead", "startup", "trl"):
        source = smoke_runs["dir"] / f"{name}.json"
        if source.exists():
            data = json.loads(source.read_text())
            if name == "floor":  # the doc reads a full comparison; keep the spec that had one
                data["results"] = [r for r in data["results"] if "stages" in r]
            (results / f"{name}.json").write_text(json.dumps(data))
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\n## Compiler and plan\n\nkept as it is\n")
    done = subprocess.run([sys.executable, "bench/run_all.py", "--docs-only", "--results", str(results), "--doc", str(doc)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    text = doc.read_text()
    assert text.startswith("# Benchmarks\n\n## Compiler and plan\n\nkept as it is\n")
    assert "### 1. rlgraph against the in-process floor" in text and "#### Where rlgraph's extra time goes" in text
    assert "CLI start-up" in text
