"""The process pool that hosts episodes (rlgraph/workers/envs/pool.py) and the environment class check
(rlgraph/workers/envs/loading.py): an environment that raises, hangs, returns garbage or ends its process
fails its own episodes only, and the pool works again on the next batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from rlgraph.contract.settings import EnvSettings
from rlgraph.workers.envs.base import Observation, Turn
from rlgraph.workers.envs.loading import EnvError, load_env_class
from rlgraph.workers.envs.pool import EnvFailure, EnvPool
from rlgraph.workers.reward_process import ChildKilled

HERE = os.path.dirname(os.path.abspath(__file__))


def settings(cls: str = "envs_for_tests.py:Counter", workers: int = 2, timeout_s: float = 1.0,
             args: dict | None = None) -> EnvSettings:
    return EnvSettings(name="counter", cls=cls, base_dir=HERE, declared_at="specs/test.rl:3", args=args or {},
                       max_turns=4, max_observation_tokens=64, timeout_s=timeout_s, workers=workers,
                       max_failed_fraction=0.1, tool_format="tag")


def turn(index: int, text: str = "hi") -> Turn:
    return Turn(index=index, text=text, token_ids=[5, 6], tool_calls=[], tool_call_errors=[], ended_by_eos=False)


@pytest.fixture
def make_pool():
    pools = []

    def make(**kwargs) -> EnvPool:
        grace_s = kwargs.pop("grace_s", 0.5)
        pools.append(EnvPool(settings(**kwargs), grace_s=grace_s))
        return pools[-1]

    yield make
    for pool in pools:
        pool.close(kill=True)


def rows(n: int, **faults: dict) -> list[tuple[int, dict]]:
    """Episodes 0..n-1; `faults` maps "e<id>" to the fault of that episode's row."""
    return [(i, {"id": i, **faults.get(f"e{i}", {})}) for i in range(n)]


def pids(pool: EnvPool) -> list[int]:
    return [p.proc.pid for p in pool.processes]


def test_episodes_keep_their_state_across_turns_in_the_process_their_id_names(make_pool):
    pool = make_pool(workers=2)
    started = pool.reset(rows(5, e0={"greet": True}, e3={"fault": "dict"}, e4={"fault": "modules"}))
    assert pool.step([(4, turn(0))])[4].text == "none"  # the process started without torch, Ray or numpy
    assert started[0] == Observation(text="episode 0 starts") and started[1] == Observation()
    for k in range(3):
        answers = pool.step([(i, turn(k, f"t{k}")) for i in range(4)])
        for i in range(3):  # each episode counts its own turns, and answers to its own turn's text
            assert answers[i] == Observation(text=f"episode {i} turn {k + 1} t{k}", reward=k + 1.0, done=k == 2)
        assert answers[3] == Observation(token_ids=[3, k + 1], reward=1.0, done=k == 2)
    pool.end_all()
    assert pool.episodes == {}
    # the next batch reuses the warm processes, and the constructor's args reach each new object
    pool = make_pool(workers=2, args={"start": 10})
    pool.reset(rows(2))
    assert pool.step([(1, turn(0))])[1].reward == 11.0


def test_processes_run_their_episodes_at_once(make_pool):
    pool = make_pool(workers=2)
    pool.reset(rows(2, e0={"fault": "slow"}, e1={"fault": "slow"}))
    t0 = time.monotonic()
    answers = pool.step([(0, turn(0)), (1, turn(0))])
    assert time.monotonic() - t0 < 0.9  # two calls of 0.5 s each, side by side
    assert answers[0].reward == answers[1].reward == 1.0


def test_an_environment_that_raises_fails_its_episode_with_its_traceback(make_pool):
    pool = make_pool(workers=2)
    pool.reset(rows(4, e2={"fault": "raise", "fault_at": 1}))
    pool.step([(i, turn(0)) for i in range(4)])
    answers = pool.step([(i, turn(1)) for i in range(4)])
    failure = answers[2]
    assert isinstance(failure, EnvFailure) and failure.kind == "raised"
    assert failure.message.startswith("environment counter (envs_for_tests.py:Counter), episode 2: step of turn 1 "
                                      "raised ValueError: bad turn in episode 2 (")
    assert "envs_for_tests.py" in failure.traceback and 'raise ValueError(f"bad turn' in failure.traceback
    assert "pool.py" not in failure.traceback  # the environment's frames, not the pool's
    assert [answers[i].text.split()[3] for i in (0, 1, 3)] == ["2", "2", "2"]  # the others go on
    with pytest.raises(ValueError, match="episode 2 is not running"):  # a failed episode is over
        pool.step([(2, turn(2))])
    assert pool.step([(0, turn(2))])[0].done


