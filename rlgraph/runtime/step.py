"""One training step: the Plan's schedule, one stage after another (`StepRunner`). Read one PPO step here.

    launch:  every generate call of the step starts (they need only its prompts), each replica its share of
             the prompts and its own seed stream; a rollout that shares devices with a trained role wakes first
    finish:  wait for the generation (and the weights it was made with), the rollout sleeps again; then
             each stage: its role calls start, its rewards and transforms run meanwhile, the stage is awaited;
             then the batch metrics of the trained rollout (and a few rows for samples.jsonl)

A role call is made as the role-method table says (rlgraph/contract/methods.py): `worker_method(rollout,
*token inputs, settings=..., **step arguments)`, dispatched by the entry's mode; what each of its outputs
means (generate's log-probs kept inside its rollout; the ports the batch metrics read) is said there too.

There are two ways to call a role, and one loop for both (`Roles`):

- through Ray (`rlgraph.runtime.driver.RayRoles`): actor method calls on the role's processes, batched one task
  per process and stage; values stay ObjectRefs between processes and the driver fetches only what it reads;
- in process (`InProcessRoles`): when every role of a plan lives in one process (a spec on one device, verl's
  hybrid engine) the driver hands the whole step to that process in one Ray call (`driver.RemoteStep`, run by
  `DeviceProcess.run_step`); rewards and transforms are pure torch on small tensors, so they run there too.

The same calls, arguments and seeds either way, so both train bit for bit alike (tests/runtime/test_step_runner.py).
The pieces around a step are their own modules: DAPO's sampling rounds (rounds.py) and a rollout's sleep and wake
(time_share.py), which the runner is given (driver.ray_step_runner), and the weight sync (weights.py) and policy
versions (versions.py), which the training loop (rlgraph/runtime/loop.py) runs between steps.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from rlgraph.contract.methods import METRIC_PORTS, TRAINING_METHODS, RoleMethod, role_method
from rlgraph.contract.rollouts import DEMOS, filter_call, generate_calls, sft_call, trained_generate
from rlgraph.plan.model import CallPlan, Plan, Stage
from rlgraph.runtime.errors import RunError
from rlgraph.runtime.metrics import batch_metrics, timing_name
from rlgraph.runtime.time_share import TimeShare

SEMANTIC_PORTS = METRIC_PORTS  # the ports the batch metrics read by their meaning (the role-method table's)
SAMPLES_PER_STEP = 4  # rows of a step written to samples.jsonl


def step_samples(rollout: Any, semantic: dict[str, Any], step: int, seed: int,
                 rows: int = SAMPLES_PER_STEP) -> list[dict[str, Any]]:
    """A few rows of the step as a person reads them: what the model was asked, what it answered, what the
    reward saw and made of it. Which rows: `pick_samples`, drawn anew each step from the run's seed."""
    episodes = getattr(rollout, "episodes", None)
    outcomes = [episode_outcome(e) for e in episodes] if episodes is not None else None
    picked = pick_samples(list(rollout.uid), outcomes, rows, random.Random(derive_seed(seed, step, "samples")))
    scores = semantic.get("scores", semantic.get("rewards"))  # (batch, R): a row's score sits on one column
    advantages = semantic.get("advantages")
    mask = rollout.loss_mask.float()
    samples = []
    for i in picked:
        score = float(scores[i].sum()) if scores is not None else math.nan
        sample = {"step": step, "uid": rollout.uid[i], "data_source": rollout.data_source[i],
                  "prompt": rollout.prompt_text[i], "response": rollout.response_text[i],
                  "ground_truth": rollout.ground_truth[i],
                  "score": None if math.isnan(score) else score,  # NaN: a judge's verdict that held no score
                  # the mean over the trained tokens: an outcome estimator's (GRPO, RLOO) one value per row
                  "advantage": float((advantages[i] * mask[i]).sum() / mask[i].sum().clamp(min=1))
                  if advantages is not None else None}
        if getattr(rollout, "episodes", None) is not None:  # turns, tool calls, a failure: what the episode did
            sample["episode"] = rollout.episodes[i].to_json()
        samples.append(sample)
    return samples


