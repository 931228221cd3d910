"""The typed settings agree with the spec's schema: every key a spec may give a role or a call has a
field, no field has a default of its own, and a plan.json round-trips to equal typed settings."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.compiler.builtins import ROLE_METHODS, TRANSFORMS
from rlgraph.contract import settings as s
from rlgraph.lang.schema import BLOCKS, LORA, OPTIM, ROLE_KEYS, ROLLOUT_VAL
from rlgraph.plan.build import build_plan
from rlgraph.plan.model import Plan

REPO = Path(__file__).resolve().parents[2]
PLACEMENT_KEYS = {"model", "pool", "replicas", "colocate", "sequence_parallel"}  # RolePlan's own fields


def _fields(cls) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


@pytest.mark.parametrize("cls", list(s.SETTINGS_CLASSES.values()) + [s.OptimSettings, s.LoraSettings],
                         ids=lambda c: c.__name__)
def test_no_settings_field_has_a_default(cls):
    """Defaults live in the spec's schema only; a field with its own default could disagree with it."""
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(cls))


@pytest.mark.parametrize("kind", list(ROLE_KEYS))
def test_role_settings_cover_every_role_key(kind):
    keys = set(ROLE_KEYS[kind]) - PLACEMENT_KEYS
    if kind in ("actor", "critic"):
        keys |= {"optim"}
    if kind == "actor":
        keys |= {"lora"}
    if kind == "ref":
        keys |= {"strategy"}  # resolved from the trained role it is colocated with
    if kind == "rollout":
        keys |= {"val"}
    if kind == "judge":
        keys |= {"base_dir"}  # where its parser is looked for: the spec's folder, not a key a spec writes
    assert _fields(s.ROLE_SETTINGS[kind]) == keys
    assert _fields(s.ValSettings) == set(ROLLOUT_VAL.keys)
    assert _fields(s.OptimSettings) == set(OPTIM.keys) | {"decay_steps"}  # a cosine's: the run's steps, resolved
    assert _fields(s.LoraSettings) == set(LORA.keys)


def test_call_settings_cover_every_keyword_argument():
    for name, signature in TRANSFORMS.items():
        resolved = {"max_new_tokens"} if name == "overlong_penalty" else set()  # from the trained generate
        assert _fields(s.TRANSFORM_SETTINGS[name]) == set(signature.kwargs) | resolved, name
    actor_update = set(ROLE_METHODS["actor"]["update"].kwargs) - {"clip"}  # resolved into clip_low / clip_high
    assert actor_update <= _fields(s.ActorUpdateSettings)
    assert set(ROLE_METHODS["critic"]["update"].kwargs) <= _fields(s.CriticUpdateSettings)
    assert set(ROLE_METHODS["actor"]["distill"].kwargs) <= _fields(s.ActorDistillSettings)
    assert set(ROLE_METHODS["ref"]["top_k"].kwargs) <= _fields(s.TopKSettings)
    # train.val_samples is resolved into the rollout's `val.n` (RolloutSettings.val), where validation reads it
    assert _fields(s.TrainSettings) == set(BLOCKS["train"].keys) - {"val_samples"}
    assert _fields(s.DataSettings) == set(BLOCKS["data"].keys)
    assert _fields(s.RewardSettings) == set(BLOCKS["reward"].keys) - {"fn"}  # fn: Plan.rewards


@pytest.mark.parametrize("spec", sorted((REPO / "specs").glob("*.rl")), ids=lambda p: p.name)
def test_every_role_and_call_of_a_shipped_spec_is_resolved_and_round_trips(spec):
    plan = build_plan(compile_spec(str(spec)))
    assert all(r.settings is not None for r in plan.roles)
    assert all(c.settings is not None for c in plan.calls)
    again = Plan.from_json(plan.to_json())
    assert again.roles == plan.roles and again.calls == plan.calls
    assert again.train == plan.train and again.data == plan.data
    assert again.reward_settings == plan.reward_settings and set(plan.reward_settings) == set(plan.rewards)


def test_units_are_converted_once_at_planning(tmp_path):
    spec = tmp_path / "ppo.rl"
    spec.write_text((REPO / "specs" / "ppo_arith.rl").read_text())
    plan = build_plan(compile_spec(str(spec), ["actor.optim.grad_clip=0", "actor.dtype=bf16"]))
    actor = plan.role("actor").settings
    assert actor.optim.grad_clip is None and actor.dtype == "bfloat16" and actor.optim.betas == (0.9, 0.999)
    update = plan.call("actor.update").settings
    # minibatch 16 prompts x n 4 samples / 1 replica; clip 0.2 on both sides
    assert (update.minibatch, update.mini_batch_size, update.clip_low, update.clip_high) == (16, 64, 0.2, 0.2)
    assert plan.call("actor.log_prob").settings.temperature == 1.0


def test_a_stale_plan_json_names_the_fields_that_differ():
    plan = json.loads(build_plan(compile_spec(str(REPO / "specs" / "grpo_arith.rl"))).to_json())
    del plan["roles"][0]["settings"]["optim"]["lr"]
    with pytest.raises(s.SettingsError, match="OptimSettings: missing lr"):
        Plan.from_dict(plan)


def test_a_token_budget_reaches_every_call_of_its_role(tmp_path):
    spec = tmp_path / "ppo.rl"
    spec.write_text((REPO / "specs" / "ppo_arith.rl").read_text())
    budgets = {"actor": 512, "critic": 256, "ref": 1024}
    plan = build_plan(compile_spec(str(spec), [f"{role}.micro_batch_tokens={b}" for role, b in budgets.items()]))
    for label, role in [("actor.log_prob", "actor"), ("actor.update", "actor"), ("critic.values", "critic"),
                        ("critic.update", "critic"), ("ref.log_prob", "ref")]:
        settings = plan.call(label).settings
        assert (settings.micro_batch, settings.micro_batch_tokens) == (None, budgets[role]), label
    assert plan.role("actor").settings.micro_batch_tokens == 512
    assert Plan.from_json(plan.to_json()).calls == plan.calls
