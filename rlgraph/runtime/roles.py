"""What runs: the worker each role needs and its constructor arguments, read off the Plan.

This is one half of lowering (where it runs is the Placement); `lowering.py` joins the two. A
`WorkerSpec` is plain data (the role's resolved settings from the Plan, a model folder, a seed), so it
travels to the process that builds the worker. The worker class of each role kind comes from the
role-method table (rlgraph/contract/methods.py `WORKERS`):

    actor, ref   -> PolicyWorker (trainable with ActorSettings, frozen with RefSettings)
    critic       -> CriticWorker
    reward_model -> RewardModelWorker (a sequence classifier scoring on the reward token)
    judge        -> JudgeWorker (a model of its own that generates a verdict on each sample with a rollout
                    engine, parsed into its score; never synced into, never aliased to another role's module)
    rollout      -> the policy in its own process when it shares one with the role that syncs into it
                    (the hybrid engine: it generates with that module in place), else a RolloutWorker
                    with its own weights and engine, refreshed by the weight sync
    ref          -> the LoRA actor's module with its adapters off (a `BasePolicy`), when the ref holds the
                    actor's model in the actor's processes: no second copy of the weights
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlgraph.contract.engines import ENGINES
from rlgraph.contract.methods import WORKERS
from rlgraph.contract.rollouts import trained_generate
from rlgraph.plan.model import CallPlan, Plan, RolePlan

ALIAS = "alias"  # a rollout that generates with `alias_of`'s module in place
BASE = "base"  # a ref that scores with the module of `alias_of` (a LoRA actor) with its adapters off


@dataclass(frozen=True)
class WorkerSpec:
    role: str
    kind: str  # actor | ref | critic | reward_model | judge | rollout
    worker: str  # a WORKERS value, or "alias"
    model_path: str | None = None  # the local folder its weights load from
    settings: Any = None  # the role's resolved settings (rlgraph.contract.settings)
    seed: int = 0
    alias_of: str | None = None
    deterministic: bool = False  # train.deterministic: set up before the worker touches a GPU

    @property
    def strategy(self) -> str:
        return getattr(self.settings, "strategy", "ddp")


def generate_call(plan: Plan) -> CallPlan | None:
    """The step's trained generate call (rlgraph/contract/rollouts.py): the one validation samples like."""
    return trained_generate(plan.calls)


def sync_source(plan: Plan, rollout: str) -> str | None:
    return next((source for source, target in plan.syncs if target == rollout), None)


def worker_specs(plan: Plan, model_paths: dict[str, str]) -> dict[str, WorkerSpec]:
    """role -> WorkerSpec. `model_paths` maps a role to the local folder its weights load from
    (the resolved model, or a checkpoint's folder on resume)."""
    specs: dict[str, WorkerSpec] = {}
    processes_of = {role.name: {p.process for p in plan.placements_of(role.name)} for role in plan.roles}
    for index, role in enumerate(plan.roles):
        if role.kind not in WORKERS:
            raise ValueError(f"role kind {role.kind!r} has no worker in this runtime")
        host = _colocated_policy(plan, role, processes_of) if role.kind == "rollout" else None
        if host is not None:
            # the rollout's settings: its engine limit reaches the host's engine where the alias is built
            specs[role.name] = WorkerSpec(role.name, role.kind, ALIAS, settings=role.settings, alias_of=host)
            continue
        base_of = lora_base_of(plan, role, processes_of) if role.kind == "ref" else None
        if base_of is not None:
            specs[role.name] = WorkerSpec(role.name, role.kind, BASE, model_paths.get(role.name), role.settings,
                                          alias_of=base_of)
            continue
        specs[role.name] = WorkerSpec(role.name, role.kind, WORKERS[role.kind], model_paths.get(role.name),
                                      role.settings, plan.train.seed + 1000 * index,
                                      deterministic=plan.train.deterministic)
    return specs


def sharded_roles(plan: Plan, specs: dict[str, WorkerSpec]) -> set[str]:
    """Roles whose model is sharded over several replicas (strategy = fsdp), and the rollouts that generate
    with such a model in place: every call that touches their weights must reach every replica."""
    sharded = {r.name for r in plan.roles if r.replicas > 1 and specs[r.name].strategy == "fsdp"}
    return sharded | {name for name, spec in specs.items() if spec.worker == ALIAS and spec.alias_of in sharded}


def lora_base_of(plan: Plan, ref: RolePlan, processes_of: dict[str, set[str]]) -> str | None:
    """The LoRA actor whose base is `ref`: same model, and every ref replica in a process of the actor."""
    for actor in plan.roles:
        if (actor.kind == "actor" and getattr(actor.settings, "lora", None) is not None and actor.model == ref.model
                and actor.model is not None and processes_of[ref.name] <= processes_of[actor.name]):
            return actor.name
    return None


def _colocated_policy(plan: Plan, rollout: RolePlan, processes_of: dict[str, set[str]]) -> str | None:
    """The policy role whose module a rollout can generate with in place: the role that syncs into it
    (else the actor) when every rollout replica shares a process with a replica of it."""
    # an engine that is not in place (vllm, sglang) loads a copy of its own, even colocated
    facts = ENGINES.get(rollout.settings.engine)  # (an unknown one: pre-flight refuses it, naming the engines)
    if facts is None or not facts.in_place:
        return None
    candidates = [sync_source(plan, rollout.name)] + [r.name for r in plan.roles if r.kind == "actor"]
    for name in candidates:
        if name and processes_of.get(name) and processes_of[rollout.name] <= processes_of[name]:
            return name
    return None
