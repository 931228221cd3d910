"""Role calls through Ray: the step's way to call a role in other processes, and what Ray's errors mean.

`RayRoles` is the through-Ray side of the one stage loop (rlgraph/runtime/step.py, `Roles`): a stage's role calls
are actor method calls on the role's processes (ObjectRefs), sent one actor task per process (`StageBatch`), and
awaited together, failing fast; rewards and transforms run on the driver meanwhile. Batches stay ObjectRefs
between processes wherever that saves a copy: the Rollout that `generate` returns is handed as a ref to every
`log_prob`, `values` and `update`; the driver fetches only what its own calls read.

When every role lives in one process, the whole step goes to that process in one call instead (`RemoteStep`):
there the same stage loop calls the roles in process (`step.InProcessRoles`), with the same arguments and
seeds, one round trip.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import ray
import torch

from rlgraph.contract.rollouts import filter_call
from rlgraph.plan.model import Plan
from rlgraph.runtime.errors import ProcessDiedError, RunError
from rlgraph.runtime.group import Pending, StageBatch
from rlgraph.runtime.lowering import Lowered
from rlgraph.runtime.rounds import SamplingRounds
from rlgraph.runtime.step import Fields, InFlight, StepResult, StepRunner
from rlgraph.runtime.time_share import TimeShare, time_shared_rollouts

# Driver-made tensors up to this size go to a call by value (advantages, returns: a few KiB each).
_BY_VALUE_BYTES = 64 * 1024


@contextlib.contextmanager
def ray_errors(actor_names: Mapping[str, str]) -> Iterator[None]:
    """Ray's wrappers off: a worker's WorkerError as itself, a dead process as ProcessDiedError named by
    `actor_names` (Ray actor id hex -> what the process hosts: `Lowered.actor_names`)."""
    try:
        yield
    except ray.exceptions.RayTaskError as err:
        cause = getattr(err, "cause", None)
        if isinstance(cause, RunError):  # a WorkerError, or a reward's error in a step run in its process
            raise cause from None
        raise
    except (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError) as err:
        text = _first_line(str(err))
        actor_id = getattr(err, "actor_id", None)
        name = actor_names.get(actor_id.hex() if hasattr(actor_id, "hex") else str(actor_id or ""))
        if name:
            text = f"{name}: {text}"
        if "creation task" in text:
            raise ProcessDiedError(
                f"a worker process could not start: {text}. Every node needs the same rlgraph, torch and "
                "transformers as the driver (and rlgraph's files must not change while a run starts)."
            ) from None
        raise ProcessDiedError(
            f"a worker process died: {text}. It was most likely killed for memory (lower micro_batch or "
            "batch_size) or crashed in native code; the Ray logs of this session hold the details.",
            died=f"a worker process ended: {text}",
        ) from None


def _first_line(text: str) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)  # Ray colours its messages
    return next((line.strip()[:500] for line in text.splitlines() if line.strip()), text)


def wait_fail_fast(refs: list[Any]) -> None:
    """Wait for every ref, raising the first failure as soon as it is known: a replica that raises does
    not leave the driver waiting on its peers (which may be blocked in a collective with it)."""
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        ray.get(ready)


class RayRoles:
    """Role calls through Ray on the lowered plan's worker groups (rlgraph/runtime/group.py dispatches them)."""

    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered

    def errors(self) -> contextlib.AbstractContextManager:
        return ray_errors(self.lowered.actor_names)

    def batch(self) -> StageBatch:
        return StageBatch()  # the calls launched inside go out one actor task per process

    def replicas(self, role: str) -> int:
        return len(self.lowered.groups[role])

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> Pending:
        return self.lowered.groups[role].call(method, *args, **kwargs)

    def call_each(self, role: str, method: str, per_replica: list[tuple[tuple, dict]]) -> Pending:
        return self.lowered.groups[role].call_each(method, per_replica)

    def wait(self, pendings: list[Pending]) -> None:
        # The seconds refs finish with their task and carry its error, so waiting on them alone fails fast
        # without copying every result (the Rollout, log-probs) to the driver.
        wait_fail_fast([r for pending in pendings for r in pending.times])

    def fetch(self, value: Any) -> Any:
        if not isinstance(value, ray.ObjectRef):
            return value
        with self.errors():
            return ray.get(value)

    def argument(self, fields: Fields, name: str) -> Any:
        value = fields.values[name]
        if isinstance(value, ray.ObjectRef):
            return value
        if isinstance(value, torch.Tensor) and value.nbytes <= _BY_VALUE_BYTES:
            return value  # Ray copies a small argument into the task itself: cheaper than a put
        if name not in fields.refs:
            fields.refs[name] = ray.put(value)
        return fields.refs[name]

    def send(self, role: str, method: str) -> list[Any]:
        return self.lowered.groups[role].broadcast(method).refs()

    def settle(self, sent: list[Any]) -> None:
        wait_fail_fast(sent)


