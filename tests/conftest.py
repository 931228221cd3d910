"""Session-wide: the order in which the test files start.

`make test` runs the suite on two processes (pytest-xdist, `--dist loadfile`: a file's tests stay together, so
a module's shared run is made once). A file that trains whole runs takes from seconds to two minutes; the unit
tests take a second. Started in collection order, a long file picked up last would end the session alone, so
the files that run their own Ray instance in a subprocess start first, then the other whole-run files, then
everything else.
"""

from __future__ import annotations

# the longest files, each a subprocess with a Ray of its own (about 1-2 minutes each on 2 cores)
OWN_RAY = ("tests/runtime/test_chaos.py", "tests/runtime/test_multinode.py", "tests/bench/test_bench_smoke.py",
           "tests/runtime/test_cli.py")
WHOLE_RUNS = ("tests/runtime/", "tests/bench/")


def _start_rank(path: str) -> int:
    if path in OWN_RAY:
        return 0
    return 1 if path.startswith(WHOLE_RUNS) else 2


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: _start_rank(item.nodeid.split("::", 1)[0]))  # stable: a file keeps its order
