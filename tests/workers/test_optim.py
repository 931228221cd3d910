"""An optimizer restored from a checkpoint: its state from the checkpoint, its hyper-parameters from the plan."""

from __future__ import annotations

import pytest
import torch

from rlgraph.workers.optim import Optimization

from .helpers import optim_settings


def train(optim: Optimization, steps: int) -> None:
    layer = optim.layer
    for _ in range(steps):
        optim.run_epochs(8, lambda rows: (layer(torch.ones(len(rows), 4)).pow(2).mean(), {}), epochs=1,
                         mini_batch_size=None, micro_batch_size=None, generator=None)


def made(lr: float, betas: tuple[float, float] = (0.9, 0.999), weight_decay: float = 0.0) -> Optimization:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    settings = optim_settings(lr=lr, betas=betas, weight_decay=weight_decay, grad_clip=1.0, warmup_steps=4)
    optim = Optimization.from_settings(layer.parameters(), settings)
    optim.layer = layer
    return optim


def trained(lr: float, steps: int) -> Optimization:
    optim = made(lr)
    train(optim, steps)
    return optim


def restored(state: dict, lr: float, **settings) -> Optimization:
    optim = made(lr, **settings)
    optim.load_state_dict(state)
    return optim


def test_a_plain_restore_gives_back_exactly_the_saved_state():
    optim = trained(1e-4, steps=2)
    state = optim.state_dict()
    again = restored(state, 1e-4)
    assert again.state_dict()["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert again.scheduler.state_dict() == state["scheduler"]
    assert again.lr == optim.lr == 1e-4 * 3 / 4  # warm-up step 3 of 4


def test_the_plans_lr_betas_and_weight_decay_win_over_the_checkpoints():
    optim = trained(1e-4, steps=2)
    state = optim.state_dict()
    again = restored(state, 1e-3, betas=(0.8, 0.9), weight_decay=0.1)
    assert again.lr == 1e-3 * 3 / 4  # the new rate, at the checkpoint's place in the warm-up
    group = again.optimizer.param_groups[0]
    assert group["betas"] == (0.8, 0.9) and group["weight_decay"] == 0.1
    moments = [s["exp_avg"] for s in state["optimizer"]["state"].values()]
    assert all(torch.equal(a, b["exp_avg"]) for a, b in zip(moments, again.optimizer.state.values()))
    train(again, steps=1)
    assert again.lr == 1e-3  # warm-up done on the new rate


def cosine(lr: float, **settings) -> Optimization:
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 2)
    optim = Optimization.from_settings(layer.parameters(), optim_settings(
        lr=lr, warmup_steps=2, schedule="cosine", min_lr_ratio=0.1, decay_steps=10, **settings))
    optim.layer = layer
    return optim


def lrs(optim: Optimization, steps: int) -> list[float]:
    """The lr each of the next `steps` training steps runs at (the metric `actor/lr`)."""
    out = []
    for _ in range(steps):
        out.append(optim.lr)
        train(optim, 1)
    return out


def test_a_cosine_schedule_warms_up_then_falls_to_min_lr_ratio_by_the_run_s_end():
    import math

    seen = lrs(cosine(1e-3), 10)
    # verl's cosine after its warm-up: progress over the 8 steps left, the floor one step past the last
    expected = [1e-3 * f for f in (0.5, 1.0)] + [1e-3 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * i / 8)))
                                                  for i in range(8)]
    assert seen == [pytest.approx(e, rel=1e-12) for e in expected]
    assert seen[2] == pytest.approx(1e-3) and 1e-4 < seen[-1] < 1.5e-4  # full lr after warm-up; near the floor last
    assert all(a > b for a, b in zip(seen[2:], seen[3:]))


def test_a_cosine_schedule_resumes_where_it_was():
    whole = cosine(1e-3)
    expected = lrs(whole, 10)
    first = cosine(1e-3)
    before = lrs(first, 4)
    again = cosine(1e-3)
    again.load_state_dict(first.state_dict())
    assert before + lrs(again, 6) == expected


def test_a_cosine_schedule_needs_the_run_s_steps():
    with pytest.raises(ValueError, match="decay_steps"):
        Optimization.from_settings(torch.nn.Linear(2, 2).parameters(),
                                   optim_settings(schedule="cosine", decay_steps=None))
