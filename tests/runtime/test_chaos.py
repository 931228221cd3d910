"""The chaos test, short: `bench/chaos.py --kills 2 --steps 4` kills the driver of a run once and one of its
workers once (SIGKILL, one of them inside a checkpoint write), and the run must end as if nothing had happened:
it finishes, every checkpoint verifies against its manifest, each step's metrics line is there exactly once,
and the final weights equal an uninterrupted run's bit for bit. Two runs with their own local Ray (~70 s on an
idle machine); `make bench` runs the long version.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .helpers import REPO

STEPS = 4


def test_a_run_whose_driver_and_worker_are_killed_ends_as_if_never_killed(arith_model, tmp_path):
    result_file = tmp_path / "chaos.json"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "bench/chaos.py", "--kills", "2", "--steps", str(STEPS),
                           "--workdir", str(tmp_path / "runs"), "--output", str(result_file)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    out = done.stdout[-4000:] + done.stderr[-4000:]
    assert result_file.exists(), out
    result = json.loads(result_file.read_text())
    figures, checks = result["figures"], result["checks"]
    assert done.returncode == 0 and result["invariants_hold"], out + json.dumps(result["failed_attempt_logs"])[:6000]

    kills = {k["target"]: k for k in result["kill_log"]}
    assert set(kills) == {"driver", "worker"}, result["kill_log"]
    assert figures["kills_inside_checkpoint_write"] >= 1, result["kill_log"]  # the kill aimed at a write hit it
    # a worker killed mid-run: the same command goes on by itself; a killed driver: the re-run resumes
    if kills["worker"]["at_step"] < STEPS:
        assert kills["worker"]["outcome"] == "recovered", result["kill_log"]
        assert figures["recovery_console_lines"] == 1, out
    assert kills["driver"]["outcome"] == "restarted"

    assert checks["metrics_steps"] == list(range(STEPS + 1))
    assert not checks["incomplete_checkpoints"] and not checks["corrupt_checkpoints_set_aside"]
    assert f"step_{STEPS}" in checks["checkpoints"]
    assert checks["weights_equal"] and checks["weights_compared"] > 0
    assert not checks["scores_differ_at_steps"]  # the steps redone after a kill scored as the first time
