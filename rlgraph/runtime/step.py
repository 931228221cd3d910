"""One training step as plain Python: the parts the Ray step driver and the in-process step share.

When every role of a plan lives in one process (a spec on one device, verl's hybrid engine), the driver
hands the whole step to that process in one Ray call (`LocalStep`, run by `DeviceProcess.run_step`):
rewards and transforms are pure torch on small tensors, so they run there too, and the step costs one
round trip instead of one per stage. The arguments each call gets, and the seeds, are the ones the Ray
driver gives (`call_arguments`), so both paths train bit for bit alike.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rlgraph.contract.methods import TRAINING_METHODS, RoleMethod, role_method
from rlgraph.contract.rollouts import DEMOS, filter_call, sft_call, trained_generate
from rlgraph.plan.model import CallPlan, Plan
from rlgraph.runtime.metrics import batch_metrics, timing_name

# Port meanings the batch metrics read (critic/score, critic/rewards, ...).
SEMANTIC_PORTS = ("scores", "rewards", "advantages", "returns", "values")
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


class LocalStep:
    """The plan's schedule run in the process that hosts every role. `call(role, method, *args, **kwargs)`
    runs a worker method and returns (result, seconds) (DeviceProcess.call: errors name the role);
    `driver_calls` runs rewards and transforms (rlgraph/runtime/transforms.py). `time_shared`: rollouts with an
    engine of their own beside the trained roles (StepDriver.time_shared): each takes its memory back for its
    generate call and gives it up after, as the Ray driver's wake/sleep do between stages."""

    def __init__(self, plan: Plan, call: Callable[..., tuple[Any, float]], driver_calls: Any,
                 time_shared: tuple[str, ...] | list[str] = ()) -> None:
        self.plan, self.call, self.driver_calls = plan, call, driver_calls
        self.time_shared = set(time_shared)
        self.seed = plan.train.seed
        self.trained = trained_generate(plan.calls)  # the rollout every other role call reads
        if filter_call(plan.calls) is not None:
            raise ValueError("a step with filter_groups draws more prompts while it runs: the driver runs it")
        # SFT (no generate): the role calls read the data's demonstrations
        self.supervised = self.trained is None and sft_call(plan.calls) is not None
        self.responses = DEMOS if self.supervised else self.trained.outputs[0][1]
        self.stages = [[plan.call(call_id) for call_id in stage.calls] for stage in plan.schedule]

    def run(self, step: int, prompts: list[dict[str, Any]], kl_state: dict[str, float]) -> tuple[StepResult, dict]:
        """One step; the adaptive KL coefficients come in and go out, so the driver keeps owning them."""
        self.driver_calls.load_state_dict(kl_state)
        result = StepResult()
        values: dict[str, Any] = step_fields(prompts, self.supervised)
        semantic: dict[str, Any] = {}
        for calls in self.stages:
            stage_start = time.perf_counter()
            for call in calls:
                if call.kind == "role":
                    self._role(call, step, values, result, semantic)
                else:
                    self._driver(call, step, values, result, semantic)
            result.stages.append(time.perf_counter() - stage_start)
        rollout = values[self.responses]
        result.metrics.update(rollout_metrics(rollout, semantic, step, self.supervised))
        if wants_samples(self.plan, step):
            result.samples = step_samples(rollout, semantic, step, self.seed)
        return result, self.driver_calls.state_dict()

    def _role(self, call: CallPlan, step: int, values: dict, result: StepResult, semantic: dict) -> None:
        entry = role_entry(call)
        ports = dict(call.inputs)
        if entry.dispatch == "each":  # generate, by the one replica
            args = [values[ports["prompts"]]]
            kwargs = step_arguments(entry, call, self.seed, step, 0, len(args[0]),
                                    stream=generate_stream(call, self.trained))
        else:
            args = [values[self.responses]] + [values[ports[p.name]] for p in entry.token_inputs if ports.get(p.name)]
            kwargs = step_arguments(entry, call, self.seed, step)
        awake = call.method == "generate" and call.target in self.time_shared
        if awake:
            self.call(call.target, "resume_memory")
        value, seconds = self.call(call.target, entry.worker_method, *args, **kwargs)
        if awake:
            self.call(call.target, "release_memory")
        add_time(result.timing, timing_name(call), seconds)
        if call.method in TRAINING_METHODS:
            result.metrics.update(value)
        for port, name in call.outputs:
            # generate's second output is the log-probs it kept, inside the rollout
            values[name] = value.sample_log_probs if call.method == "generate" and port == "log_prob" else value
            if port in SEMANTIC_PORTS:  # a critic's values, a reward model's or judge's scores
                semantic.setdefault(port, value)

    def _driver(self, call: CallPlan, step: int, values: dict, result: StepResult, semantic: dict) -> None:
        start = time.perf_counter()
        inputs = {port: values[name] for port, name in call.inputs}
        outputs, metrics = self.driver_calls.run(call, inputs, values[self.responses], f"step {step}")
        add_time(result.timing, timing_name(call), time.perf_counter() - start)
        result.metrics.update(metrics)
        for port, name in call.outputs:
            values[name] = outputs[port]
        result.metrics.update(record_driver_call(call, inputs, outputs, semantic, self.responses))
