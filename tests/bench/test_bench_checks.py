"""What keeps a benchmark's figures honest, on synthetic records (no training, a few seconds in all):
the TRL comparison's budget check, the verdict rule, a stop that a process cannot ignore, and a doc
that is never rendered from the results of different runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))  # the scripts import each other as top-level modules

from bench_trl import BudgetError, check_budget, summarise  # noqa: E402
from common import judge, terminate  # noqa: E402


def steps_until(seconds: float, step_s: float) -> list[float]:
    """Training seconds at the end of each step of a run that trained `seconds`."""
    return [round(step_s * (i + 1), 6) for i in range(int(seconds / step_s))]


def test_a_run_that_was_never_stopped_fails_the_budget_check():
    # the rerun in the issue: rlgraph trained 132 s against a 60 s budget
    ends = steps_until(132.0, 0.46)
    with pytest.raises(BudgetError, match=r"reported for 60 s was taken at 13\d\.\d s"):
        check_budget("rlgraph grpo", 60.0, ends, end_s=ends[-1])
    # and reporting the step that crossed 60 s does not make such a run pass: it kept training
    crossing = next(t for t in ends if t >= 60.0)
    with pytest.raises(BudgetError, match=r"trained 13\d\.\d s against a 60 s budget .* not stopped"):
        check_budget("rlgraph grpo", 60.0, ends, end_s=crossing)


def test_the_budget_column_holds_only_the_step_that_crossed_the_budget():
    ends = steps_until(60.5, 0.46)  # stopped at the first step past 60 s
    crossing = next(t for t in ends if t >= 60.0)
    check_budget("TRL grpo", 60.0, ends, end_s=crossing)
    check_budget("rlgraph grpo", 60.0, ends + [crossing + 0.46], end_s=crossing)  # the step in flight at the stop
    with pytest.raises(BudgetError, match="taken at 132.0 s"):
        check_budget("rlgraph grpo", 60.0, ends, end_s=132.0)
    with pytest.raises(BudgetError, match="taken at 45.0 s"):  # a result from before the budget was spent
        check_budget("rlgraph grpo", 60.0, ends, end_s=45.0)


def test_a_run_short_of_the_budget_fails():
    with pytest.raises(BudgetError, match="short of the 60 s budget"):
        check_budget("TRL ppo", 60.0, steps_until(41.0, 0.7), end_s=40.6)
    with pytest.raises(BudgetError, match="no training step"):
        check_budget("TRL ppo", 60.0, [], end_s=0.0)


def test_a_verdict_needs_a_difference_larger_than_the_spread():
    # the two runs of GRPO: 1.61x and 1.46x against a 1.5x target
    assert judge((1.61 + 1.46) / 2 - 1.5, 1.61 - 1.46, 2) == "within noise"
    assert judge((2.02 + 2.07) / 2 - 1.5, 2.07 - 2.02, 2) == "met"
    assert judge((1.20 + 1.25) / 2 - 1.5, 0.05, 2) == "missed"
    assert judge(0.5, 0.0, 1) == "–"  # one run has no spread to judge by


def _run(seed: int, rl_acc: float, trl_acc: float, speedup: float) -> dict:
    curve = [{"mark_s": m, "accuracy": rl_acc} for m in (15.0, 30.0, 45.0, 60.0)]
    return {"seed": seed, "speedup": speedup, "speedup_median_step": speedup,
            "rlgraph": {"accuracy_end": rl_acc, "curve": curve},
            "trl": {"accuracy_end": trl_acc, "curve": [dict(p, accuracy=trl_acc) for p in curve]}}


def test_accuracy_is_judged_against_the_spread_across_seeds():
    close = summarise([_run(0, 0.800, 0.794, 1.61), _run(1, 0.810, 0.780, 1.58)], val_rows=500)
    assert close["accuracy"]["rlgraph"]["values"] == [0.800, 0.810]
    assert close["accuracy"]["trl"]["min"] == 0.780 and close["accuracy"]["trl"]["max"] == 0.794
    assert close["rlgraph_accuracy"]["verdict"] == "within noise"  # +0.018 < one standard error on 500 rows
    assert close["speed_verdict"] == "met"  # 1.595 is 0.095 above 1.5, the seeds 0.03 apart
    apart = summarise([_run(0, 0.854, 0.700, 2.07), _run(1, 0.860, 0.710, 2.02)], val_rows=500)
    assert apart["rlgraph_accuracy"]["verdict"] == "met"
    worse = summarise([_run(0, 0.650, 0.790, 1.5), _run(1, 0.660, 0.800, 1.5)], val_rows=500)
    assert worse["rlgraph_accuracy"]["verdict"] == "missed"
    assert worse["curve_means"]["trl"] == [0.795] * 4


def test_the_stop_cannot_be_ignored():
    """A run that ignores SIGINT and SIGTERM (and a child of it) is still gone after the grace period."""
    code = ("import signal, subprocess, sys, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
            "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            "print(child.pid, flush=True); time.sleep(60)")
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)
    child = int(process.stdout.readline())
    started = time.perf_counter()
    terminate(process, grace_s=0.5)
    process.wait(timeout=5)
    assert time.perf_counter() - started < 5
    assert process.returncode == -signal.SIGKILL
    for _ in range(100):  # the child died with the group; wait for init to reap it
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the run's child outlived the stop")


def test_the_doc_is_never_rendered_from_different_runs(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "check.json").write_text(json.dumps({"run_id": "run-a", "check_median_s": 0.3, "python_median_s": 0.02,
                                                    "specs": 7, "repeats": 10}))
    (results / "trl.json").write_text(json.dumps({"run_id": "run-b", "budget_s": 60.0, "comparisons": {}}))
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n")
    done = subprocess.run([sys.executable, "bench/run_all.py", "--docs-only", "--results", str(results), "--doc", str(doc)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "different runs" in done.stderr and "check: run-a" in done.stderr and "trl: run-b" in done.stderr
    assert "Traceback" not in done.stderr
    assert doc.read_text() == "# Benchmarks\n"
