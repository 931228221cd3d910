"""Who shares devices with whom, and each role's data-parallel size, read off a Program.

Shared by the batch-arithmetic pass and the placement planner so both count the
same way: a role with a pool has `replicas` replicas of `tp` devices each; a
colocated role runs on the devices of the root of its `colocate` chain, with
(root devices / its own tp) replicas.
"""

from __future__ import annotations

from rlgraph.spec.program import Decl, Program
from rlgraph.spec.schema import ROLE_KEYS

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


def data_groups(program: Program, role: Decl) -> int:
    """Groups that take different samples: the data-parallel replicas over the sequence-parallel size (verl's
    dp = world / ulysses_sequence_parallel_size). What a step's samples, mini-batches and micro-batches split over."""
    return max(dp_size(program, role) // sequence_parallel_of(role), 1)


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
