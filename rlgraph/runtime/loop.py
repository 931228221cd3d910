"""The training loop (`Trainer`), once run.py's `run_plan` has pre-flighted, started Ray and lowered the plan:

    for step in start+1 .. steps:
        sync weights (trained role -> rollout)
        run the step's schedule on a batch of prompts (step.py: StepRunner, or the whole step in the plan's
            one process, driver.RemoteStep)
            (asynchronously, train.staleness = k: the rollout generates up to k batches ahead of the
            update, with the weights it has; each sync goes to it as soon as an update ends)
        validate every k steps (and before the first step and after the last)
        checkpoint every k steps (and after the last)
        one line of metrics.jsonl

A run directory that holds a checkpoint is resumed from its latest one unless `resume=False`;
a resumed run ends with the same weights as one that never stopped (same seed, same machine).
"""

from __future__ import annotations

import collections
import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import ray
from rich.markup import escape

from rlgraph.plan.model import Plan
from rlgraph.runtime import checkpoint as ckpt
from rlgraph.runtime.console import RunConsole
from rlgraph.runtime.driver import RayRoles, ray_errors, ray_step_runner, remote_step
from rlgraph.runtime.errors import RunError
from rlgraph.runtime.evaluate import (demonstration_answers, demonstration_nll, validation_batches,  # noqa: F401
                                      validation_metrics, validation_reward, validation_sampling, validation_scores,
                                      validation_seed)
from rlgraph.runtime.lowering import Lowered
from rlgraph.runtime.metrics import MetricsWriter, cut_jsonl, episode_metrics, plot_curves
from rlgraph.runtime.preflight import Prepared
from rlgraph.runtime.process import rng_state, set_rng_state
from rlgraph.runtime.roles import WorkerSpec, generate_call
from rlgraph.runtime.signal_guard import SignalGuard
from rlgraph.runtime.signals import STOP, StopRequest
from rlgraph.runtime.step import InFlight, is_supervised
from rlgraph.runtime.time_share import TimeShare, time_shared_rollouts
from rlgraph.runtime.transforms import DriverCalls
from rlgraph.runtime.update_guard import UpdateGuard
from rlgraph.runtime.versions import PolicyVersions
from rlgraph.runtime.weights import WeightSync
from rlgraph.workers.batch import Rollout

TRAINED_KINDS = ("actor", "critic")

# torchdata's StatefulDataLoader calls a deprecated torch API on every new iterator; not the user's concern
warnings.filterwarnings("ignore", message=".*set_vital.*is deprecated")


@dataclass
class RunResult:
    run_dir: Path
    start_step: int  # the step the run started after (0, or the checkpoint it resumed from)
    steps: int  # the last step done
    wall_time_s: float
    val_start: float | None  # val/score/mean before training (from metrics.jsonl on a resume)
    val_end: float | None
    checkpoint: Path | None  # the newest checkpoint
    records: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def of(cls, run_dir: Path, start_step: int, steps: int, wall_time_s: float, checkpoint: Path | None,
           records: list[dict[str, Any]]) -> RunResult:
        return cls(run_dir, start_step, steps, wall_time_s, _first(records, "val/score/mean"),
                   _last(records, "val/score/mean"), checkpoint, records)