def pick_samples(uid: list[int], outcomes: list[str] | None, rows: int, rng: random.Random) -> list[int]:
    """`rows` row indices spread over the batch, in batch order: each of a different prompt (`uid`) while there
    are prompts left, and a random sample of its group (not always the first); first one row of each distinct outcome (an
    episode's, `episode_outcome`), so a rare one (the only tool call of the batch, a failed episode) is seen."""
    order = list(range(len(uid)))
    rng.shuffle(order)
    picked: list[int] = []
    prompts: set[int] = set()

    def take(candidates: list[int]) -> None:
        row = next((i for i in candidates if uid[i] not in prompts), candidates[0])  # a new prompt if one is left
        picked.append(row)
        prompts.add(uid[row])

    if outcomes is not None:  # the rarest first: its few rows decide its prompt, a common one can go elsewhere
        for outcome in sorted(dict.fromkeys(outcomes[i] for i in order), key=outcomes.count):
            take([i for i in order if outcomes[i] == outcome])
    while len(picked) < min(rows, len(order)):
        take([i for i in order if i not in picked])
    return sorted(picked)


def episode_outcome(episode: Any) -> str:
    """What a multi-turn sample's episode came to, as samples are told apart: failed, a tool error, a tool
    called, no tool called."""
    if episode.failed:
        return "failed"
    if episode.tool_errors:
        return "tool error"
    return "tool called" if episode.tool_calls else "no tool call"


def rollout_metrics(rollout: Any, semantic: dict[str, Any], step: int, supervised: bool) -> dict[str, float]:
    """The step's batch metrics (`batch_metrics`), how stale its samples are, and its tokens. Demonstrations
    (`supervised`) were sampled by no policy, and no response of theirs was cut at a generation limit."""
    metrics = batch_metrics(rollout, semantic)
    if supervised:
        metrics.pop("response_length/clip_ratio", None)
    else:
        metrics |= staleness_metrics(rollout, step)
    metrics["perf/total_num_tokens"] = int(rollout.attention_mask.sum())
    return metrics


def staleness_metrics(rollout: Any, step: int) -> dict[str, float]:
    """How many updates the weights that sampled step `step`'s rows lag behind those it trains (0: synchronous)."""
    lag = (step - 1 - rollout.policy_version).float()
    return {"async/staleness_mean": lag.mean().item(), "async/staleness_max": lag.max().item()}


