"""train.epochs and optim.warmup_ratio become steps once the run has loaded its data (rlgraph.runtime.loop)."""

from __future__ import annotations

import dataclasses

from rlgraph.contract import settings as s
from rlgraph.runtime.loop import with_run_length

from .plans import grpo_plan


def test_epochs_count_whole_batches_and_the_warmup_ratio_follows():
    plan = grpo_plan()
    actor = plan.role("actor")
    optim = dataclasses.replace(actor.settings.optim, warmup_steps=0, warmup_ratio=0.1, schedule="cosine")
    roles = [dataclasses.replace(r, settings=dataclasses.replace(r.settings, optim=optim)) if r.name == "actor" else r
             for r in plan.roles]
    plan = dataclasses.replace(plan, roles=roles, train=dataclasses.replace(plan.train, steps=None, epochs=3))
    batch = plan.data.batch_size
    run = with_run_length(plan, 10 * batch + batch - 1)  # the last short batch of an epoch is dropped
    assert (run.train.steps, run.train.epochs) == (30, 3)
    assert run.role("actor").settings.optim.warmup_steps == 3  # int(0.1 x 30)
    assert run.role("actor").settings.optim.decay_steps == 30  # a cosine decays over the run's steps
    assert plan.train.steps is None  # the plan itself is left as it was
    assert isinstance(run.role("rollout").settings, s.RolloutSettings)
