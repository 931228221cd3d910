"""Issue 18, item 1: a worker process that dies mid-run is recovered from without anyone re-running the
command: the run restarts its processes, restores the latest checkpoint and finishes (train.max_failures)."""

from __future__ import annotations

import collections
import json
import os
import signal
import threading
import time
from pathlib import Path

from rlgraph.runtime.loop import cut_samples
from rlgraph.runtime.step import SAMPLES_PER_STEP
from rlgraph.runtime.watchdog import descendants


def _device_processes() -> list[int]:
    """This test session's Ray worker processes that host a run's roles (descendants of this process only:
    other Ray instances on the machine are not ours to touch)."""
    found = []
    for pid in descendants(os.getpid()):
        try:
            if b"DeviceProcess" in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def _kill_a_worker_after(out: Path, step: int, killed: list[int]) -> threading.Thread:
    """A thread that SIGKILLs one of the run's worker processes once metrics.jsonl has `step`."""

    def watch() -> None:
        deadline = time.time() + 240
        while time.time() < deadline:
            if step in _steps(out / "metrics.jsonl"):
                pids = _device_processes()
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                    return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _steps(metrics: Path) -> list[int]:
    if not metrics.is_file():
        return []
    return [json.loads(line)["training/global_step"] for line in metrics.read_text().splitlines() if line.strip()]


def test_samples_of_the_steps_after_the_checkpoint_are_cut_as_their_metrics_lines_are(tmp_path):
    samples = tmp_path / "samples.jsonl"
    rows = [json.dumps({"step": step, "response": f"answer {step}.{i}"}) + "\n" for step in (1, 2, 3) for i in range(2)]
    samples.write_text("".join(rows) + '{"step": 3, "respo')  # the last line cut short by a crash
    cut_samples(samples, keep_up_to_step=2)  # resumed (or recovered) from the checkpoint of step 2
    assert samples.read_text() == "".join(rows[:4])
    cut_samples(samples, keep_up_to_step=None)  # recovered with no checkpoint yet: from step 0 again
    assert samples.read_text() == ""
    cut_samples(tmp_path / "none.jsonl", keep_up_to_step=2)  # no samples yet: nothing to cut, nothing made
    assert not (tmp_path / "none.jsonl").exists()


def test_a_killed_worker_is_recovered_and_the_run_finishes(run_cli, tmp_path):
    out = tmp_path / "run"
    killed: list[int] = []
    killer = _kill_a_worker_after(out, 3, killed)
    code, text = run_cli("specs/grpo_arith.rl", "--output", out, "-s", "train.steps=6", "-s", "train.checkpoint_every=2",
                         "-s", "train.validate_every=0", "-s", "data.batch_size=16", "-s", "rollout.max_new_tokens=4",
                         "-s", "train.samples_every=1")
    killer.join(timeout=5)
    assert killed, "the run ended before a worker could be killed"
    assert code == 0, text
    assert "recovering (1 of train.max_failures = 3)" in text and "a worker process died" in text
    steps = _steps(out / "metrics.jsonl")
    assert steps == list(range(0, 7)), steps  # every step once: those after the checkpoint were run again
    rows = collections.Counter(json.loads(line)["step"] for line in (out / "samples.jsonl").read_text().splitlines())
    assert rows == {step: SAMPLES_PER_STEP for step in range(1, 7)}, rows  # so are their samples
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("training/recoveries", 0) for r in records) == 1


def test_max_failures_zero_stops_at_the_first_death(run_cli, tmp_path):
    out = tmp_path / "run"
    killed: list[int] = []
    killer = _kill_a_worker_after(out, 1, killed)
    code, text = run_cli("specs/grpo_arith.rl", "--output", out, "-s", "train.steps=40", "-s", "train.max_failures=0",
                         "-s", "train.validate_every=0", "-s", "data.batch_size=16", "-s", "rollout.max_new_tokens=4")
    killer.join(timeout=5)
    assert killed and code == 1
    assert "a worker process died" in text and "recovering" not in text
    text = " ".join(text.split())
    assert "The failure budget is spent (train.max_failures = 0; 0 recoveries made), so the run stops" in text
    assert (f"Resume with: rlgraph run specs/grpo_arith.rl -s train.steps=40 -s train.max_failures=0 "
            f"-s train.validate_every=0 -s data.batch_size=16 -s rollout.max_new_tokens=4 --output {out}") in text
