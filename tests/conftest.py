"""Session-wide: the order in which the test files start.

`make test` runs the suite on two processes (pytest-xdist, `--dist loadfile --no-loadscope-reorder`: a file's
tests stay together, so a module's shared run or engine is made once, and files are handed out in this order).
A file that trains whole runs takes from seconds to two minutes; a unit-test file takes a second. Started in
collection order, a long file picked up last would end the session alone, so the longest files start first
(`LONGEST_FIRST`, measured on this project's 2-core machine: an order only, nothing is timed), then the other
whole-run files, then everything else.
"""

from __future__ import annotations

import os

# One torch thread in every test process and every process it starts (CLI runs, Ray's workers, reward processes),
# before anything imports torch: two test processes already share this project's 2 cores, and OpenMP's threads
# spin at each parallel region for a partner that is not running, so on a loaded machine two threads a process
# run several times slower than one (a small MLP's 3,000 steps beside two busy loops: 6.3 s on 2 threads, 1.7 s on 1).
os.environ["OMP_NUM_THREADS"] = "1"
# The Ray instances the tests start (tests/runtime/conftest.py, simulated clusters, `rlgraph run` in a subprocess)
# run their workers at the driver's priority, as the local instance of `rlgraph run` does (runtime/cluster.py
# WORKER_NICENESS): at Ray's default nice 15 a busy process beside the suite starves every run of it.
os.environ["RAY_worker_niceness"] = "0"

LONGEST_FIRST = (
    "tests/runtime/test_run.py",          # every CPU spec, two steps each (~200 s)
    "tests/runtime/test_chaos.py",        # bench/chaos.py: two runs with a Ray of their own, killed twice
    "tests/runtime/test_recipes.py",
    "tests/runtime/test_resume.py",
    "tests/workers/test_engine_vllm.py",  # one vLLM engine start-up, then its tests
    "tests/runtime/test_weight_sync.py",
    "tests/runtime/test_async.py",
    "tests/runtime/test_judge_run.py",    # five judged runs (~100 s)
    "tests/runtime/test_checkpoint_protocol.py",
    "tests/runtime/test_run_safety.py",
    "tests/runtime/test_multinode.py",    # a simulated 2-node cluster in a subprocess
    "tests/runtime/test_vllm_run.py",
    "tests/runtime/test_data_parallel.py",
    "tests/runtime/test_lora.py",
    "tests/runtime/test_cli.py",
    "tests/bench/test_bench_smoke.py",
)
WHOLE_RUNS = ("tests/runtime/", "tests/bench/")


def _start_rank(path: str) -> int:
    if path in LONGEST_FIRST:
        return LONGEST_FIRST.index(path)
    return len(LONGEST_FIRST) + (0 if path.startswith(WHOLE_RUNS) else 1)


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: _start_rank(item.nodeid.split("::", 1)[0]))  # stable: a file keeps its order
