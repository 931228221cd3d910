"""The floor under `rlgraph run`'s start-up on this machine: what no run can avoid.

    .venv/bin/python bench/startup_floor.py [--rlgraph-ray-settings]

Starts a private local Ray instance as `rlgraph run` does (loopback only, no dashboard, its logs off the
console), one actor on one CPU whose constructor imports torch and transformers, waits until the actor
answers, and stops Ray. `bench_startup.py` times it as a whole process, alternating with the command.

Ray starts with its defaults: the floor of issue 34. With --rlgraph-ray-settings it starts with the settings
rlgraph gives its local instance to start sooner (rlgraph.runtime.cluster.STARTUP_CONFIG): Ray's own start-up
at its quickest here, the floor with none of Ray's waits that rlgraph avoids counted as rlgraph's gain.
"""

from __future__ import annotations

import logging
import os
import sys


class Host:
    def __init__(self) -> None:
        import torch  # noqa: F401
        import transformers  # noqa: F401

    def ready(self) -> int:
        return os.getpid()


def main() -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # loopback only, as rlgraph's local instance
    import ray

    settings = {}
    if "--rlgraph-ray-settings" in sys.argv[1:]:
        from rlgraph.runtime.cluster import STARTUP_CONFIG

        settings = STARTUP_CONFIG
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
             _system_config=settings)
    try:
        ray.get(ray.remote(num_cpus=1)(Host).remote().ready.remote())
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
