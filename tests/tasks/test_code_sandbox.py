"""Hostile programs in the sandbox: each is contained, and none leaves a process or a file behind.

Every run is checked by `left_nothing`: its directory is gone and no process works in it any more (the
sandbox's processes all start there, and the guard keeps them from leaving it). The limits are small, so a
test that misbehaved could not load this shared machine: a fork bomb meets the guard at its first fork.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from rlgraph.tasks import sandbox
from rlgraph.tasks.sandbox import Limits, SandboxError, namespaces, processes_in, run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's limits are Linux's")
# a wall-clock limit far above what a test needs: on a loaded machine a run may take seconds to start
SMALL = Limits(cpu_s=1, wall_s=30.0, memory_mb=256, output_bytes=64 << 10, file_mb=1)
UNGUARDED = dataclasses.replace(SMALL, python_guard=False)


@pytest.fixture(params=["namespaces", "no namespaces"])
def level(request, monkeypatch) -> str:
    """A test twice: with the namespaces where this user can make them, and as on a machine without them."""
    if request.param == "no namespaces":
        monkeypatch.setattr(sandbox, "namespaces", lambda: ())
    elif not namespaces():
        pytest.skip("this user cannot make network and PID namespaces")
    return request.param


def left_nothing(run) -> None:
    assert not os.path.exists(run.workdir)
    assert processes_in(run.workdir) == []


def test_a_program_runs_on_its_stdin_in_a_directory_of_its_own():
    program = textwrap.dedent("""
        import os, tempfile
        open("scratch.txt", "w").write("mine")
        here = os.getcwd()
        print(int(input()) * 2, os.environ["HOME"] == here, tempfile.gettempdir() == here,
              sorted(k for k in os.environ if k.startswith("RLGRAPH")))
    """)
    run = run_python(program, stdin="21\n", limits=SMALL)
    assert (run.status, run.returncode, run.stdout.split()) == ("exited", 0, ["42", "True", "True", "[]"])
    assert run.ok
    left_nothing(run)


def test_call_and_assert_modes_report_on_their_own_channel():
    program = "class Solution:\n    def twice(self, x):\n        print('noise')\n        return [x, x]\n"
    run = run_python(program, mode="call", fn_name="twice", args=[3], limits=SMALL)
    assert run.ok and run.result == "[3, 3]" and run.stdout == "noise\n"
    passed = run_python("def f(x):\n    return x + 1\n", mode="assert", test="assert f(1) == 2", limits=SMALL)
    failed = run_python("def f(x):\n    return x + 1\n", mode="assert", test="assert f(1) == 3", limits=SMALL)
    assert passed.result == "passed" and failed.result is None and "AssertionError" in failed.stderr
    # leaving before the tests run is no pass
    exits = run_python("import sys\nsys.exit(0)\n", mode="assert", test="assert False", limits=SMALL)
    assert exits.ok and exits.result is None
    for each in (run, passed, failed, exits):
        left_nothing(each)


def test_a_fork_bomb_is_stopped_at_its_first_fork(level):
    bomb = "import os\nwhile True:\n    os.fork()\n"
    run = run_python(bomb, limits=SMALL)
    assert run.status == "exited" and run.returncode != 0
    assert "os.fork is not allowed" in run.stderr
    left_nothing(run)
    spawn = "import subprocess\nsubprocess.run(['sh', '-c', 'sleep 30 &'])\n"
    run = run_python(spawn, limits=SMALL)
    assert run.returncode != 0 and "sandbox: module _posixsubprocess is not available" in run.stderr
    left_nothing(run)


def test_processes_that_leave_the_group_die_with_the_program(level):
    # five children (not a bomb: bounded), each in a session of its own, sleeping on after the program exits;
    # without a PID namespace, the sweep of the directory's processes is what finds them
    program = textwrap.dedent("""
        import os, time
        for _ in range(5):
            if os.fork() == 0:
                os.setsid()
                time.sleep(60)
                os._exit(0)
        print("started")
    """)
    run = run_python(program, limits=UNGUARDED)
    assert run.ok and run.stdout == "started\n"
    left_nothing(run)


def test_an_infinite_loop_meets_the_cpu_limit_and_a_sleeper_the_wall_clock():
    spin = run_python("while True:\n    pass\n", limits=Limits(cpu_s=1, wall_s=60.0))  # only the CPU limit ends it
    assert spin.status == "cpu_limit"
    left_nothing(spin)
    sleeper = run_python("import time\ntime.sleep(60)\n", limits=Limits(wall_s=0.5))
    assert sleeper.status == "timeout"
    left_nothing(sleeper)


def test_writing_outside_its_directory_is_refused(tmp_path, level):
    outside = tmp_path / "escaped"
    program = textwrap.dedent(f"""
        import os, shutil
        attempts = [
            lambda: open({str(outside)!r}, "w").write("x"),
            lambda: open("/tmp/rlgraph-sandbox-escape", "a"),
            lambda: os.open({str(outside)!r}, os.O_CREAT | os.O_WRONLY),
            lambda: os.mkdir({str(outside)!r}),
            lambda: os.symlink({str(tmp_path)!r}, "link"),
            lambda: os.rename("solution.py", {str(outside)!r}),
            lambda: shutil.copyfile("solution.py", {str(outside)!r}),
            lambda: os.chdir({str(tmp_path)!r}),
            lambda: os.remove({str(tmp_path / "kept")!r}),
        ]
        for attempt in attempts:
            try:
                attempt()
                print("done")
            except OSError as err:
                print(type(err).__name__)
    """)
    (tmp_path / "kept").write_text("still here")
    run = run_python(program, limits=SMALL)
    assert run.ok
    assert run.stdout.split() == ["PermissionError"] * 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept"]
    assert not os.path.exists("/tmp/rlgraph-sandbox-escape")
    left_nothing(run)


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


def connects(listener, limits: Limits):
    port = listener.getsockname()[1]
    program = textwrap.dedent(f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"leaked")
            print("connected")
        except OSError as err:
            print(type(err).__name__, err)
    """)
    run = run_python(program, limits=limits)
    with pytest.raises(BlockingIOError):  # nobody came
        listener.accept()
    left_nothing(run)
    return run


