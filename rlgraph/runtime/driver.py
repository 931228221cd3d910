"""The step driver: runs the Plan's schedule, one stage after another, for one training step.

A stage's calls start together and are awaited together: role calls are actor method calls on the
processes (ObjectRefs), rewards and transforms run on the driver meanwhile. Batches stay
ObjectRefs between processes wherever that saves a copy: the Rollout that `generate` returns is
handed as a ref to every `log_prob`, `values` and `update`; the driver fetches only what its own
calls need.

Sync edges run at the start of each step (verl syncs right after the update; the same thing seen
from the next generate). A rollout that shares its process with the policy syncs for free; one with
processes of its own gets the weights over a collective group, in buckets (rlgraph/runtime/weight_sync.py).

When every role lives in one process, the whole step goes to that process in one call instead
(`use_local_step`, rlgraph/runtime/step.py): the same calls, arguments and seeds, one round trip.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any

import ray
import torch

from rlgraph.plan.model import CallPlan, Plan
from rlgraph.runtime.errors import ProcessDiedError, RunError, WorkerError
from rlgraph.runtime.group import Pending, StageBatch
from rlgraph.runtime.lowering import Lowered
from rlgraph.runtime.metrics import batch_metrics, timing_name
from rlgraph.runtime.step import (SEMANTIC_PORTS, StepResult, add_time, derive_seed, role_entry,  # noqa: F401
                                  step_arguments, step_samples, wants_samples)
from rlgraph.runtime.roles import WorkerSpec, generate_call
from rlgraph.runtime.transforms import DriverCalls
from rlgraph.runtime.weight_sync import start_sync

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
            "batch_size) or crashed in native code; the Ray logs of this session hold the details."
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


class Fields:
    """The step's named values: ObjectRefs (made in a process) or local values (made on the driver).

    Each is fetched at most once (`local`) and put into the object store at most once (`arg`), however
    many calls read it. `semantic` keeps the tensors the batch metrics need, by what they mean.
    """

    def __init__(self, values: dict[str, Any], actor_names: Mapping[str, str]) -> None:
        self.values = dict(values)
        self.actor_names = actor_names
        self.cache: dict[str, Any] = {}
        self.refs: dict[str, ray.ObjectRef] = {}
        self.semantic: dict[str, Any] = {}
        self.sample_log_probs: dict[str, str] = {}  # field -> the rollout field whose sample_log_probs it is

    def set_sample_log_probs(self, name: str, rollout_field: str) -> None:
        """`name` is the log-probs kept inside the rollout `rollout_field`: read from there when needed."""
        self.sample_log_probs[name] = rollout_field

    def set(self, name: str, value: Any, port: str | None = None) -> None:
        self.values[name] = value
        if not isinstance(value, ray.ObjectRef):
            self.cache[name] = value
        if port in SEMANTIC_PORTS:
            self.semantic[port] = value

    def local(self, name: str) -> Any:
        if name in self.sample_log_probs:
            return self.local(self.sample_log_probs[name]).sample_log_probs
        if name not in self.cache:
            value = self.values[name]
            with ray_errors(self.actor_names):
                self.cache[name] = ray.get(value) if isinstance(value, ray.ObjectRef) else value
        return self.cache[name]

    def arg(self, name: str) -> Any:
        """`name` as a role call's argument. Log-probs kept by generate are None: they travel inside the
        rollout every role call gets anyway, and the one call `check` lets read them (`actor.update`'s
        `old_log_prob`) takes them from there."""
        if name in self.sample_log_probs:
            return None
        value = self.values[name]
        if isinstance(value, ray.ObjectRef):
            return value
        if isinstance(value, torch.Tensor) and value.nbytes <= _BY_VALUE_BYTES:
            return value  # Ray copies a small argument into the task itself: cheaper than a put
        if name not in self.refs:
            self.refs[name] = ray.put(value)
        return self.refs[name]


class StepDriver:
    def __init__(self, plan: Plan, lowered: Lowered, specs: dict[str, WorkerSpec], driver_calls: DriverCalls) -> None:
        self.plan = plan
        self.lowered = lowered
        self.specs = specs
        self.driver_calls = driver_calls
        self.seed = plan.train.seed
        generate = generate_call(plan)
        if generate is None:
            raise ValueError("the step has no `generate` call")
        self.generate = generate
        self.responses_field = generate.outputs[0][1]
        self.in_sync = False  # whether every rollout holds the weights of the latest update
        self.local: Any = None  # the process that runs whole steps (use_local_step), if any

    # --- weight sync ---

    def sync_weights(self) -> float:
        """Every sync edge, trained role -> rollout; seconds spent (0 for an in-place rollout, or when the
        rollouts already hold the weights of the latest update: validation syncs before the next step does).

        A rollout with processes of its own gets the weights over the edge's collective group, in buckets
        (rlgraph/runtime/weight_sync.py); the driver only starts the calls and waits on them."""
        if self.in_sync:
            return 0.0
        self.in_sync = True
        start = time.perf_counter()
        copies = [(source, target) for source, target in self.plan.syncs if self.specs[target].worker != "alias"]
        if not copies:
            return 0.0  # every rollout generates with its source's own module: nothing moves
        for source, target in copies:
            with ray_errors(self.lowered.actor_names):
                edge = self.lowered.sync_edges.get((source, target))
                if edge is not None:
                    wait_fail_fast(start_sync(self.lowered, edge))
                else:
                    self.sync_through_object_store(source, target)
        return time.perf_counter() - start

    def sync_through_object_store(self, source: str, target: str) -> None:
        """The whole state dict through Ray's object store: for a rollout that shares a process with its
        source without generating with its module (a process cannot be two ranks of the edge's group)."""
        # dispatch `one`: the replicas of a trained role hold the same weights, rank 0's are put into the
        # object store once; dispatch `all`: every rollout replica loads that one object
        state_ref = self.lowered.groups[source].one("state_dict").result()
        ray.get(self.lowered.groups[target].broadcast("load_state_dict", state_ref).refs())

    # --- one step ---

    def use_local_step(self, rewards: dict[str, Any]) -> bool:
        """Run each step inside the plan's one process, when it has one (every role there): one Ray call per
        step instead of one per stage. False (and the per-stage path) if that process cannot take it, e.g. a
        reward function it cannot import."""
        processes = list(self.lowered.processes.values())
        if len(processes) != 1:
            return False
        try:
            with ray_errors(self.lowered.actor_names):
                ray.get(processes[0].prepare_local_step.remote(self.plan, rewards))
        except (RunError, ray.exceptions.RayError):  # e.g. a reward module only the driver's path has
            return False
        self.local = processes[0]
        return True

    def run(self, step: int, prompts: list[dict[str, Any]]) -> StepResult:
        self.in_sync = False  # the step's updates change the weights
        if self.local is not None:
            with ray_errors(self.lowered.actor_names):
                result, kl_state = ray.get(self.local.run_step.remote(step, prompts, self.driver_calls.state_dict()))
            self.driver_calls.load_state_dict(kl_state)
            return result
        result = StepResult()
        fields = Fields({"prompts": prompts}, self.lowered.actor_names)
        for stage in self.plan.schedule:
            stage_start = time.perf_counter()
            calls = [self.plan.call(call_id) for call_id in stage.calls]
            # --- role calls start first and run in their processes while the driver does its part
            with ray_errors(self.lowered.actor_names), StageBatch():  # one actor task per process for the stage's calls
                launched = [(call, self._launch(call, step, fields)) for call in calls if call.kind == "role"]
            for call in calls:
                if call.kind != "role":
                    self._run_on_driver(call, step, fields, result)
            # --- then the stage is awaited as a whole
            with ray_errors(self.lowered.actor_names):
                # The seconds refs finish with their task and carry its error, so waiting on them alone
                # fails fast without copying every result (the Rollout, log-probs) to the driver.
                wait_fail_fast([r for _, p in launched for r in p.times])
                for call, pending in launched:
                    add_time(result.timing, timing_name(call), pending.seconds())
                    value = pending.result()
                    if call.method == "update":
                        result.metrics.update(ray.get(value) if isinstance(value, ray.ObjectRef) else value)
                    for port, name in call.outputs:
                        if call.method == "generate" and port == "log_prob":
                            fields.set_sample_log_probs(name, self.responses_field)
                        else:
                            fields.set(name, value)
            result.stages.append(time.perf_counter() - stage_start)

        rollout = fields.local(self.responses_field)
        for call in self.plan.calls:  # values live in a process: fetch them if no driver call did
            if call.kind == "role" and call.method == "values" and "values" not in fields.semantic:
                fields.semantic["values"] = fields.local(call.outputs[0][1])
        result.metrics.update(batch_metrics(rollout, fields.semantic))
        result.metrics["perf/total_num_tokens"] = int(rollout.attention_mask.sum())
        if wants_samples(self.plan, step):
            result.samples = step_samples(rollout, fields.semantic, step)
        return result

    def _run_on_driver(self, call: CallPlan, step: int, fields: Fields, result: StepResult) -> None:
        start = time.perf_counter()
        inputs = {port: fields.local(name) for port, name in call.inputs}
        outputs, metrics = self.driver_calls.run(call, inputs, fields.local(self.responses_field), f"step {step}")
        add_time(result.timing, timing_name(call), time.perf_counter() - start)
        result.metrics.update(metrics)
        for port, name in call.outputs:
            fields.set(name, outputs[port], port)
        for port, name in call.inputs:
            if port in SEMANTIC_PORTS:
                fields.semantic.setdefault(port, inputs[port])

    def _launch(self, call: CallPlan, step: int, fields: Fields) -> Pending:
        """A role call, as the role-method table says: `worker_method(rollout, *token inputs, settings=...,
        **step arguments)` on the role's replicas, dispatched by the entry's mode."""
        entry = role_entry(call)
        group = self.lowered.groups[call.target]
        ports = dict(call.inputs)
        if entry.dispatch == "each":  # generate: each replica its share of the prompts and its own seed
            prompts = fields.local(ports["prompts"])
            k = len(group)
            if len(prompts) % k:
                raise RunError(f"a batch of {len(prompts)} prompts cannot be split evenly between the {k} replicas "
                               f"of `{call.target}`; make data.batch_size a multiple of {k}")
            size = len(prompts) // k
            per_replica = [((prompts[i * size : (i + 1) * size],), step_arguments(entry, call, self.seed, step, i, size))
                           for i in range(k)]
            return group.call_each(entry.worker_method, per_replica)
        args = [fields.arg(self.responses_field)]
        args += [fields.arg(ports[port.name]) for port in entry.token_inputs if ports.get(port.name)]
        return group.call(entry.worker_method, *args, **step_arguments(entry, call, self.seed, step))
