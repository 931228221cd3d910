"""What runs: the worker each role needs and its constructor arguments, read off the Plan.

This is one half of lowering (where it runs is the Placement); `lowering.py` joins the two. A
`WorkerSpec` is plain data, so it travels to the process that builds the worker.

    actor   -> PolicyWorker(trainable=True), with the loss settings of its `update` call
    ref     -> PolicyWorker(trainable=False)
    critic  -> CriticWorker
    reward_model -> RewardModelWorker (a sequence classifier scoring on the last token)
    rollout -> the policy in its own process when it shares one with the role that syncs into it
               (the hybrid engine: it generates with that module in place), else its own
               PolicyWorker(trainable=False) that receives weights through the object store
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlgraph.plan.model import CallPlan, Plan, RolePlan

SUPPORTED_KINDS = ("actor", "ref", "critic", "rollout", "reward_model")
_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # spec name -> torch name


@dataclass(frozen=True)
class WorkerSpec:
    role: str
    kind: str  # actor | ref | critic | rollout
    worker: str  # "policy" | "critic" | "reward_model" | "alias" (generate with `alias_of`'s module)
    kwargs: dict[str, Any] = field(default_factory=dict)  # constructor arguments, plain data
    alias_of: str | None = None


def update_call(plan: Plan, role: str) -> CallPlan | None:
    return next((c for c in plan.calls if c.kind == "role" and c.target == role and c.method == "update"), None)


def generate_call(plan: Plan) -> CallPlan | None:
    return next((c for c in plan.calls if c.kind == "role" and c.method == "generate"), None)


def sync_source(plan: Plan, rollout: str) -> str | None:
    return next((source for source, target in plan.syncs if target == rollout), None)


def optim_kwargs(role: RolePlan) -> dict[str, Any]:
    optim = dict(role.config.get("optim") or {})
    kwargs = {key: optim[key] for key in ("lr", "weight_decay", "warmup_steps") if optim.get(key) is not None}
    if optim.get("betas") is not None:
        kwargs["betas"] = tuple(optim["betas"])
    if "grad_clip" in optim:
        kwargs["grad_clip"] = optim["grad_clip"] or None  # 0 = off
    return kwargs


def actor_loss_kwargs(plan: Plan, role: RolePlan) -> dict[str, Any]:
    """The loss settings of the actor's `update` call: they are fixed for the run, so the worker owns them."""
    call = update_call(plan, role.name)
    kw = call.kwargs if call else {}
    clip = kw.get("clip", 0.2)
    out = {
        "clip_low": kw.get("clip_low") if kw.get("clip_low") is not None else clip,
        "clip_high": kw.get("clip_high") if kw.get("clip_high") is not None else clip,
        "clip_c": kw.get("clip_c", 3.0),
        "loss_agg": kw.get("loss_agg", "token-mean"),
        "kl_loss_coef": kw.get("kl_coef") or 0.0,
        "policy_loss": kw.get("policy_loss", "vanilla"),
    }
    if kw.get("kl_kind"):
        out["kl_loss_kind"] = kw["kl_kind"]
    if role.config.get("entropy_coeff") is not None:
        out["entropy_coeff"] = role.config["entropy_coeff"]
    return out


def worker_specs(plan: Plan, model_paths: dict[str, str]) -> dict[str, WorkerSpec]:
    """role -> WorkerSpec. `model_paths` maps a role to the local folder its weights load from
    (the resolved model, or a checkpoint's folder on resume)."""
    seed = int(plan.train.get("seed", 0))
    specs: dict[str, WorkerSpec] = {}
    processes_of = {role.name: {p.process for p in plan.placements_of(role.name)} for role in plan.roles}
    for index, role in enumerate(plan.roles):
        common = {"seed": seed + 1000 * index, "dtype": _DTYPES[role.config.get("dtype") or "fp32"]}
        trained = {"strategy": role.config.get("strategy") or "ddp"}
        path = model_paths.get(role.name)
        if role.kind == "actor":
            specs[role.name] = WorkerSpec(role.name, "actor", "policy",
                                          {"model_path": path, "trainable": True, **common, **trained, **optim_kwargs(role),
                                           **actor_loss_kwargs(plan, role)})
        elif role.kind == "ref":
            # a frozen role follows its colocation root's strategy (as the memory model counts it)
            root = plan.role(role.colocate) if role.colocate else None
            strategy = "ddp"
            if root is not None and root.kind in ("actor", "critic"):
                strategy = root.config.get("strategy") or "ddp"
            specs[role.name] = WorkerSpec(role.name, "ref", "policy",
                                          {"model_path": path, "trainable": False, **common, "strategy": strategy})
        elif role.kind == "critic":
            specs[role.name] = WorkerSpec(role.name, "critic", "critic",
                                          {"model_path": path, **common, **trained, **optim_kwargs(role)})
        elif role.kind == "reward_model":
            specs[role.name] = WorkerSpec(role.name, "reward_model", "reward_model", {"model_path": path, **common})
        elif role.kind == "rollout":
            host = _colocated_policy(plan, role, processes_of)
            if host is not None:
                specs[role.name] = WorkerSpec(role.name, "rollout", "alias", alias_of=host)
            else:
                specs[role.name] = WorkerSpec(role.name, "rollout", "policy",
                                              {"model_path": path, "trainable": False, **common})
        else:
            raise ValueError(f"role kind {role.kind!r} has no worker in this runtime")
    return specs


def sharded_roles(plan: Plan, specs: dict[str, WorkerSpec]) -> set[str]:
    """Roles whose model is sharded over several replicas (strategy = fsdp), and the rollouts that generate
    with such a model in place: every call that touches their weights must reach every replica."""
    sharded = {r.name for r in plan.roles if r.replicas > 1 and specs[r.name].kwargs.get("strategy") == "fsdp"}
    return sharded | {name for name, spec in specs.items() if spec.worker == "alias" and spec.alias_of in sharded}


def _colocated_policy(plan: Plan, rollout: RolePlan, processes_of: dict[str, set[str]]) -> str | None:
    """The policy role whose module a rollout can generate with in place: the role that syncs into it
    (else the actor) when every rollout replica shares a process with a replica of it."""
    candidates = [sync_source(plan, rollout.name)] + [r.name for r in plan.roles if r.kind == "actor"]
    for name in candidates:
        if name and processes_of.get(name) and processes_of[rollout.name] <= processes_of[name]:
            return name
    return None
