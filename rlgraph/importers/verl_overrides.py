"""A change to a spec that `rlgraph import verl` wrote, said as the verl overrides that make the same change to
the launch it came from: what `rlgraph plan --fit` prints beside its diff, so a verl user can fix the launch
itself (the change was verified by the estimate; the overrides say the same thing in verl's words).

The table is the importer's mapping (rlgraph/importers/verl.py) read backwards for the keys `--fit` changes
(rlgraph/plan/memory_advice.py); tests/importers/test_verl_overrides.py imports each override back and checks
that it gives the rlgraph value, so the two directions cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgraph.lang.program import Program

IMPORTED_MARK = "by `rlgraph import verl`"  # in the header of every spec the importer writes
AR = "actor_rollout_ref"

# (role kind, rlgraph key) -> the verl keys its value goes to; a key given with `=VALUE` is set as written (the
# switch that makes the next key count: verl's use_dynamic_bsz before its token budget)
_ROLE_KEYS: dict[tuple[str, str], tuple[str, ...]] = {
    ("actor", "micro_batch"): (f"{AR}.actor.ppo_micro_batch_size_per_gpu",),
    ("actor", "micro_batch_tokens"): (f"{AR}.actor.use_dynamic_bsz=True", f"{AR}.actor.ppo_max_token_len_per_gpu"),
    ("actor", "gradient_checkpointing"): (f"{AR}.model.enable_gradient_checkpointing",),
    ("actor", "optimizer_offload"): (f"{AR}.actor.fsdp_config.optimizer_offload",),
    # rlgraph's param_offload keeps the state on the host through the update: verl's offload_policy (its
    # param_offload loads the state back for each update, which lowers no peak)
    ("actor", "param_offload"): (f"{AR}.actor.fsdp_config.offload_policy",),
    ("critic", "micro_batch"): ("critic.ppo_micro_batch_size_per_gpu",),
    ("critic", "micro_batch_tokens"): ("critic.use_dynamic_bsz=True", "critic.ppo_max_token_len_per_gpu"),
    ("critic", "gradient_checkpointing"): ("critic.model.enable_gradient_checkpointing",),
    ("critic", "optimizer_offload"): ("critic.model.fsdp_config.optimizer_offload",),
    ("critic", "param_offload"): ("critic.model.fsdp_config.offload_policy",),
    ("ref", "micro_batch"): (f"{AR}.ref.log_prob_micro_batch_size_per_gpu",),
    ("ref", "micro_batch_tokens"): (f"{AR}.ref.log_prob_use_dynamic_bsz=True",
                                    f"{AR}.ref.log_prob_max_token_len_per_gpu"),
    ("ref", "param_offload"): (f"{AR}.ref.fsdp_config.param_offload",),
    ("reward_model", "micro_batch"): ("reward_model.micro_batch_size_per_gpu",),
    ("reward_model", "micro_batch_tokens"): ("reward_model.use_dynamic_bsz=True",
                                             "reward_model.forward_max_token_len_per_gpu"),
    ("rollout", "memory_fraction"): (f"{AR}.rollout.gpu_memory_utilization",),
}
# pool name (as the importer names them) -> key -> the verl key
_POOL_KEYS: dict[str, dict[str, str]] = {
    "gpus": {"devices_per_node": "trainer.n_gpus_per_node", "nodes": "trainer.nnodes"},
    "reward_gpus": {"devices_per_node": "reward_model.n_gpus_per_node", "nodes": "reward_model.nnodes"},
}


@dataclass(frozen=True)
class VerlChange:
    overrides: tuple[str, ...]  # `key=value`, as a launch's command line writes them
    unsaid: tuple[str, ...]  # the edits verl has no key for, each with why


def is_imported(text: str) -> bool:
    """Whether `text` is a spec `rlgraph import verl` wrote (its header says so)."""
    return any(IMPORTED_MARK in line for line in text.splitlines()[:4])


def verl_change(program: Program, edits: tuple[tuple[str, str, str, object], ...]) -> VerlChange:
    """`edits` (memory_advice.Change.edits: (role | pool, name, key, value)) as verl overrides."""
    overrides: list[str] = []
    unsaid: list[str] = []
    for block, name, key, value in edits:
        if block == "pool":
            verl_key = _POOL_KEYS.get(name, {}).get(key)
            if verl_key is None:
                unsaid.append(f"`{key}` of pool `{name}` (the importer derives this pool's devices from "
                              "several verl keys)")
            else:
                overrides.append(f"{verl_key}={_verl_value(value)}")
            continue
        role = program.roles.get(name)
        kind = role.kind if role is not None else None
        if key == "replicas":  # verl has none: a role runs on every device of its pool
            continue
        keys = _ROLE_KEYS.get((kind, key))
        if keys is None:
            unsaid.append(f"`{key}` of `{name}` (verl has no setting for it)")
            continue
        for verl_key in keys:
            overrides.append(verl_key if "=" in verl_key else f"{verl_key}={_verl_value(value)}")
    return VerlChange(tuple(overrides), tuple(unsaid))


def _verl_value(value: object) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(getattr(value, "name", value))
