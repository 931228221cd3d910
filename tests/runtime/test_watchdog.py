"""Issue 18, item 6: a driver killed with `kill -9` leaves nothing behind (rlgraph/runtime/watchdog.py)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from rlgraph.runtime import watchdog

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# a stand-in driver: starts a child and a grandchild that would outlive it (as Ray's agents do), then waits
DRIVER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
    "time.sleep(300)"], start_new_session=True)
print("ready", flush=True)
time.sleep(300)
"""


def alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def started_driver():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
    assert driver.stdout.readline().strip() == "ready"
    deadline = time.time() + 20
    while len(watchdog.descendants(driver.pid)) < 2 and time.time() < deadline:
        time.sleep(0.1)
    return driver, watchdog.start(driver.pid)


def test_what_a_killed_driver_started_is_killed_within_seconds():
    driver, guard = started_driver()
    time.sleep(2 * watchdog.POLL_S + 0.5)  # the watchdog has seen the whole tree
    left = list(watchdog.descendants(driver.pid))
    assert len(left) == 2
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    deadline = time.time() + 5
    while any(alive(pid) for pid in left) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in left), "the driver's processes outlived it"
    guard.wait(timeout=5)


def test_a_stopped_watchdog_touches_nothing():
    driver, guard = started_driver()
    time.sleep(2 * watchdog.POLL_S + 0.5)
    left = list(watchdog.descendants(driver.pid))
    watchdog.stop(guard)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    time.sleep(2 * watchdog.POLL_S)
    try:
        assert all(alive(pid) for pid in left)
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)


def test_kill_descendants_kills_every_process_below_but_the_watchdog():
    driver, guard = started_driver()
    below = list(watchdog.descendants(driver.pid))
    assert len(below) == 2
    killer = subprocess.run([sys.executable, "-c", "from rlgraph.runtime import watchdog; import os; "
                             f"print(watchdog.kill_descendants({driver.pid}))"], capture_output=True, text=True)
    assert killer.stdout.strip() == "2", killer.stderr
    deadline = time.time() + 5
    while any(alive(pid) for pid in below) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in below)
    driver.kill()
    driver.wait()
    guard.wait(timeout=5)
