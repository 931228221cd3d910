"""Issue 18, item 1: a worker process that dies mid-run is recovered from without anyone re-running the
command: the run restarts its processes, restores the latest checkpoint and finishes (train.max_failures)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path


def _device_processes() -> list[int]:
    """This test session's Ray worker processes that host a run's roles (descendants of this process only:
    other Ray instances on the machine are not ours to touch)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            todo.append(child)
            try:
                if b"DeviceProcess" in (Path("/proc") / str(child) / "cmdline").read_bytes():
                    found.append(child)
            except OSError:
                pass
    return found


def _steps(metrics: Path) -> list[int]:
    if not metrics.is_file():
        return []
    return [json.loads(line)["training/global_step"] for line in metrics.read_text().splitlines() if line.strip()]


def test_a_killed_worker_is_recovered_and_the_run_finishes(run_cli, tmp_path):
    out = tmp_path / "run"
    killed: list[int] = []

    def kill_after_step_3() -> None:
        deadline = time.time() + 240
        while time.time() < deadline and not killed:
            if 3 in _steps(out / "metrics.jsonl"):
                pids = _device_processes()
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_step_3, daemon=True)
    killer.start()
    code, text = run_cli("specs/grpo_arith.rl", "--output", out, "-s", "train.steps=6", "-s", "train.checkpoint_every=2",
                         "-s", "train.validate_every=0", "-s", "data.batch_size=16", "-s", "rollout.max_new_tokens=4")
    killer.join(timeout=5)
    assert killed, "the run ended before a worker could be killed"
    assert code == 0, text
    assert "recovering (1 of train.max_failures = 3)" in text and "a worker process died" in text
    steps = _steps(out / "metrics.jsonl")
    assert steps == list(range(0, 7)), steps  # every step once: those after the checkpoint were run again
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum(r.get("training/recoveries", 0) for r in records) == 1


def test_max_failures_zero_stops_at_the_first_death(run_cli, tmp_path):
    out = tmp_path / "run"
    killed: list[int] = []

    def kill_after_step_1() -> None:
        deadline = time.time() + 240
        while time.time() < deadline:
            if 1 in _steps(out / "metrics.jsonl"):
                pids = _device_processes()
                if pids:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                    return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_step_1, daemon=True)
    killer.start()
    code, text = run_cli("specs/grpo_arith.rl", "--output", out, "-s", "train.steps=40", "-s", "train.max_failures=0",
                         "-s", "train.validate_every=0", "-s", "data.batch_size=16", "-s", "rollout.max_new_tokens=4")
    killer.join(timeout=5)
    assert killed and code == 1
    assert "a worker process died" in text and "recovering" not in text