def derive_seed(seed: int, step: int, purpose: str) -> int:
    """A seed for one purpose at one step: the same on every machine and on every resume."""
    digest = hashlib.sha256(f"rlgraph:{seed}:{step}:{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 2  # < 2**62


def step_arguments(entry: RoleMethod, call: CallPlan, seed: int, step: int, replica: int = 0,
                   rows_per_replica: int = 0, version: int | None = None, stream: str = "") -> dict[str, Any]:
    """The per-step keyword arguments of a role call (its settings, seeds, offsets), for one replica.
    `version`: the updates made to the weights a generate samples with (default step - 1: synchronous).
    `stream`: which of the step's generations this is (`generate_stream`), so each samples with its own seed."""
    made = {
        "seed": lambda: derive_seed(seed, step, f"generate{stream}/{replica}"),
        "uid_offset": lambda: replica * rows_per_replica,
        "policy_version": lambda: step - 1 if version is None else version,
        "shuffle_seed": lambda: derive_seed(seed, step, f"update/{call.target}"),
    }
    return {"settings": call.settings, **{name: made[name]() for name in entry.step_args}}


def generate_stream(call: CallPlan, trained: CallPlan, round_: int = 1) -> str:
    """The seed stream of a generate call: "" for the trained generate's first round (the seeds a step with one
    generate always had), its call id for a second generate call, and the round for a refill (filter_groups)."""
    return ("" if call.id == trained.id else f"/{call.id}") + (f"/round{round_}" if round_ > 1 else "")


def side_reward(call: CallPlan, responses_field: str) -> bool:
    """A reward on the responses of a second generate call (ReMax's greedy answers), not the trained ones."""
    return call.kind == "reward" and dict(call.inputs).get("responses", responses_field) != responses_field


def record_driver_call(call: CallPlan, inputs: dict[str, Any], outputs: dict[str, Any], semantic: dict[str, Any],
                       responses_field: str) -> dict[str, float]:
    """Keep a reward's or transform's tensors that the batch metrics read, by what they mean; returns the metrics
    of a reward on a second generate call (its mean score, `critic/<field>/mean`), which the batch metrics,
    about the trained rollout, leave out."""
    if side_reward(call, responses_field):
        return {f"critic/{name}/mean": outputs[port].sum(-1).float().mean().item() for port, name in call.outputs}
    for port, name in call.outputs:
        if port in SEMANTIC_PORTS:
            semantic[port] = outputs[port]
    for port, name in call.inputs:
        if port in SEMANTIC_PORTS:
            semantic.setdefault(port, inputs[port])
    return {}


def step_fields(prompts: list[dict[str, Any]], supervised: bool) -> dict[str, Any]:
    """A step's fields from the data: its rows as `prompts`, and for SFT the same rows as the Rollout of
    demonstrations (`demos`) the supervised call trains on."""
    from rlgraph.workers.batch import demonstration_rollout

    return {"prompts": prompts, DEMOS: demonstration_rollout(prompts)} if supervised else {"prompts": prompts}


def role_entry(call: CallPlan) -> RoleMethod:
    entry = role_method(call.role_kind, call.method)
    if entry is None:
        raise ValueError(f"the runtime has no implementation of `{call.label}` ({call.role_kind}.{call.method})")
    return entry


@dataclass
class StepResult:
    metrics: dict[str, float] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    stages: list[float] = field(default_factory=list)  # wall seconds of each stage of the schedule
    samples: list[dict[str, Any]] = field(default_factory=list)  # every train.samples_every steps: `step_samples`


def wants_samples(plan: Plan, step: int) -> bool:
    """Whether step `step` writes samples.jsonl rows: every train.samples_every steps of a step that generates
    (an SFT step's rows are the data's own demonstrations, not answers of the model)."""
    every = plan.train.samples_every if plan.train is not None else 0
    return bool(every) and step % every == 0 and trained_generate(plan.calls) is not None


def add_time(timing: dict[str, float], name: str, seconds: float) -> None:
    timing[name] = timing.get(name, 0.0) + seconds




def is_supervised(plan: Plan) -> bool:
    """A step that generates nothing and trains on the data's demonstrations (`demos -> actor.sft`)."""
    return trained_generate(plan.calls) is None and sft_call(plan.calls) is not None


# --- the two ways to call a role ---


class Pending(Protocol):
    """A role call started: its value (what the role returned; through Ray an ObjectRef) and its seconds."""

    def result(self) -> Any: ...

    def seconds(self) -> float: ...


class Roles(Protocol):
    """How the stage loop calls a role: through Ray (rlgraph.runtime.driver.RayRoles) or in process
    (`InProcessRoles`). `call` and `call_each` start a call as the role-method table's dispatch says (split the
    batch between the replicas / each replica its own arguments); `wait` awaits a stage's calls, `fetch` turns a
    value into a local one, `argument` is a step field as a call's argument; `send` and `settle` start a call
    on every replica of a role without waiting and wait for those later (a rollout's sleep and wake)."""

    def errors(self) -> contextlib.AbstractContextManager: ...

    def batch(self) -> contextlib.AbstractContextManager: ...

    def replicas(self, role: str) -> int: ...

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> Pending: ...

    def call_each(self, role: str, method: str, per_replica: list[tuple[tuple, dict]]) -> Pending: ...

    def wait(self, pendings: list[Pending]) -> None: ...

    def fetch(self, value: Any) -> Any: ...

    def argument(self, fields: Fields, name: str) -> Any: ...

    def send(self, role: str, method: str) -> list[Any]: ...

    def settle(self, sent: list[Any]) -> None: ...


@dataclass
class Done:
    """A role call made in process: done when it was started."""

    value: Any
    took: float

    def result(self) -> Any:
        return self.value

    def seconds(self) -> float:
        return self.took


class InProcessRoles:
    """Role calls in the process that hosts every role of the plan (one replica each). `call(role, method, *args,
    **kwargs)` runs a worker method and returns (result, seconds) (DeviceProcess.call: errors name the role)."""

    def __init__(self, call: Callable[..., tuple[Any, float]]) -> None:
        self._call = call

    def errors(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    batch = errors

    def replicas(self, role: str) -> int:
        return 1

    def call(self, role: str, method: str, *args: Any, **kwargs: Any) -> Done:
        return Done(*self._call(role, method, *args, **kwargs))

    def call_each(self, role: str, method: str, per_replica: list[tuple[tuple, dict]]) -> Done:
        (args, kwargs), = per_replica
        return self.call(role, method, *args, **kwargs)

    def wait(self, pendings: list[Pending]) -> None:
        pass

    def fetch(self, value: Any) -> Any:
        return value

    def argument(self, fields: Fields, name: str) -> Any:
        return fields.local(name)

    def send(self, role: str, method: str) -> list[Any]:
        self._call(role, method)
        return []

    def settle(self, sent: list[Any]) -> None:
        pass


# --- the step's values ---


class Fields:
    """The step's named values: what role calls returned (through Ray, ObjectRefs made in a process) and what the
    driver calls made. Each is fetched at most once (`local`) and, through Ray, put into the object store at most
    once (`arg`), however many calls read it. `semantic` keeps the tensors the batch metrics read, by their port
    (the role-method table's METRIC_PORTS); `within`: the fields that another one holds (generate's log-probs,
    kept inside its rollout: a port's `within` in the table)."""

    def __init__(self, values: dict[str, Any], roles: Roles) -> None:
        self.values = dict(values)
        self.roles = roles
        self.cache: dict[str, Any] = {}
        self.refs: dict[str, Any] = {}  # through Ray: a driver-made value put into the object store
        self.semantic: dict[str, Any] = {}
        self.within: dict[str, tuple[str, str]] = {}  # field -> (the field that holds it, its attribute there)

    def hold(self, name: str, holder: str, attribute: str) -> None:
        """`name` is the attribute `attribute` of the field `holder`: read from there when needed."""
        self.within[name] = (holder, attribute)

    def set(self, name: str, value: Any) -> None:
        self.values[name] = value
        self.cache.pop(name, None)

    def local(self, name: str) -> Any:
        if name in self.within:
            holder, attribute = self.within[name]
            return getattr(self.local(holder), attribute)
        if name not in self.cache:
            self.cache[name] = self.roles.fetch(self.values[name])
        return self.cache[name]

    def arg(self, name: str) -> Any:
        """`name` as a role call's argument. A field another one holds is None: it travels inside the rollout every
        role call gets anyway, and the calls that read it take it from there (`actor.update`'s `old_log_prob`, and
        its importance weights with `tis`)."""
        if name in self.within:
            return None
        return self.roles.argument(self, name)


@dataclass
class InFlight:
    """A step whose generation has been launched: the rest runs in `StepRunner.finish`."""

    step: int
    prompts: list[dict[str, Any]]
    version: int  # the policy version (updates made) of the weights it generates with
    fields: Fields | None
    # call id -> its generation, for every generate call of the step (empty when the whole step runs in one
    # process: driver.RemoteStep)
    generates: dict[str, Pending] = field(default_factory=dict)
    # waits for the weights sent to the rollout before its generation; the seconds the rollout spent on them
    # (rlgraph/runtime/weights.py), None when none were sent
    weights: Callable[[], float] | None = None
    loader_state: dict[str, Any] | None = None  # the data loader right after its batch was drawn (resume point)
    epoch: int = 0
    # draws the next batch of prompts for a refill (filter_groups), moving loader_state and epoch on with it
    draw: Callable[[], list[dict[str, Any]]] | None = None


# --- the step ---


class StepRunner:
    """The Plan's schedule for one training step, its role calls made through `roles`; `driver_calls` runs the
    rewards and transforms (rlgraph/runtime/transforms.py), `memory` wakes and puts to sleep a rollout with an
    engine of its own on a trained role's devices (rlgraph/runtime/time_share.py). A step with filter_groups (DAPO)
    runs the stages up to the filter round after round: `rounds` (rlgraph/runtime/rounds.py, `SamplingRounds`)."""

    def __init__(self, plan: Plan, roles: Roles, driver_calls: Any, memory: TimeShare | None = None,
                 rounds: Any = None) -> None:
        self.plan, self.roles, self.driver_calls = plan, roles, driver_calls
        self.memory = memory if memory is not None else TimeShare(roles, ())
        self.seed = plan.train.seed
        self.generate = trained_generate(plan.calls)  # the trained rollout's: what every other role call reads
        self.supervised = is_supervised(plan)  # SFT: the role calls read the data's demonstrations
        if self.generate is None and not self.supervised:
            raise ValueError("the step has no `generate` call")
        self.generates = generate_calls(plan.calls)  # all of them, launched together (they need only prompts)
        self.responses_field = DEMOS if self.supervised else self.generate.outputs[0][1]
        self.filter = filter_call(plan.calls)
        if self.filter is not None and (plan.train.staleness or len(self.generates) > 1):
            raise RunError("filter_groups refills only a synchronous step (train.staleness = 0) with one generate "
                           "call; `rlgraph check` the spec")
        if (self.filter is None) != (rounds is None):
            raise ValueError("a step with filter_groups runs its sampling rounds, and only such a step")
        self.rounds = rounds

    def run(self, step: int, prompts: list[dict[str, Any]], version: int | None = None) -> StepResult:
        """One synchronous step: generate with the weights the rollouts hold, then the rest of the schedule."""
        return self.finish(self.launch(step, prompts, version))

    def launch(self, step: int, prompts: list[dict[str, Any]], version: int | None = None) -> InFlight:
        """Start the step's generation with the weights the rollouts hold now, `version` (default step - 1:
        synchronous). Through Ray it returns at once."""
        version = step - 1 if version is None else version
        flight = InFlight(step, prompts, version, Fields(step_fields(prompts, self.supervised), self.roles))
        flight.generates = self.launch_generates(step, flight.fields, version)
        return flight

    def launch_generates(self, step: int, fields: Fields, version: int, round_: int = 1) -> dict[str, Pending]:
        self.memory.wake()
        with self.roles.errors(), self.roles.batch():
            return {call.id: self.launch_call(call, step, fields, version, round_) for call in self.generates}

    def wait_generates(self, generates: dict[str, Pending]) -> None:
        with self.roles.errors():
            self.roles.wait(list(generates.values()))
        self.memory.sleep()

    def finish(self, flight: InFlight) -> StepResult:
        """The rest of the step once its generation is done: every stage, the generate calls taken from the
        flight."""
        step, fields = flight.step, flight.fields
        result = StepResult()
        # the generation first: how long the trainer waited for its batch (0 when it was ready)
        clock = time.perf_counter()
        with self.roles.errors():
            self.roles.wait(list(flight.generates.values()))
            if flight.weights is not None:  # the weights it generated with arrived (a failed sync fails here)
                result.timing["wait_for_weights"] = flight.weights()
        result.timing["wait_for_rollout"] = time.perf_counter() - clock
        self.memory.sleep()
        stages = self.plan.schedule
        if self.rounds is not None:  # the stages up to the filter, round after round, then the rest on what it kept
            fields = self.rounds.run(self, flight, result)
            stages = [stage for stage in stages if stage.stage > self.filter.stage]
        for stage in stages:
            self.run_stage(stage, step, fields, flight.generates, result)
        self.batch_metrics(fields, step, result)
        return result

    def run_stage(self, stage: Stage, step: int, fields: Fields, generates: dict[str, Pending],
                  result: StepResult, round_: int = 1) -> None:
        """One stage of the schedule: its role calls start first (through Ray they run in their processes while
        the driver runs its part); then the stage is awaited as a whole. Generate calls are already started
        (`generates`)."""
        stage_start = time.perf_counter()
        calls = [self.plan.call(call_id) for call_id in stage.calls]
        with self.roles.errors(), self.roles.batch():  # through Ray: one actor task per process for the stage
            launched = [(call, generates[call.id] if call.id in generates else self.launch_call(call, step, fields))
                        for call in calls if call.kind == "role"]
        for call in calls:
            if call.kind != "role" and call.id != getattr(self.filter, "id", None):  # the rounds apply the filter
                self.run_on_driver(call, step, fields, result)
        with self.roles.errors():
            self.roles.wait([pending for _, pending in launched])
            for call, pending in launched:
                add_time(result.timing, timing_name(call), pending.seconds())
                value = pending.result()
                if call.method in TRAINING_METHODS:
                    result.metrics.update(self.roles.fetch(value))
                entry = role_entry(call)
                for port, name in call.outputs:
                    within = getattr(entry.output(port), "within", None)
                    if within:  # an output its first output holds (generate's log-probs, inside its rollout)
                        fields.hold(name, call.outputs[0][1], within)
                    else:
                        fields.set(name, value)
        if round_ == 1:
            result.stages.append(time.perf_counter() - stage_start)
        else:  # a refill round's stage adds to the same stage's seconds
            result.stages[stage.stage - 1] += time.perf_counter() - stage_start

    def run_on_driver(self, call: CallPlan, step: int, fields: Fields, result: StepResult) -> None:
        """A reward or transform, on the driver (in process: in the process of the roles)."""
        start = time.perf_counter()
        inputs = {port: fields.local(name) for port, name in call.inputs}
        outputs, metrics = self.driver_calls.run(call, inputs, fields.local(self.responses_field), f"step {step}")
        add_time(result.timing, timing_name(call), time.perf_counter() - start)
        result.metrics.update(metrics)
        for port, name in call.outputs:
            fields.set(name, outputs[port])
        result.metrics.update(record_driver_call(call, inputs, outputs, fields.semantic, self.responses_field))

    def batch_metrics(self, fields: Fields, step: int, result: StepResult) -> None:
        """The step's batch metrics, of the trained rollout, and every train.samples_every steps a few rows."""
        rollout = fields.local(self.responses_field)
        for call in self.plan.calls:  # a critic's values, a reward model's or judge's scores live in a process:
            for port, name in call.outputs if call.kind == "role" else ():  # fetched if no driver call read them
                if port in METRIC_PORTS and port not in fields.semantic:
                    fields.semantic[port] = fields.local(name)
        result.metrics.update(rollout_metrics(rollout, fields.semantic, step, self.supervised))
        if wants_samples(self.plan, step):
            result.samples = step_samples(rollout, fields.semantic, step, self.seed)

    def launch_call(self, call: CallPlan, step: int, fields: Fields, version: int | None = None,
                    round_: int = 1) -> Pending:
        """A role call, as the role-method table says: `worker_method(rollout, *token inputs, settings=...,
        **step arguments)` on the role's replicas, dispatched by the entry's mode."""
        entry = role_entry(call)
        ports = dict(call.inputs)
        if entry.dispatch == "each":  # generate: each replica its share of the prompts and its own seed
            prompts = fields.local(ports["prompts"])
            k = self.roles.replicas(call.target)
            if len(prompts) % k:
                raise RunError(f"a batch of {len(prompts)} prompts cannot be split evenly between the {k} replicas "
                               f"of `{call.target}`; make data.batch_size a multiple of {k}")
            size = len(prompts) // k
            stream = generate_stream(call, self.generate, round_)
            per_replica = [((prompts[i * size : (i + 1) * size],),
                            step_arguments(entry, call, self.seed, step, i, size, version=version, stream=stream))
                           for i in range(k)]
            return self.roles.call_each(call.target, entry.worker_method, per_replica)
        args = [fields.arg(self.responses_field)]
        args += [fields.arg(ports[port.name]) for port in entry.token_inputs if ports.get(port.name)]
        return self.roles.call(call.target, entry.worker_method, *args, **step_arguments(entry, call, self.seed, step))
