"""The step driver: runs the Plan's schedule, one stage after another, for one training step.

A stage's calls start together and are awaited together: role calls are actor method calls on the
processes (ObjectRefs), rewards and transforms run on the driver meanwhile. Batches stay
ObjectRefs between processes wherever that saves a copy: the Rollout that `generate` returns is
handed as a ref to every `log_prob`, `values` and `update`; the driver fetches only what its own
calls need.

Sync edges run at the start of each step (verl syncs right after the update; the same thing seen
from the next generate). A rollout that shares its process with the policy syncs for free; one with
processes of its own gets the weights over a collective group, in buckets (rlgraph/runtime/weight_sync.py).

A step may generate more than once (ReMax's greedy baseline): every generate call is launched with the step
(they need only its prompts), each with its own seed stream; the role calls read the trained one's Rollout
(rlgraph/contract/rollouts.py). With `filter_groups` (DAPO's dynamic sampling) the stages before the filter
run round after round on freshly drawn prompts until the kept prompts fill the batch (`_rounds`); the rest of
the step runs once, on the kept rows.

When every role lives in one process, the whole step goes to that process in one call instead
(`use_local_step`, rlgraph/runtime/step.py): the same calls, arguments and seeds, one round trip.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
import torch

from rlgraph.plan.model import CallPlan, Plan, Stage
from rlgraph.runtime.errors import ProcessDiedError, RunError, WorkerError
from rlgraph.runtime.group import Pending, StageBatch
from rlgraph.runtime.lowering import Lowered
from rlgraph.runtime.metrics import batch_metrics, timing_name  # noqa: F401 (re-exported)
from rlgraph.algos.shaping import group_keep_mask
from rlgraph.contract.methods import TRAINING_METHODS
from rlgraph.contract.rollouts import DEMOS, filter_call, generate_calls, sft_call
from rlgraph.runtime.step import (SEMANTIC_PORTS, StepResult, add_time, derive_seed, generate_stream,  # noqa: F401
                                  record_driver_call, role_entry, rollout_metrics, staleness_metrics, step_arguments,
                                  step_fields, step_samples, wants_samples)
from rlgraph.workers import Rollout
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
        rollout every role call gets anyway, and the calls that read them take them from there
        (`actor.update`'s `old_log_prob`, and its importance weights with `tis`)."""
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


@dataclass
class InFlight:
    """A step whose generation has been launched: the rest runs in `StepDriver.finish`."""

    step: int
    prompts: list[dict[str, Any]]
    version: int  # the policy version (updates made) of the weights it generates with
    fields: Fields
    # call id -> its generation, for every generate call of the step (empty when the whole step runs in one
    # process: use_local_step)
    generates: dict[str, Pending] = field(default_factory=dict)
    syncs: list[tuple[list[Any], list[Any]]] = field(default_factory=list)  # syncs sent to the rollout before it
    loader_state: dict[str, Any] | None = None  # the data loader right after its batch was drawn (resume point)
    epoch: int = 0
    # draws the next batch of prompts for a refill (filter_groups), moving loader_state and epoch on with it
    draw: Callable[[], list[dict[str, Any]]] | None = None


def time_shared_rollouts(plan: Plan, specs: dict[str, WorkerSpec]) -> list[str]:
    """Rollouts with an engine of their own (not generating with a policy's module in place) in processes that
    also host a trained role: they hold device memory the role needs while it trains."""
    trained = {p.process for r in plan.roles if r.kind in ("actor", "critic") for p in plan.placements_of(r.name)}
    return [r.name for r in plan.roles if r.kind == "rollout" and specs[r.name].worker != "alias"
            and {p.process for p in plan.placements_of(r.name)} & trained]