def test_a_hung_call_is_stopped_by_the_alarm_and_its_process_goes_on(make_pool):
    pool = make_pool(workers=1, timeout_s=0.5)
    pool.reset(rows(3, e1={"fault": "hang"}))
    before, t0 = pids(pool), time.monotonic()
    answers = pool.step([(i, turn(0)) for i in range(3)])
    assert time.monotonic() - t0 < 0.5 + 1.0
    assert answers[1] == EnvFailure("timeout", "environment counter (envs_for_tests.py:Counter), episode 1: "
                                               "step of turn 0 took longer than timeout_s = 0.5 s and was stopped")
    assert answers[0].text.startswith("episode 0 turn 1") and answers[2].text.startswith("episode 2 turn 1")
    assert pids(pool) == before  # the same process answers the next turn
    assert pool.step([(2, turn(1))])[2].reward == 2.0


def test_a_call_the_alarm_cannot_stop_gets_its_process_killed_and_the_pool_recovers(make_pool):
    pool = make_pool(workers=2, timeout_s=0.5, grace_s=0.5)
    pool.reset(rows(6, e0={"fault": "stubborn"}))  # process 0 hosts episodes 0, 2, 4
    before, t0 = pids(pool), time.monotonic()
    answers = pool.step([(i, turn(0)) for i in range(4)])
    assert time.monotonic() - t0 < 0.5 + 0.5 + 1.0
    assert answers[0].kind == "timeout" and "did not stop when interrupted" in answers[0].message
    assert answers[2].kind == "died" and answers[2].message == (
        "environment counter (envs_for_tests.py:Counter), episode 2: step of turn 0 not run: its process was killed "
        "because episode 0's step of turn 0 ran past timeout_s = 0.5 s and did not stop when interrupted")
    assert isinstance(answers[1], Observation) and isinstance(answers[3], Observation)
    late = pool.step([(4, turn(0)), (5, turn(0))])  # episode 4 lived in the killed process
    assert late[4].kind == "died" and "step of turn 0 not run: its process ended earlier (its process was killed" \
        in late[4].message
    assert isinstance(late[5], Observation)
    pool.end_all()
    assert all(isinstance(a, Observation) for a in pool.reset(rows(4)).values())
    assert all(isinstance(a, Observation) for a in pool.step([(i, turn(0)) for i in range(4)]).values())
    after = pids(pool)
    assert after[0] != before[0] and after[1] == before[1]  # a fresh process 0, the same process 1


def test_an_environment_that_ends_its_process_fails_that_process_episodes_only(make_pool):
    pool = make_pool(workers=2)
    pool.reset(rows(4, e1={"fault": "exit", "fault_at": 1}))  # process 1 hosts episodes 1 and 3
    pool.step([(i, turn(0)) for i in range(4)])
    answers = pool.step([(i, turn(1)) for i in range(4)])
    assert answers[1] == EnvFailure("died", (
        "environment counter (envs_for_tests.py:Counter), episode 1: step of turn 1 ended its process: it exited "
        "with code 3 (os._exit, a crash in native code, out of memory?)"))
    assert answers[3].kind == "died" and "its process exited with code 3 during episode 1's step of turn 1" \
        in answers[3].message
    assert answers[0].reward == 2.0 and answers[2].reward == 2.0
    pool.end_all()
    pool.reset(rows(4))
    answers = pool.step([(i, turn(0)) for i in range(4)])
    assert [answers[i].reward for i in range(4)] == [1.0] * 4


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_process_killed_from_outside_while_hosting_episodes_stops_the_pool_for_a_recovery(make_pool, sig):
    # no fault of the environment's (the out-of-memory killer, an operator): not its episodes' failure but the
    # run's, which recovers from it as from a worker's death and runs the episodes again (rlgraph/runtime/run.py)
    pool = make_pool(workers=2)
    pool.reset(rows(4))
    pool.processes[1].proc.send_signal(sig)
    pool.processes[1].proc.wait()
    with pytest.raises(ChildKilled, match=f"its process was killed by signal {sig.name} hosting 2 episode"):
        pool.step([(i, turn(0)) for i in range(4)])
    assert all(process.proc is None for process in pool.processes)  # every process stopped
    assert pool.reset(rows(2))[1] == Observation()  # and the next batch starts anew


