"""Who shares devices with whom, and each role's data-parallel size, read off a Program.

Shared by the batch-arithmetic pass and the placement planner so both count the
same way: a role with a pool has `replicas` replicas of `tp` devices each; a
colocated role runs on the devices of the root of its `colocate` chain, with
(root devices / its own tp) replicas.

`RoleResources` is what the resource rules (batch arithmetic, param_offload's sharding) read of a role: read off
the declarations here (`declared_resources`), off the resolved settings by the planner (rlgraph/plan/resources.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rlgraph.lang.program import Decl, Program
from rlgraph.lang.schema import ROLE_KEYS

# the schema's defaults (the one place for a default), for a value the Program lacks (one that did not validate)
_TP = ROLE_KEYS["rollout"]["tp"].default
_REPLICAS = ROLE_KEYS["actor"]["replicas"].default  # a placement key: the same for every role kind
_SEQUENCE_PARALLEL = ROLE_KEYS["actor"]["sequence_parallel"].default


def root_of(program: Program, role: Decl) -> Decl:
    """Follow `colocate` to the role that owns the devices (stops on a broken or cyclic chain)."""
    seen = {role.name}
    while role.get("colocate") in program.roles and role["colocate"] not in seen:
        role = program.roles[role["colocate"]]
        seen.add(role.name)
    return role


def tp_of(role: Decl) -> int:
    return role.get("tp", _TP) if role.kind == "rollout" else 1  # only a rollout spans devices per replica


def devices_of(program: Program, role: Decl) -> int:
    """Devices the role's root occupies in total."""
    root = root_of(program, role)
    return root.get("replicas", _REPLICAS) * tp_of(root)


def dp_size(program: Program, role: Decl) -> int:
    """Data-parallel replicas of a role (at least 1)."""
    if role.get("colocate") is None:
        return role.get("replicas", _REPLICAS)
    return max(devices_of(program, role) // tp_of(role), 1)


def sequence_parallel_of(role: Decl) -> int:
    """Devices that share each sequence of the role (Ulysses: `sequence_parallel`; 1 for a role without it)."""
    value = role.get("sequence_parallel", _SEQUENCE_PARALLEL)
    return value if isinstance(value, int) and value > 0 else _SEQUENCE_PARALLEL


def model_of(program: Program, role: Decl) -> str | None:
    """The declared model a role holds; a colocated rollout without one generates with its root's."""
    if role.get("model") is not None:
        return role["model"]
    if role.get("colocate") is not None:
        return root_of(program, role).get("model")
    return None


def pool_device(program: Program, role: Decl) -> str | None:
    """The device kind (`pool { device }`) a role runs on: its root's pool's; None where that pool is not declared."""
    pool = program.pools.get(root_of(program, role).get("pool"))
    return pool.get("device") if pool is not None else None


class RoleResources(Protocol):
    """What the resource checks read of a role: its devices, how it splits its samples over them, its micro-batch
    and its sharding. The batch arithmetic (passes/batch.py) and the offload rule (passes/offload.py) read a role
    only through this, so that the planner checks a change of these settings (rlgraph/plan/memory.py fit_test)
    with the very rules the compiler runs: the compiler reads them off the declarations (`declared_resources`),
    the planner off the resolved settings. A value the spec wrote wrongly raises InvalidValue when read."""

    @property
    def decl(self) -> Decl: ...  # where its keys are written (spans)
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def replicas(self) -> int: ...  # data-parallel replicas (dp_size)
    @property
    def tp(self) -> int: ...
    @property
    def sequence_parallel(self) -> int: ...
    @property
    def root(self) -> str: ...  # the role whose devices it runs on (itself when it has a pool of its own)
    @property
    def root_tp(self) -> int: ...
    @property
    def device(self) -> str | None: ...  # its root's pool's device kind; None where that pool is not declared
    @property
    def micro_batch(self) -> int | None: ...
    @property
    def micro_batch_tokens(self) -> int | None: ...
    @property
    def strategy(self) -> str | None: ...  # a trained role's
    @property
    def param_offload(self) -> bool: ...


@dataclass(frozen=True)
class DeclaredResources:
    """A role's resources as its declaration says them, read when asked (a wrong value raises only where read)."""

    program: Program
    decl: Decl

    @property
    def name(self) -> str:
        return self.decl.name

    @property
    def kind(self) -> str | None:
        return self.decl.kind

    @property
    def replicas(self) -> int:
        return dp_size(self.program, self.decl)

    @property
    def tp(self) -> int:
        return tp_of(self.decl)

    @property
    def sequence_parallel(self) -> int:
        return sequence_parallel_of(self.decl)

    @property
    def root(self) -> str:
        return root_of(self.program, self.decl).name

    @property
    def root_tp(self) -> int:
        return tp_of(root_of(self.program, self.decl))

    @property
    def device(self) -> str | None:
        return pool_device(self.program, self.decl)

    @property
    def micro_batch(self) -> int | None:
        return self.decl.get("micro_batch")

    @property
    def micro_batch_tokens(self) -> int | None:
        return self.decl.get("micro_batch_tokens")

    @property
    def strategy(self) -> str | None:
        return self.decl.get("strategy")

    @property
    def param_offload(self) -> bool:
        return bool(self.decl.get("param_offload"))


def declared_resources(program: Program) -> dict[str, RoleResources]:
    """Every declared role's resources as the spec writes them, by name."""
    return {name: DeclaredResources(program, decl) for name, decl in program.roles.items()}


def data_groups(role: RoleResources) -> int:
    """Groups that take different samples: the data-parallel replicas over the sequence-parallel size (verl's
    dp = world / ulysses_sequence_parallel_size). What a step's samples, mini-batches and micro-batches split over."""
    return max(role.replicas // role.sequence_parallel, 1)