def test_a_socket_is_refused(listener, level):
    run = connects(listener, SMALL)
    assert run.ok and run.stdout.startswith("PermissionError")


@pytest.mark.skipif(not namespaces(), reason="this user cannot make network namespaces")
def test_without_the_guard_the_network_namespace_has_no_network(listener):
    run = connects(listener, UNGUARDED)
    assert run.ok and not run.stdout.startswith("connected")


def test_a_memory_hog_gets_a_memory_error():
    run = run_python("hog = bytearray(1 << 30)\n", limits=SMALL)
    assert run.status == "exited" and run.returncode == 1 and "MemoryError" in run.stderr
    left_nothing(run)


def test_huge_output_is_cut_and_the_program_stopped():
    run = run_python("while True:\n    print('x' * 10000)\n", limits=SMALL)
    assert run.status == "output_limit" and len(run.stdout) == SMALL.output_bytes
    left_nothing(run)
    big_file = run_python("open('big', 'wb').write(b'x' * (2 << 20))\n", limits=SMALL)
    assert big_file.returncode == 1 and "File too large" in big_file.stderr
    left_nothing(big_file)


@pytest.mark.skipif(not sandbox.parent_death_signal(), reason="no setpriv --pdeathsig here")
def test_the_program_dies_with_the_process_that_started_it(tmp_path, level):
    # a reward's process killed mid-row (its timeout_s): the program it was running must not run on
    program = "open('running', 'w').close()\nimport time\ntime.sleep(60)\n"
    without = "sandbox.namespaces = lambda: ()\n" if level == "no namespaces" else ""
    starter = subprocess.Popen(
        [sys.executable, "-c", f"from rlgraph.tasks import sandbox\n{without}"
         f"sandbox.run_python({program!r}, limits=sandbox.Limits(wall_s=60))"],
        env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert wait_until(lambda: list(tmp_path.glob("rlgraph-sandbox-*/running"))), "the program never started"
        assert processes_in(str(tmp_path))
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait()
    assert wait_until(lambda: not processes_in(str(tmp_path))), processes_in(str(tmp_path))


def wait_until(condition, patience_s: float = 60.0) -> bool:
    """Whether `condition()` holds within `patience_s` (an upper bound for a loaded machine, not a timing)."""
    deadline = time.monotonic() + patience_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_sandbox_that_cannot_start_is_an_error_not_a_failed_program(monkeypatch):
    # scored as a failure, it would give every sample 0 without a word
    broken = ("/bin/sh", "-c", "echo 'unshare: unshare failed: Operation not permitted' >&2; exit 1", "--")
    monkeypatch.setattr(sandbox, "namespaces", lambda: broken)
    with pytest.raises(SandboxError, match="could not start a program .exit code 1.: unshare: unshare failed"):
        run_python("print(1)", limits=SMALL)