def test_a_process_killed_between_batches_is_replaced_at_the_next_reset(make_pool):
    pool = make_pool(workers=2)
    pool.reset(rows(2))
    pool.end_all()
    pool.processes[1].proc.kill()
    pool.processes[1].proc.wait()
    answers = pool.reset(rows(4))
    assert answers[1] == answers[3] == Observation()


def test_an_environment_that_kills_its_own_process_fails_its_episodes(make_pool):
    # its own doing, as an os._exit: it would do so again on the same row, so no recovery
    pool = make_pool(workers=1)
    pool.reset(rows(2, e0={"fault": "self_kill"}))
    answers = pool.step([(0, turn(0)), (1, turn(0))])
    assert answers[0].kind == answers[1].kind == "died"
    assert "exited with code 137 (128 + SIGKILL: did it send that signal to its own process?)" in answers[0].message


def test_ended_episodes_have_their_objects_closed_and_a_failing_close_is_ignored(make_pool, tmp_path):
    log = tmp_path / "closed.txt"
    pool = make_pool(workers=2, args={"log": str(log)})
    pool.reset(rows(3, e1={"fault": "close"}))
    pool.end([1])  # does not wait
    pool.step([(0, turn(0)), (2, turn(0))])
    pool.end_all()
    assert sorted(log.read_text().split("\n")) == ["", "closed 0", "closed 1", "closed 2"]
    assert pool.episodes == {} and pool.reset(rows(2))[1] == Observation()


@pytest.mark.parametrize("fault, problem", [
    ("garbage", "returned 'not an observation': not an Observation"),
    ("nan", "returned {'text': 'x', 'reward': nan}: its reward is not a finite number"),
])
def test_an_environment_that_returns_garbage_fails_its_episode(make_pool, fault, problem):
    pool = make_pool(workers=1)
    pool.reset(rows(2, e0={"fault": fault}))
    answers = pool.step([(0, turn(0)), (1, turn(0))])
    assert answers[0] == EnvFailure(
        "garbage", f"environment counter (envs_for_tests.py:Counter), episode 0: step of turn 0 {problem}")
    assert answers[1].reward == 1.0


@pytest.mark.parametrize("cls, args, message", [
    ("no_such_env_module:Env", {}, "module 'no_such_env_module' not found"),
    ("missing.py:Env", {}, f"file {HERE}/missing.py not found"),
    ("envs_for_tests.py:Nope", {}, "file 'envs_for_tests.py' has no attribute 'Nope'"),
    ("envs_for_tests.py:not_a_class", {}, "'envs_for_tests.py:not_a_class' is a function, not a class"),
    ("envs_for_tests.py:NoStep", {}, "class NoStep has no `step` method"),
    ("envs_for_tests.py:BadTools", {}, "class BadTools's `tools` [0] (calc): function.parameters is "
                                       "{'type': 'string'}, not a JSON schema"),
    ("envs_for_tests.py:Counter", {"stop": 3},
     "the constructor Counter(start=0, log=None) does not take the spec's args (stop = 3): got an unexpected keyword "
     "argument 'stop'"),
])
def test_an_unusable_environment_class_is_a_clear_error(cls, args, message):
    with pytest.raises(EnvError) as err:
        load_env_class(settings(cls=cls, args=args))
    text = str(err.value)
    assert text.startswith(f"environment counter (class {cls!r}, declared at specs/test.rl:3): ")
    assert message in text and "\n" not in text


def test_an_environment_that_cannot_load_in_its_process_fails_the_first_call(make_pool):
    pool = make_pool(cls="no_such_env_module:Env")
    with pytest.raises(EnvError, match="module 'no_such_env_module' not found"):
        pool.reset(rows(2))
    assert all(p.proc is None for p in pool.processes)


def test_the_processes_exit_when_their_parent_is_killed():
    code = (  # process 0 is busy in a call that outlasts the test when its parent ends (no close, no finalizers)
        "import os, threading, time; from tests.workers.test_env_pool import settings, rows, turn; "
        "from rlgraph.workers.envs.pool import EnvPool; pool = EnvPool(settings(timeout_s=60)); "
        "pool.reset(rows(2, e0={'fault': 'stubborn'})); print(*(p.proc.pid for p in pool.processes), flush=True); "
        "threading.Thread(target=pool.step, args=([(0, turn(0))],), daemon=True).start(); time.sleep(0.3); "
        "os._exit(0)"
    )
    root = os.path.dirname(os.path.dirname(HERE))
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    children = [int(pid) for pid in out.stdout.split()]
    assert len(children) == 2, out.stderr
    deadline = time.monotonic() + 5.0
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in children)


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