def with_run_length(plan: Plan, prompts: int) -> Plan:
    """`plan` with train.steps counted from train.epochs over `prompts` training prompts (prompts // batch_size
    steps an epoch: the loader drops the last short batch, as verl's does) and every optim.warmup_ratio turned
    into warmup_steps = int(ratio x steps) (verl's lr_warmup_steps_ratio); a cosine schedule decays over them."""
    steps = plan.train.epochs * (prompts // plan.data.batch_size)
    roles = []
    for role in plan.roles:
        optim = getattr(role.settings, "optim", None)
        if optim is not None:
            warmup = int(optim.warmup_ratio * steps) if optim.warmup_ratio is not None else optim.warmup_steps
            optim = dataclasses.replace(optim, warmup_steps=warmup,
                                        decay_steps=steps if optim.schedule == "cosine" else None)
            role = dataclasses.replace(role, settings=dataclasses.replace(role.settings, optim=optim))
        roles.append(role)
    return dataclasses.replace(plan, train=dataclasses.replace(plan.train, steps=steps), roles=roles)


class Trainer:
    def __init__(self, plan: Plan, lowered: Lowered, specs: dict[str, WorkerSpec], prepared: Prepared,
                 run_dir: Path, console: RunConsole) -> None:
        from rlgraph.data import make_dataloader

        self.plan, self.lowered, self.specs, self.prepared = plan, lowered, specs, prepared
        self.run_dir, self.console = run_dir, console
        self.train_cfg = plan.train
        self.seed = plan.train.seed
        self.driver_calls = DriverCalls(plan, prepared.rewards)
        self.update_guard = UpdateGuard()  # warns on skipped optimizer updates, fails a run that makes none
        self.signal_guard = SignalGuard()  # warns on steps in a row whose groups all scored alike
        # the pieces of a step, composed: role calls through Ray, a rollout's sleep and wake, the weight sync
        # and the policy versions it moves on, and the step runner (in the plan's one process when it has one)
        roles = RayRoles(lowered)
        time_shared = time_shared_rollouts(plan, specs)
        self.memory = TimeShare(roles, time_shared)
        self.versions = PolicyVersions()
        self.weights = WeightSync(plan, lowered, specs, self.versions)
        self.supervised = is_supervised(plan)
        self.runner: Any = remote_step(plan, lowered, prepared.rewards, time_shared, self.driver_calls)
        if self.runner is not None:
            console.log("every role lives in one process: each step runs there in one call")
        else:
            self.runner = ray_step_runner(plan, lowered, specs, self.driver_calls, self.memory)
        self.loader = make_dataloader(prepared.train, plan.data.batch_size, self.seed,
                                      shuffle=plan.data.shuffle)
        self.step = 0
        self.resumed = False
        # validation generates through the rollout role's engine, as the step does (SFT: with the actor's module)
        generate = generate_call(plan)
        self.rollout_role = generate.target if generate is not None else None
        self.val_reward_name = validation_reward(plan)
        self.val_reward = prepared.rewards[self.val_reward_name] if self.val_reward_name else None
        self.n_devices = sum(p.nodes * p.devices_per_node for p in plan.pools
                             if any(pl.pool == p.name for pl in plan.placements))

    # --- resume ---

    def restore(self, checkpoint: ckpt.Checkpoint) -> None:
        state = checkpoint.trainer_state()
        self.step = int(state["step"])
        try:
            self.loader.load_state_dict(state["dataloader"])
        except ValueError as err:  # another data set, filter or seed than the checkpoint's
            raise RunError(f"cannot resume from {checkpoint.path}: {err}; or pass --no-resume to start over") from None
        self.driver_calls.load_state_dict(state.get("kl", {}))
        set_rng_state(checkpoint.load(checkpoint.rng_file("driver")))
        refs = []
        for process, handle in self.lowered.processes.items():
            file = checkpoint.rng_file(process)
            if file.is_file():
                refs.append(handle.set_rng_state.remote(checkpoint.load(file)))
        for role in self._trained_roles():
            if not checkpoint.optimizer_file(role).is_file():  # a role added since (see run_plan)
                continue
            for member in self.lowered.groups[role].members:
                refs.append(member.handle.load_optimizer.remote(role, str(checkpoint.optimizer_file(role))))
        with ray_errors(self.lowered.actor_names):
            ray.get(refs)
        self.resumed = True

    # --- the loop ---

    def fit(self, started: float, startup: dict[str, float] | None = None, stop: StopRequest | None = None,
            on_step: Callable[[dict[str, Any]], Any] | None = None) -> RunResult:
        """Train to train.steps. `startup` (startup_s/*: preflight, ray, placement, workers, data_parallel,
        restore, total) goes into the first record this call writes. A `stop` request ends the loop after the
        step in progress, checkpointed (raises signals.Stopped). `on_step` gets a copy of each step's record
        (before its checkpoint is written); when it returns signals.STOP the loop checkpoints that step and
        returns."""
        startup = dict(startup or {})
        total = self.train_cfg.steps
        validate_every = self.train_cfg.validate_every
        checkpoint_every = self.train_cfg.checkpoint_every
        keep = self.train_cfg.keep_checkpoints
        start_step = self.step
        writer = MetricsWriter(self.run_dir, keep_up_to_step=start_step if self.resumed else None,
                               loggers=tuple(self.plan.train.loggers))
        cut_samples(self.run_dir / SAMPLES_FILE, keep_up_to_step=start_step if self.resumed else None)
        last_val = _last(writer.records, "val/score/mean")
        last_checkpoint = ckpt.latest_checkpoint(self.run_dir)

        if start_step == 0:
            t = time.perf_counter()
            val = self.validate(0)
            testing = {"timing_s/testing": time.perf_counter() - t} if val else {}
            writer.write({"training/global_step": 0, **val, **testing, **startup})
            startup = {}
            last_val = val.get("val/score/mean", last_val)
        self.console.start(total, start_step)
        self.console.update(start_step, _last(writer.records, "critic/score/mean"), last_val)
        data = iter(self.loader)
        stop = stop or StopRequest()
        stop.deferring = True  # from here a signal lets the step in progress finish
        # Generations launched ahead of the update that trains on them: at most `staleness` besides the step's
        # own. With staleness 0 each step syncs, generates and trains in turn (the synchronous loop).
        staleness = self.train_cfg.staleness
        in_flight: collections.deque[InFlight] = collections.deque()
        self.versions.start(start_step)
        loader_state = self.loader.state_dict()  # the loader as of the last batch trained on
        try:
            while self.step < total:
                if stop.requested and self.step in (start_step, last_checkpoint and last_checkpoint.step):
                    raise stop.stopped(self.step, last_checkpoint.path if last_checkpoint else None)
                self.step += 1
                step = self.step
                # --- one step
                t0 = time.perf_counter()
                sync = 0.0
                while len(in_flight) <= staleness and step + len(in_flight) <= total:
                    # the weights of the last update go to the rollout first; asynchronously it loads them
                    # after the batch it is generating, and the driver does not wait
                    sync += self.weights.sync(wait=staleness == 0)
                    in_flight.append(self._launch(step + len(in_flight), data))
                flight = in_flight.popleft()
                result = self.runner.finish(flight)
                self.versions.updated(step)  # the step's updates changed the weights: the next sync moves them on
                loader_state = flight.loader_state
                step_time = time.perf_counter() - t0
                record: dict[str, Any] = {"training/global_step": step, "training/epoch": flight.epoch}
                record.update(result.metrics)
                record.update({f"timing_s/{name}": seconds for name, seconds in result.timing.items()})
                record["timing_s/sync"] = sync  # put once + every rollout replica loads (asynchronous: started)
                record["timing_s/update_weights"] = sync  # verl's name for the same thing
                record["timing_s/step"] = step_time
                # the two loops of asynchronous training (synchronously they run one after the other): the
                # rollout's generate and its wait for weights; the trainer's step less its wait for the batch
                record["timing_s/rollout_loop"] = result.timing.get("gen", 0.0) + result.timing.get("wait_for_weights", 0.0)
                record["timing_s/trainer_loop"] = step_time - result.timing.get("wait_for_rollout", 0.0)
                record.update(startup)  # a resumed run's first record: how long it took to start again
                startup = {}
                record["perf/time_per_step"] = step_time
                record["perf/throughput"] = result.metrics["perf/total_num_tokens"] / (step_time * max(self.n_devices, 1))
                # --- validate, checkpoint
                if step == total or (validate_every and step % validate_every == 0):
                    t = time.perf_counter()
                    val = self.validate(step)
                    record.update(val)
                    record["timing_s/testing"] = time.perf_counter() - t
                    last_val = val.get("val/score/mean", last_val)
                stopping = on_step is not None and on_step(dict(record)) is STOP
                staged = None
                if stopping or stop.requested or step == total or (checkpoint_every and step % checkpoint_every == 0):
                    t = time.perf_counter()
                    staged = self.stage_checkpoint(step, record, loader_state)
                    record["timing_s/save_checkpoint"] = time.perf_counter() - t
                writer.write(record)  # on disk before its checkpoint is published: a resume from it has the line
                if staged is not None:
                    last_checkpoint = staged.publish(keep)
                if result.samples:
                    write_samples(self.run_dir / SAMPLES_FILE, result.samples)
                    self.console.sample(result.samples[0])
                self.console.step_done(step, record, last_val)
                self.update_guard.observe(step, record, self.console.log)
                self.signal_guard.observe(step, record, self.console.log)
                if stopping:
                    break
        finally:
            self.console.stop()
            writer.close()

        self.update_guard.finish()
        records = writer.records
        wall = time.perf_counter() - started
        try:
            plot_curves(records, self.run_dir / "curves.png")
        except RunError as err:  # the run is trained and checkpointed: a picture it cannot write is not a failure
            self.console.log(f"[yellow]warning[/]: {escape(str(err))}; curves.png not written")
        result = RunResult.of(self.run_dir, start_step, self.step, wall,
                              last_checkpoint.path if last_checkpoint else None, records)
        self._summary(result)
        return result

    # --- validation ---

    def validate(self, step: int) -> dict[str, float]:
        """val/score/mean: one answer per prompt (greedy, unless the rollout's `val { temperature }` with n = 1
        samples it), scored by the step's reward; with n > 1 (`val { n }` or train.val_samples) also
        val/score/mean@n and best@n of n answers per prompt sampled at the validation temperature."""
        if self.supervised and self.prepared.val is not None:
            return self.validate_demonstrations(step)
        if self.prepared.val is None or self.val_reward is None:
            return {}
        items = list(self.prepared.val)
        # A rollout with weights of its own holds those of the last sync, from before this step's update:
        # sync first (a no-op for a rollout that generates with the policy's module in place).
        self.weights.sync()
        group = self.lowered.groups[self.rollout_role]  # dispatch `one`: rank 0 generates for validation
        # the step's generate settings (its environment, its max_new_tokens) with the validation sampling, in the
        # batches and with the seeds that `rlgraph eval` uses too (rlgraph/runtime/evaluate.py)
        one, sampled_settings = validation_sampling(generate_call(self.plan).settings,
                                                    self.plan.role(self.rollout_role).settings.val)

        def generate(settings: Any) -> list[Any]:
            return [group.one("generate", batch, settings=settings,
                              seed=validation_seed(self.seed, step, start, settings)).result()
                    for start, batch in validation_batches(items, self.plan.data.val_batch_size)]

        self.memory.wake()
        greedy = generate(one)
        sampled = generate(sampled_settings) if sampled_settings else []
        self.memory.sleep()
        with ray_errors(self.lowered.actor_names):
            greedy_rollouts = ray.get(greedy)
            sampled_rollouts = ray.get(sampled)
        when = f"validation at step {step}"
        scores = validation_scores(self.val_reward_name, self.val_reward, greedy_rollouts, when)  # (prompts, 1)
        sampled_scores = validation_scores(self.val_reward_name, self.val_reward, sampled_rollouts, when,
                                           sampled_settings.n) if sampled_settings else None  # (prompts, n)
        metrics = validation_metrics(scores, sampled_scores)
        if greedy_rollouts and greedy_rollouts[0].episodes is not None:  # how the greedy answers used the tools
            metrics |= episode_metrics(Rollout.concat(greedy_rollouts), prefix="val/")
        return metrics

    def validate_demonstrations(self, step: int) -> dict[str, float]:
        """A supervised run's validation, with the trained model itself: val/sft_loss, the NLL of the validation
        demonstrations' responses (verl's SFT trainer's val loss); with a rule reward declared, val/score/mean,
        the reward of its greedy answers to their prompts (what the RL stage after it starts from)."""
        from rlgraph.contract.rollouts import sft_call
        from rlgraph.contract.settings import LogProbSettings
        from rlgraph.workers.batch import demonstration_rollout

        sft = sft_call(self.plan.calls)
        group = self.lowered.groups[sft.target]  # dispatch `one`: rank 0 scores and answers for validation
        batches = validation_batches(list(self.prepared.val), self.plan.data.val_batch_size)
        demos = [demonstration_rollout(batch) for _, batch in batches]
        scoring = LogProbSettings(temperature=1.0, micro_batch=sft.settings.micro_batch,
                                  micro_batch_tokens=sft.settings.micro_batch_tokens)
        log_probs = [group.one("log_prob", rollout, settings=scoring).result() for rollout in demos]
        answers = demonstration_answers(self.plan.data.max_response_length)
        # scored only where every row has a ground truth (demonstrations need none)
        scored = self.val_reward is not None and all(item["ground_truth"] is not None for item in self.prepared.val)
        greedy = [group.one("generate", batch, settings=answers, seed=0).result() for _, batch in batches] if scored else []
        with ray_errors(self.lowered.actor_names):
            metrics = {"val/sft_loss": demonstration_nll(ray.get(log_probs), demos)}
            greedy_rollouts = ray.get(greedy)
        if greedy_rollouts:
            scores = validation_scores(self.val_reward_name, self.val_reward, greedy_rollouts,
                                       f"validation at step {step}")  # (prompts, 1)
            metrics |= validation_metrics(scores, None)
        return metrics

    # --- checkpoints ---

    def _trained_roles(self) -> list[str]:
        return [r.name for r in self.plan.roles if r.kind in TRAINED_KINDS]

    def _launch(self, step: int, data: Any) -> InFlight:
        """Draw step `step`'s prompts and start generating them with the rollout's weights of now."""
        def draw() -> list[dict[str, Any]]:
            batch = next(data)
            return [dict(zip(batch, values)) for values in zip(*batch.values())]

        # the syncs started so far go first: a process runs its calls in the order they were sent
        weights = self.weights.started()
        flight = self.runner.launch(step, draw(), self.versions.rollout)
        flight.weights = weights
        flight.loader_state, flight.epoch = self.loader.state_dict(), self.loader.epoch

        def refill() -> list[dict[str, Any]]:
            # a refill's prompts count as drawn by this step: a resume from its checkpoint draws after them
            prompts = draw()
            flight.loader_state, flight.epoch = self.loader.state_dict(), self.loader.epoch
            return prompts

        flight.draw = refill
        return flight

    def save(self, step: int, keep: int, record: dict[str, Any]) -> ckpt.Checkpoint:
        return self.stage_checkpoint(step, record).publish(keep)

    def stage_checkpoint(self, step: int, record: dict[str, Any],
                         loader_state: dict[str, Any] | None = None) -> ckpt.CheckpointWriter:
        """Step `step`'s checkpoint, written and sealed but not yet published (`.publish(keep)` does).

        `loader_state`: the data loader right after step `step`'s batch was drawn (default: as it is now).
        Asynchronously, the batches generated ahead are not in the checkpoint: a resume draws and generates
        them again, with the checkpoint's weights, so no prompt is lost or trained on twice."""
        writer = ckpt.CheckpointWriter(self.run_dir, step)
        try:
            refs = []
            for role in self._trained_roles():
                # dispatch `one`: the replicas of a trained role hold the same weights and optimizer state
                # (sharded: every replica gathers, rank 0 writes)
                for member in self.lowered.groups[role].members_for_one():
                    refs.append(member.handle.save.remote(role, str(writer.staging.model_dir(role)),
                                                          str(writer.staging.optimizer_file(role))))
            rng_refs = {process: handle.rng_state.remote() for process, handle in self.lowered.processes.items()}
            with ray_errors(self.lowered.actor_names):
                ray.get(refs)
                for process, ref in rng_refs.items():
                    writer.save_tensors(writer.staging.rng_file(process).relative_to(writer.tmp), ray.get(ref))
            writer.save_tensors(writer.staging.rng_file("driver").relative_to(writer.tmp), rng_state())
            writer.save_tensors(ckpt.TRAINER_STATE, {
                "step": step,
                "seed": self.seed,
                "dataloader": loader_state if loader_state is not None else self.loader.state_dict(),
                "kl": self.driver_calls.state_dict(),
            })
            writer.save_json(ckpt.PLAN, self.plan.to_dict())  # a resume compares its plan with this one
            writer.save_json("meta.json", {
                "step": step,
                "spec": self.plan.spec,
                "saved_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                "models": {role: f"{role}/" for role in self._trained_roles()},
                "metrics": {k: v for k, v in record.items() if isinstance(v, (int, float))},
            })
            writer.seal()
            return writer
        except BaseException:
            writer.abandon()
            raise

    def _summary(self, result: RunResult) -> None:
        def fmt(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        records = result.records
        rows = [
            ("val accuracy (val/score/mean)", fmt(result.val_start), fmt(result.val_end)),
            ("reward (critic/score/mean)", fmt(_first(records, "critic/score/mean")), fmt(_last(records, "critic/score/mean"))),
            *[(label, fmt(_first(records, key)), fmt(_last(records, key))) for label, key in SUPERVISED_ROWS
              if _first(records, key) is not None],
            ("steps", str(result.start_step), str(result.steps)),
            ("wall time", "", f"{result.wall_time_s:.1f} s"),
        ]
        times = [r["perf/time_per_step"] for r in records if r.get("perf/time_per_step") is not None]
        if times:
            rows.append(("time per step (mean)", "", f"{sum(times) / len(times):.3f} s"))
        self.console.summary(rows, title=f"run {result.run_dir}")
        if result.checkpoint:
            self.console.log(f"checkpoint: {result.checkpoint}")
        self.console.log(f"metrics: {result.run_dir / 'metrics.jsonl'}; curves: {result.run_dir / 'curves.png'}")


SAMPLES_FILE = "samples.jsonl"
# a supervised or distilling run's rows of the summary table, when its records have them
SUPERVISED_ROWS = (("val loss (val/sft_loss)", "val/sft_loss"), ("train loss (actor/sft_loss)", "actor/sft_loss"),
                   ("divergence from the teacher (actor/distill_loss)", "actor/distill_loss"))


def write_samples(path: Path, samples: list[dict[str, Any]]) -> None:
    """One JSON line per sample, appended: a person reads the file as the run goes."""
    import json

    with open(path, "a", encoding="utf-8") as file:
        for sample in samples:
            # a ground truth or data source of a user's dataset may be anything: shown as text then
            file.write(json.dumps(sample, ensure_ascii=False, default=str) + "\n")


def cut_samples(path: Path, keep_up_to_step: int | None) -> None:
    """samples.jsonl as metrics.jsonl is cut (metrics.cut_jsonl): a resumed run (a recovery too) writes the steps
    after its checkpoint again, so their earlier rows go; a run from step 0 starts an empty file."""
    cut_jsonl(path, "step", keep_up_to_step, create=False)


def _first(records: list[dict[str, Any]], key: str) -> float | None:
    return next((r[key] for r in records if r.get(key) is not None), None)


def _last(records: list[dict[str, Any]], key: str) -> float | None:
    return next((r[key] for r in reversed(records) if r.get(key) is not None), None)