class RemoteStep:
    """Each step inside the plan's one process (every role there): one Ray call per step instead of one per
    stage (`DeviceProcess.run_step`, which runs the stage loop with in-process role calls). The adaptive KL
    coefficients go there and come back each step, so the driver keeps owning them."""

    def __init__(self, process: Any, lowered: Lowered, driver_calls: Any) -> None:
        self.process, self.lowered, self.driver_calls = process, lowered, driver_calls

    def launch(self, step: int, prompts: list[dict[str, Any]], version: int | None = None) -> InFlight:
        """Nothing starts yet: the whole step is one call, in `finish`."""
        return InFlight(step, prompts, step - 1 if version is None else version, None)

    def finish(self, flight: InFlight) -> StepResult:
        with ray_errors(self.lowered.actor_names):
            wait_for_weights = flight.weights() if flight.weights is not None else None
            result, kl_state = ray.get(self.process.run_step.remote(flight.step, flight.prompts, flight.version,
                                                                    self.driver_calls.state_dict()))
        self.driver_calls.load_state_dict(kl_state)
        if wait_for_weights is not None:
            result.timing["wait_for_weights"] = wait_for_weights
        return result

    def run(self, step: int, prompts: list[dict[str, Any]], version: int | None = None) -> StepResult:
        return self.finish(self.launch(step, prompts, version))


def remote_step(plan: Plan, lowered: Lowered, rewards: dict[str, Any], time_shared: list[str],
                driver_calls: Any) -> RemoteStep | None:
    """The step run inside the plan's one process, when it has one (every role there); None (and the per-stage
    path) if that process cannot take it: a step with filter_groups (a refill draws prompts, which only the
    driver has), or a reward function the process cannot import."""
    processes = list(lowered.processes.values())
    if len(processes) != 1 or filter_call(plan.calls) is not None:
        return None
    try:
        with ray_errors(lowered.actor_names):
            ray.get(processes[0].prepare_local_step.remote(plan, rewards, time_shared))
    except (RunError, ray.exceptions.RayError):  # e.g. a reward module only the driver's path has
        return None
    return RemoteStep(processes[0], lowered, driver_calls)


def ray_step_runner(plan: Plan, lowered: Lowered, specs: dict[str, Any], driver_calls: Any,
                    memory: TimeShare | None = None) -> StepRunner:
    """The step runner whose role calls go through Ray, composed: a time-shared rollout woken and put to sleep
    around its generate calls (`memory`; the training loop shares its own with validation), DAPO's sampling
    rounds when the schedule filters groups."""
    roles = RayRoles(lowered)
    filter_ = filter_call(plan.calls)
    return StepRunner(plan, roles, driver_calls,
                      memory if memory is not None else TimeShare(roles, time_shared_rollouts(plan, specs)),
                      SamplingRounds(filter_) if filter_ is not None else None)
