"""Issue 29, item 14: an environment's or a reward function's process killed from outside (kill -9, the
out-of-memory killer) mid-run is recovered from as a worker's death is: every process restarts, the run goes on
from its last checkpoint and finishes, the recovery counted against train.max_failures; with max_failures = 0
it stops with a message naming the process. A function that kills its own process is its own fault instead:
its row is named and the run is not retried."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from pathlib import Path

from .helpers import read_metrics

SPEC = """rlgraph 1
model policy {{ path = "builtin:arith-gpt" }}
pool main {{ nodes = 1  devices_per_node = 1  device = cpu }}
{env}
reward exact {{ fn = "{reward}"  timeout_s = 60 }}
data {{ train = "builtin:arith/train"  batch_size = 4 }}
train {{ steps = {steps}  seed = 0  validate_every = 0  checkpoint_every = 1  samples_every = 1 }}
role actor {{ model = policy  pool = main  optim {{ lr = 1e-4 }} }}
role rollout {{ colocate = actor  engine = hf  n = 2  temperature = 1.0  max_new_tokens = 8 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate{env_arg} -> responses, old_log_prob
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 4)
}}
"""

ENV_BLOCK = """env talk {{
  class = "{module}:Stalls"
  max_turns = 2
  max_observation_tokens = 3
  timeout_s = 30
  workers = 1
}}"""

# Once the test arms it (a file), the first call to get there claims the stall (another file, made exclusively:
# one claim however many processes score), writes its process's id and sleeps: the test kills that process.
# Every call records its process's id, so the test sees the process that came after the killed one.
STALL = '''
import os
import time

ARM, CLAIM, PIDS = {arm!r}, {claim!r}, {pids!r}


def stall_once():
    with open(PIDS, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
    if not os.path.exists(ARM):
        return
    try:
        os.close(os.open(CLAIM + ".lock", os.O_CREAT | os.O_EXCL | os.O_WRONLY))  # stays: the one claim
    except FileExistsError:
        return
    with open(CLAIM + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(CLAIM + ".tmp", CLAIM)  # whole when the test reads it
    time.sleep(25)
'''

REWARD = STALL + '''

def stalls(data_source, solution_str, ground_truth, extra_info):
    from rlgraph.tasks.arith import exact_match

    stall_once()
    return exact_match(data_source, solution_str, ground_truth, extra_info)
'''

ENV = STALL + '''
from rlgraph.workers.envs import Environment, Observation


class Stalls(Environment):
    def reset(self, row):
        pass

    def step(self, turn):
        stall_once()
        if turn.index == 0:
            return Observation(text=" =")
        return Observation(reward=1.0, done=True)
'''

SELF_KILL = '''
import os
import signal


def kills_itself(data_source, solution_str, ground_truth, extra_info):
    if os.path.exists({arm!r}):
        os.kill(os.getpid(), signal.SIGKILL)
    return 0.0
'''


def _write(tmp_path: Path, kind: str, steps: int) -> tuple[Path, dict[str, Path]]:
    """The spec, with a reward or an environment that stalls once armed; and the files the two share."""
    files = {name: tmp_path / f"{name}.txt" for name in ("arm", "claim", "pids")}
    module = f"stalls_{uuid.uuid4().hex[:8]}"
    source = {"reward": REWARD, "env": ENV, "self_kill": SELF_KILL}[kind]
    (tmp_path / f"{module}.py").write_text(source.format(**{name: str(path) for name, path in files.items()}))
    reward = {"reward": f"{module}:stalls", "self_kill": f"{module}:kills_itself"}.get(kind, "rlgraph.tasks.arith:exact_match")
    env = ENV_BLOCK.format(module=module) if kind == "env" else ""
    spec = tmp_path / "stalls.rl"
    spec.write_text(SPEC.format(env=env, env_arg="(env = talk)" if env else "", reward=reward, steps=steps))
    return spec, files


def _kill_the_staller(out: Path, files: dict[str, Path], after_step: int, killed: list[int]) -> threading.Thread:
    """A thread that arms the stall once metrics.jsonl has `after_step`, and SIGKILLs the process that claims it."""

    def watch() -> None:
        deadline = time.time() + 240
        while time.time() < deadline:
            if not files["arm"].exists() and after_step in _steps(out):
                files["arm"].write_text("armed")
            if files["claim"].exists():
                pid = int(files["claim"].read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _steps(out: Path) -> list[int]:
    metrics = out / "metrics.jsonl"
    if not metrics.is_file():
        return []
    return [json.loads(line)["training/global_step"] for line in metrics.read_text().splitlines() if line.strip()]


def _recovered_and_finished(code: int, text: str, out: Path, files: dict[str, Path], killed: list[int],
                            steps: int) -> None:
    assert killed, "the run ended before the process could be killed"
    assert code == 0, text
    flat = " ".join(text.split())
    assert "recovering (1 of train.max_failures = 3)" in flat, text
    assert "was killed by signal SIGKILL" in flat and "Restarting every process (workers, environments, rewards)" in flat
    assert _steps(out) == list(range(0, steps + 1)), _steps(out)  # every step once: the ones after the checkpoint again
    assert sum(record.get("training/recoveries", 0) for record in read_metrics(out)) == 1
    # the killed process was replaced by a new one, which went on scoring or hosting episodes
    pids = [int(line) for line in files["pids"].read_text().split()]
    last = len(pids) - 1 - pids[::-1].index(killed[0])  # its call that stalled
    assert pids[last + 1:], "nothing was scored or stepped after the kill"


def _killed_mid_run(run_cli, tmp_path, kind: str) -> str:
    """A 4-step run whose `kind` process (reward | env) is killed at work after step 2: recovered and finished."""
    spec, files = _write(tmp_path, kind, steps=4)
    out = tmp_path / "run"
    killed: list[int] = []
    killer = _kill_the_staller(out, files, after_step=2, killed=killed)
    code, text = run_cli(spec, "--output", out)
    killer.join(timeout=5)
    _recovered_and_finished(code, text, out, files, killed, steps=4)
    return text


def test_a_reward_process_killed_while_scoring_is_restarted_and_the_run_finishes(run_cli, tmp_path):
    text = _killed_mid_run(run_cli, tmp_path, "reward")
    assert "reward `exact` could not score" in " ".join(text.split()), text


def test_an_environment_process_killed_mid_episode_is_restarted_and_the_run_finishes(run_cli, tmp_path):
    text = _killed_mid_run(run_cli, tmp_path, "env")
    flat = " ".join(text.split())
    assert "environment talk" in flat and "its process was killed by signal SIGKILL during episode" in flat, text
    # the episodes the kill cut short ran again after the recovery, none counted as failed
    metrics = read_metrics(tmp_path / "run")
    assert all(record.get("env/failed", 0) == 0 for record in metrics), metrics


def test_with_max_failures_zero_a_killed_reward_process_stops_the_run_naming_it(run_cli, tmp_path):
    spec, files = _write(tmp_path, "reward", steps=20)
    out = tmp_path / "run"
    killed: list[int] = []
    killer = _kill_the_staller(out, files, after_step=1, killed=killed)
    code, text = run_cli(spec, "--output", out, "-s", "train.max_failures=0")
    killer.join(timeout=5)
    assert killed and code == 1, text
    flat = " ".join(text.split())
    assert "recovering" not in flat
    assert "the process of reward function" in flat and "was killed by signal SIGKILL" in flat, text
    assert "The failure budget is spent (train.max_failures = 0; 0 recoveries made), so the run stops" in flat
    assert f"Resume with: rlgraph run {spec} -s train.max_failures=0 --output {out}" in flat


def test_a_reward_function_that_kills_its_own_process_is_its_fault_not_retried(run_cli, tmp_path):
    spec, files = _write(tmp_path, "self_kill", steps=4)
    files["arm"].write_text("armed")
    code, text = run_cli(spec, "--output", tmp_path / "run")
    assert code == 1, text
    flat = " ".join(text.split())
    assert "recovering" not in flat and "failure budget" not in flat
    assert "exited with code 137 (128 + SIGKILL: did it send that signal to its own process?) while scoring row" in flat, text