class StepDriver:
    def __init__(self, plan: Plan, lowered: Lowered, specs: dict[str, WorkerSpec], driver_calls: DriverCalls) -> None:
        self.plan = plan
        self.lowered = lowered
        self.specs = specs
        self.driver_calls = driver_calls
        self.seed = plan.train.seed
        generate = generate_call(plan)
        self.supervised = generate is None and sft_call(plan.calls) is not None  # `demos -> actor.sft`
        if generate is None and not self.supervised:
            raise ValueError("the step has no `generate` call")
        self.generate = generate  # the trained rollout's: what every other role call reads (None: SFT)
        self.generates = generate_calls(plan.calls)  # all of them, launched together (they need only prompts)
        # the Rollout every role call reads: the trained generate's, or the data's demonstrations
        self.responses_field = DEMOS if self.supervised else generate.outputs[0][1]
        self.filter = filter_call(plan.calls)
        if self.filter is not None and (plan.train.staleness or len(self.generates) > 1):
            raise RunError("filter_groups refills only a synchronous step (train.staleness = 0) with one generate "
                           "call; `rlgraph check` the spec")
        self.in_sync = False  # whether every rollout holds the weights of the latest update
        self.trained_version = 0  # updates the trained roles have made (the step last finished)
        self.rollout_version = 0  # the trained version the rollouts were last synced to
        self.sync_refs: list[tuple[list[Any], list[Any]]] = []  # syncs started, not yet waited on
        self.time_shared = time_shared_rollouts(plan, specs)
        self.memory_refs: list[Any] = []  # release/resume calls sent, not yet waited on
        self.local: Any = None  # the process that runs whole steps (use_local_step), if any

    # --- a rollout's device memory, on devices it shares with a trained role ---

    def wake(self) -> None:
        """Before a generate: rollouts that gave their device memory back (`sleep`) take it again. Sent, not
        awaited: a process runs its calls in order, so the generate sent next finds the memory there."""
        self._memory("resume_memory")

    def sleep(self) -> None:
        """After a generate: a rollout with an engine of its own on a trained role's devices (SGLang colocated
        with the actor, verl's hybrid engine with a separate engine) frees its KV cache and weights while
        the role trains. Weights synced meanwhile are kept (the engine takes back only their memory)."""
        self._memory("release_memory")

    def _memory(self, method: str) -> None:
        if not self.time_shared:
            return
        with ray_errors(self.lowered.actor_names):
            wait_fail_fast(self.memory_refs)  # the previous one's error, if any, surfaces here
            self.memory_refs = [r for role in self.time_shared
                                for r in self.lowered.groups[role].broadcast(method).refs()]

    # --- weight sync ---

    def sync_weights(self, wait: bool = True) -> float:
        """Every sync edge, trained role -> rollout; seconds spent (0 for an in-place rollout, or when the
        rollouts already hold the weights of the latest update: validation syncs before the next step does).

        Each edge takes the path `rlgraph.runtime.weight_sync.sync_path` chose: a rollout with processes of its
        own gets the weights over the edge's collective group, one colocated with its source in each process
        that hosts a replica of it, in buckets either way; the driver only starts the calls and waits on them.
        With `wait`
        False (asynchronous training) it only starts them: the rollout loads them after the batch it is
        generating, and the next `launch` waits on them with its batch (`InFlight.syncs`)."""
        if self.in_sync:
            return 0.0
        self.in_sync = True
        self.rollout_version = self.trained_version
        start = time.perf_counter()
        copies = [(source, target) for source, target in self.plan.syncs if self.specs[target].worker != "alias"]
        if not copies:
            return 0.0  # every rollout generates with its source's own module: nothing moves
        for source, target in copies:
            with ray_errors(self.lowered.actor_names):
                edge = self.lowered.sync_edges.get((source, target))
                if edge is not None:
                    refs = start_sync(self.lowered, edge)
                    # the rollout's side of the sync: how long it waited for the weights and loaded them
                    self.sync_refs.append((refs, refs[-edge.receivers:]))
                else:
                    self.sync_through_object_store(source, target)
        if wait:
            self.wait_syncs()
        return time.perf_counter() - start

    def wait_syncs(self) -> float:
        """Wait for the syncs started so far; the longest seconds a rollout process spent in one."""
        refs, self.sync_refs = self.sync_refs, []
        with ray_errors(self.lowered.actor_names):
            wait_fail_fast([r for every, _ in refs for r in every])
            return max((float(ray.get(r)) for _, receives in refs for r in receives), default=0.0)

    def sync_through_object_store(self, source: str, target: str) -> None:
        """The whole state dict through Ray's object store: for a rollout with some replicas in processes of its
        source and some apart from it (path object_store: a process cannot be two ranks of the edge's group)."""
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
        if len(processes) != 1 or self.filter is not None:  # a refill draws prompts, which only the driver has
            return False
        try:
            with ray_errors(self.lowered.actor_names):
                ray.get(processes[0].prepare_local_step.remote(self.plan, rewards, self.time_shared))
        except (RunError, ray.exceptions.RayError):  # e.g. a reward module only the driver's path has
            return False
        self.local = processes[0]
        return True

    def run(self, step: int, prompts: list[dict[str, Any]]) -> StepResult:
        """One synchronous step: generate with the weights of step - 1, then the rest of the schedule."""
        return self.finish(self.launch(step, prompts))

    def launch(self, step: int, prompts: list[dict[str, Any]]) -> InFlight:
        """Start the step's generation with the weights the rollouts hold now (the syncs started so far go
        first: a process runs its calls in the order they were sent). Returns at once."""
        flight = InFlight(step, prompts, self.rollout_version, Fields(step_fields(prompts, self.supervised),
                                                                      self.lowered.actor_names))
        flight.syncs, self.sync_refs = self.sync_refs, []
        if self.local is None:
            self.wake()
            with ray_errors(self.lowered.actor_names), StageBatch():
                flight.generates = {call.id: self._launch(call, step, flight.fields, flight.version)
                                    for call in self.generates}
        return flight

    def finish(self, flight: InFlight) -> StepResult:
        """The rest of the step once its generation is done: every stage, the generate call taken from the
        flight. The trained roles' weights change: `sync_weights` moves them on."""
        step, fields = flight.step, flight.fields
        self.in_sync = False  # the step's updates change the weights
        self.trained_version = step
        if self.local is not None:
            with ray_errors(self.lowered.actor_names):
                result, kl_state = ray.get(self.local.run_step.remote(step, flight.prompts,
                                                                      self.driver_calls.state_dict()))
            self.driver_calls.load_state_dict(kl_state)
            return result
        result = StepResult()
        # the generation first: how long the trainer waited for its batch (0 when it was ready)
        clock = time.perf_counter()
        with ray_errors(self.lowered.actor_names):
            wait_fail_fast([t for pending in flight.generates.values() for t in pending.times])
            if flight.syncs:  # the weights it generated with arrived (a failed sync fails here, not silently)
                refs = [r for every, _ in flight.syncs for r in every]
                wait_fail_fast(refs)
                result.timing["wait_for_weights"] = max(float(ray.get(r)) for _, rs in flight.syncs for r in rs)
        result.timing["wait_for_rollout"] = time.perf_counter() - clock
        self.sleep()
        stages = self.plan.schedule
        if self.filter is not None:  # the stages up to the filter, round after round, then the rest on what it kept
            fields = self._rounds(flight, result)
            stages = [stage for stage in stages if stage.stage > self.filter.stage]
        for stage in stages:
            self._run_stage(stage, step, fields, flight.generates, result)

        rollout = fields.local(self.responses_field)
        for call in self.plan.calls:  # a critic's values, a reward model's or judge's scores live in a process:
            for port, name in call.outputs if call.kind == "role" else ():  # fetched if no driver call did
                if port in SEMANTIC_PORTS and port not in fields.semantic:
                    fields.semantic[port] = fields.local(name)
        result.metrics.update(rollout_metrics(rollout, fields.semantic, step, self.supervised))
        if wants_samples(self.plan, step):
            result.samples = step_samples(rollout, fields.semantic, step, self.seed)
        return result

    def _run_stage(self, stage: Stage, step: int, fields: Fields, generates: dict[str, Pending],
                   result: StepResult, round_: int = 1) -> None:
        """One stage of the schedule: its role calls start first and run in their processes while the driver
        runs its part; then the stage is awaited as a whole. Generate calls are already running (`generates`)."""
        stage_start = time.perf_counter()
        calls = [self.plan.call(call_id) for call_id in stage.calls]
        # --- role calls start first and run in their processes while the driver does its part
        with ray_errors(self.lowered.actor_names), StageBatch():  # one actor task per process for the stage's calls
            launched = [(call, generates[call.id] if call.id in generates else self._launch(call, step, fields))
                        for call in calls if call.kind == "role"]
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
                if call.method in TRAINING_METHODS:
                    result.metrics.update(ray.get(value) if isinstance(value, ray.ObjectRef) else value)
                for port, name in call.outputs:
                    if call.method == "generate" and port == "log_prob":
                        fields.set_sample_log_probs(name, call.outputs[0][1])
                    else:
                        fields.set(name, value)
        if round_ == 1:
            result.stages.append(time.perf_counter() - stage_start)
        else:  # a refill round's stage adds to the same stage's seconds
            result.stages[stage.stage - 1] += time.perf_counter() - stage_start

    def _run_on_driver(self, call: CallPlan, step: int, fields: Fields, result: StepResult) -> None:
        if call.id == getattr(self.filter, "id", None):
            return  # `_rounds` applies it
        start = time.perf_counter()
        inputs = {port: fields.local(name) for port, name in call.inputs}
        outputs, metrics = self.driver_calls.run(call, inputs, fields.local(self.responses_field), f"step {step}")
        add_time(result.timing, timing_name(call), time.perf_counter() - start)
        result.metrics.update(metrics)
        for port, name in call.outputs:
            fields.set(name, outputs[port])
        result.metrics.update(record_driver_call(call, inputs, outputs, fields.semantic, self.responses_field))

    # --- dynamic sampling (filter_groups) ---

    def _rounds(self, flight: InFlight, result: StepResult) -> Fields:
        """DAPO's dynamic sampling: run the stages before the filter on the step's prompts, keep the prompts whose
        samples did not all get the same value, and draw and generate more prompts (a round) until
        data.batch_size are kept, at most `max_rounds` rounds (verl: filter_groups.max_num_gen_batches; like
        verl, the run stops when they do not suffice). Returns the step's fields, of the first batch_size kept
        prompts (the rest of the last round is dropped, as verl drops it)."""
        step, want, max_rounds = flight.step, self.plan.data.batch_size, self.filter.settings.max_rounds
        before = [stage for stage in self.plan.schedule if stage.stage < self.filter.stage]
        fields, generates = flight.fields, flight.generates
        rounds: list[tuple[Fields, torch.Tensor, torch.Tensor | None]] = []  # fields, row kept, row unscored
        kept = generated = 0
        for round_ in itertools.count(1):
            if round_ > 1:  # a refill: more prompts, generated with the same weights
                fields = Fields({"prompts": flight.draw()}, self.lowered.actor_names)
                self.wake()
                with ray_errors(self.lowered.actor_names), StageBatch():
                    generates = {call.id: self._launch(call, step, fields, flight.version, round_)
                                 for call in self.generates}
                with ray_errors(self.lowered.actor_names):
                    wait_fail_fast([t for pending in generates.values() for t in pending.times])
                self.sleep()
            for stage in before:
                self._run_stage(stage, step, fields, generates, result, round_)
            rollout = fields.local(self.responses_field)
            # a judge's verdicts that held no score (NaN) count as 0 and leave their rows unscored, as in a step
            port, name = self.filter.inputs[0]
            inputs, _ = self.driver_calls.unjudged(self.filter, {port: fields.local(name)}, rollout)
            values = inputs[port].sum(-1)  # (batch,) the value each sample got
            keep = group_keep_mask(values, rollout.uid)
            unscored = self.driver_calls.unscored
            rounds.append((fields, keep, unscored[1] if unscored is not None and unscored[0] is rollout else None))
            generated += len(set(rollout.uid))
            kept += len({uid for uid, k in zip(rollout.uid, keep.tolist()) if k})
            if kept >= want:
                break
            if max_rounds and round_ >= max_rounds:
                raise RunError(
                    f"dynamic sampling (filter_groups) kept {kept} of the {generated} prompts of {round_} generation "
                    f"rounds at step {step}, fewer than data.batch_size = {want}: at most {max_rounds} rounds "
                    "(max_rounds) may fill a batch. The rest got the same score on every sample; the data are too "
                    "easy or too hard for the policy. Raise max_rounds (0: no bound) or lower data.batch_size.")
        result.metrics.update({
            "train/num_gen_batches": round_,  # verl's name: generation rounds of this step
            "train/num_gen_prompts": generated,
            "train/num_filtered_groups": generated - kept,  # prompts whose samples all got the same value
            "train/filtered_group_ratio": (generated - kept) / generated,
        })
        result.stages.append(0.0)  # the filter's own stage: its seconds are the rounds'
        return self._merge(rounds, want)

    def _merge(self, rounds: list[tuple[Fields, torch.Tensor, torch.Tensor | None]], want: int) -> Fields:
        """The kept rows of every round's fields, one round after another, the first `want` prompts; their
        uids renumbered so each prompt's rows stay one group."""
        parts, tensors, unscored_parts, prompts = [], {}, [], []
        for fields, keep, unscored in rounds:
            rollout = fields.local(self.responses_field)
            chosen: dict[int, int] = {}  # uid -> its new uid, in the order the rows come
            for uid, k in zip(rollout.uid, keep.tolist()):
                if k and uid not in chosen and len(prompts) + len(chosen) < want:
                    chosen[uid] = len(prompts) + len(chosen)
            if not chosen:
                continue
            rows = [i for i, uid in enumerate(rollout.uid) if uid in chosen]
            part = rollout.select(rows)
            part.uid = [chosen[uid] for uid in part.uid]
            parts.append(part)
            round_prompts = fields.local("prompts")
            prompts += [round_prompts[uid] for uid in chosen]
            for name in fields.values:
                if name not in ("prompts", self.responses_field) and name not in fields.sample_log_probs:
                    value = fields.local(name)
                    tensors.setdefault(name, []).append(value[rows] if isinstance(value, torch.Tensor) else value)
            unscored_parts.append(unscored[rows] if unscored is not None else torch.zeros(len(rows), dtype=torch.bool))
        rollout = Rollout.concat(parts)
        merged = Fields({"prompts": prompts}, self.lowered.actor_names)
        merged.set(self.responses_field, rollout)
        merged.sample_log_probs = dict(rounds[0][0].sample_log_probs)
        for name, values in tensors.items():
            if all(isinstance(v, torch.Tensor) for v in values):  # (rows, R) per round: right-padded to one R
                width = max(v.shape[1] for v in values) if values[0].dim() > 1 else None
                values = [v if width is None else torch.nn.functional.pad(v, (0, width - v.shape[1])) for v in values]
                merged.set(name, torch.cat(values))
            else:
                merged.set(name, values[0])
        unscored = torch.cat(unscored_parts)
        self.driver_calls.unscored = (rollout, unscored) if unscored.any() else None
        for call in self.plan.calls:  # the kept values that the batch metrics read, by their meaning
            if call.kind != "role" and call.stage < self.filter.stage:
                record_driver_call(call, {port: merged.local(name) for port, name in call.inputs},
                                   {port: merged.local(name) for port, name in call.outputs}, merged.semantic,
                                   self.responses_field)
        return merged

    def _launch(self, call: CallPlan, step: int, fields: Fields, version: int | None = None, round_: int = 1) -> Pending:
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
            stream = generate_stream(call, self.generate, round_)
            per_replica = [((prompts[i * size : (i + 1) * size],),
                            step_arguments(entry, call, self.seed, step, i, size, version=version, stream=stream))
                           for i in range(k)]
            return group.call_each(entry.worker_method, per_replica)
        args = [fields.arg(self.responses_field)]
        args += [fields.arg(ports[port.name]) for port in entry.token_inputs if ports.get(port.name)]
        return group.call(entry.worker_method, *args, **step_arguments(entry, call, self.seed, step))
