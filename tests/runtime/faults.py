"""A DeviceProcess that tests can slow down or make fail, so that production code carries no hook.

    with Started(plan, process_class=FaultyDeviceProcess) as started:
        ray.get(started.lowered.process_of("actor", 1).set_fault.remote("actor", "update", after_calls=1))

The hooks wrap a method of a role's worker inside the process, so the delay counts in the seconds the
call reports and the fault comes back as the WorkerError a real worker failure gives. Roles that share
one worker object (a rollout aliasing its policy) share its hooks.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import ray

from rlgraph.runtime.process import DeviceProcess

# Ray's worker processes need not have tests/ on sys.path: ship this module's classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class FaultyDeviceProcess(DeviceProcess):
    def set_delay(self, role: str, method: str, seconds: float) -> None:
        """Every later call of `role.method` sleeps `seconds` first (a stand-in for a slow call)."""

        def slow(original: Any, *args: Any, **kwargs: Any) -> Any:
            time.sleep(seconds)
            return original(*args, **kwargs)

        self._wrap(role, method, slow)

    def set_fault(self, role: str, method: str, after_calls: int = 0) -> None:
        """`role.method` runs `after_calls` more times, then raises RuntimeError on every later call."""
        calls = [0]

        def failing(original: Any, *args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if calls[0] > after_calls:
                raise RuntimeError(f"injected fault in {role}.{method} (a test hook)")
            return original(*args, **kwargs)

        self._wrap(role, method, failing)

    def _wrap(self, role: str, method: str, hook: Any) -> None:
        worker = self.workers[role]
        # An instance attribute shadows the class's method for this worker only.
        setattr(worker, method, functools.partial(hook, getattr(worker, method)))


class UnbuiltDeviceProcess(DeviceProcess):
    """Starts where the plan places it but builds no worker: for tests of placement alone (the hf engine, the
    one that runs on CPU, refuses a tp group when it builds, though the placement of one is what is tested)."""

    def _build(self, spec: Any) -> Any:
        return None
