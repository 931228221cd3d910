"""DAPO's dynamic sampling (`filter_groups`): the stages before the filter, round after round, until the kept
prompts fill the batch.

Each round draws fresh prompts (`InFlight.draw`, the data loader moving on with them), generates them with the
same weights as the step's first round (its own seed stream, `generate_stream`) and runs the stages up to the
filter on them (`StepRunner.run_stage`); the filter keeps the prompts whose samples did not all get the same
value. The step's fields become the first data.batch_size kept prompts of all rounds (the rest of the last round
is dropped, as verl drops it), and the rest of the step runs once, on them.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import torch

from rlgraph.algos.shaping import group_keep_mask
from rlgraph.runtime.errors import RunError
from rlgraph.runtime.step import Fields, InFlight, StepResult, record_driver_call
from rlgraph.workers import Rollout

if TYPE_CHECKING:
    from rlgraph.plan.model import CallPlan
    from rlgraph.runtime.step import StepRunner


class SamplingRounds:
    """The rounds of a step whose schedule holds `filter_` (a filter_groups call), run by its StepRunner."""

    def __init__(self, filter_: CallPlan) -> None:
        self.filter = filter_

    def run(self, runner: StepRunner, flight: InFlight, result: StepResult) -> Fields:
        """Run the stages before the filter on the step's prompts, keep the prompts whose samples did not all get
        the same value, and draw and generate more prompts (a round) until data.batch_size are kept, at most
        `max_rounds` rounds (verl: filter_groups.max_num_gen_batches; like verl, the run stops when they do not
        suffice). Returns the step's fields, of the first batch_size kept prompts."""
        plan = runner.plan
        step, want, max_rounds = flight.step, plan.data.batch_size, self.filter.settings.max_rounds
        before = [stage for stage in plan.schedule if stage.stage < self.filter.stage]
        fields, generates = flight.fields, flight.generates
        rounds: list[tuple[Fields, torch.Tensor, torch.Tensor | None]] = []  # fields, row kept, row unscored
        kept = generated = 0
        for round_ in itertools.count(1):
            if round_ > 1:  # a refill: more prompts, generated with the same weights
                fields = Fields({"prompts": flight.draw()}, runner.roles)
                generates = runner.launch_generates(step, fields, flight.version, round_)
                runner.wait_generates(generates)
            for stage in before:
                runner.run_stage(stage, step, fields, generates, result, round_)
            rollout = fields.local(runner.responses_field)
            # a judge's verdicts that held no score (NaN) count as 0 and leave their rows unscored, as in a step
            port, name = self.filter.inputs[0]
            inputs, _ = runner.driver_calls.unjudged(self.filter, {port: fields.local(name)}, rollout)
            values = inputs[port].sum(-1)  # (batch,) the value each sample got
            keep = group_keep_mask(values, rollout.uid)
            unscored = runner.driver_calls.unscored
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
        return self.merge(runner, rounds, want)

    def merge(self, runner: StepRunner, rounds: list[tuple[Fields, torch.Tensor, torch.Tensor | None]],
              want: int) -> Fields:
        """The kept rows of every round's fields, one round after another, the first `want` prompts; their
        uids renumbered so each prompt's rows stay one group."""
        responses = runner.responses_field
        parts, tensors, unscored_parts, prompts = [], {}, [], []
        for fields, keep, unscored in rounds:
            rollout = fields.local(responses)
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
                if name not in ("prompts", responses) and name not in fields.within:
                    value = fields.local(name)
                    tensors.setdefault(name, []).append(value[rows] if isinstance(value, torch.Tensor) else value)
            unscored_parts.append(unscored[rows] if unscored is not None else torch.zeros(len(rows), dtype=torch.bool))
        rollout = Rollout.concat(parts)
        merged = Fields({"prompts": prompts}, runner.roles)
        merged.set(responses, rollout)
        merged.within = dict(rounds[0][0].within)
        for name, values in tensors.items():
            if all(isinstance(v, torch.Tensor) for v in values):  # (rows, R) per round: right-padded to one R
                width = max(v.shape[1] for v in values) if values[0].dim() > 1 else None
                values = [v if width is None else torch.nn.functional.pad(v, (0, width - v.shape[1])) for v in values]
                merged.set(name, torch.cat(values))
            else:
                merged.set(name, values[0])
        unscored = torch.cat(unscored_parts)
        runner.driver_calls.unscored = (rollout, unscored) if unscored.any() else None
        for call in runner.plan.calls:  # the kept values that the batch metrics read, by their meaning
            if call.kind != "role" and call.stage < self.filter.stage:
                record_driver_call(call, {port: merged.local(name) for port, name in call.inputs},
                                   {port: merged.local(name) for port, name in call.outputs}, merged.semantic,
                                   responses)
        return merged
