"""The floor under `rlgraph run`'s start-up on this machine: what no run can avoid.

    .venv/bin/python bench/startup_floor.py

Starts a private local Ray instance as `rlgraph run` does (loopback only, no dashboard, its logs off the
console), one actor on one CPU whose constructor imports torch and transformers, waits until the actor
answers, and stops Ray. `bench_startup.py` times it as a whole process, alternating with the command.
"""

from __future__ import annotations

import logging
import os


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

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        ray.get(ray.remote(num_cpus=1)(Host).remote().ready.remote())
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
