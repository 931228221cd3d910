"""The spec asks only for what rlgraph's runtime implements (rlgraph/compiler/runtime_support.py).

Every finding is a warning: a spec may be planned here for a cluster whose runtime has more. `rlgraph run`
refuses a spec with any code of REFUSES_RUN, before Ray starts; `setting-ignored` only warns, as the run
works, but without the setting.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.passes._common import quoted
from rlgraph.compiler.runtime_support import ENGINES, ROLE_KINDS, EngineFacts
from rlgraph.compiler.topology import dp_size, model_of, pool_device, root_of
from rlgraph.contract.engines import max_tp_on
from rlgraph.diagnostics import Diagnostic, warning
from rlgraph.lang.program import Decl, Program
from rlgraph.lang.schema import TRAINED_KINDS

# The codes of this pass that `rlgraph run` refuses: the runtime cannot do what the spec asks.
REFUSES_RUN = frozenset({"kind-not-implemented", "engine-not-implemented", "tp-not-implemented",
                         "log-probs-not-implemented", "lora-not-implemented", "sequence-parallel-not-implemented"})


def refusal(diagnostics: Iterable[Diagnostic]) -> str:
    """Why `rlgraph run` refuses a spec whose diagnostics these are, as a line; empty when it does not."""
    codes = sorted({d.code for d in diagnostics if d.code in REFUSES_RUN})
    if not codes:
        return ""
    return f"This runtime cannot run the spec ({', '.join(codes)}); nothing was started.\n"


def runtime_support(program: Program, graph: StepGraph, engines: Mapping[str, EngineFacts] = ENGINES,
                    role_kinds: tuple[str, ...] = ROLE_KINDS) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for role in program.roles.values():
        if role.kind is not None and role.kind not in role_kinds:
            out.append(warning("kind-not-implemented", f"this runtime does not run {role.kind} roles",
                               role.span_of("kind"), f"`rlgraph run` refuses the spec; it runs {quoted(role_kinds)} "
                               "roles"))
        elif role.kind == "rollout":
            out += _rollout(program, graph, role, engines)
        elif role.kind in TRAINED_KINDS:
            out += _strategy(program, role) + _lora_sharded(program, role)
        out += _sequence_parallel(role)
    return out


def _sequence_parallel(role: Decl) -> list[Diagnostic]:
    """Ulysses sequence parallelism is planned (batch arithmetic, memory) but rlgraph's workers run every
    sequence whole on one device: a run would silently hold k times the activations the plan counted."""
    sp = role.get("sequence_parallel", 1)
    if not isinstance(sp, int) or sp <= 1:
        return []
    return [warning("sequence-parallel-not-implemented", f"`{role.name}` sets sequence_parallel = {sp}, which this "
                    "runtime does not run (its workers run each sequence whole on one device)",
                    role.span_of("sequence_parallel"),
                    "`rlgraph run` refuses the spec; remove `sequence_parallel` (each replica then takes its own "
                    f"samples: divide `micro_batch` by {sp} for the same rows a device, and expect {sp} times the "
                    "activations a device) to run it here", label="not implemented")]


def _rollout(program: Program, graph: StepGraph, role: Decl, engines: Mapping[str, EngineFacts]) -> list[Diagnostic]:
    name = role.get("engine", "hf")
    engine = engines.get(name)
    if engine is None:  # what the engine would honour is unknown: nothing more to say
        return [warning("engine-not-implemented", f"rollout `{role.name}` uses engine = {name}, which this runtime "
                        f"does not implement", role.span_of("engine"),
                        f"`rlgraph run` refuses the spec; set `engine = {next(iter(engines))}` to run it here "
                        f"(engines: {quoted(engines)})", label="not implemented")]
    out = []
    tp = role.get("tp", 1)
    device = pool_device(program, role) or "cpu"  # an undeclared pool is reported elsewhere
    max_tp = max_tp_on(engine, device)
    if tp > max_tp:
        instead = ("remove `tp`: colocated, the rollout then has a replica on every device it shares"
                   if role.get("colocate") is not None else
                   f"set `tp = {max_tp}` and `replicas = {role.get('replicas', 1) * tp}` for the same devices")
        on = f" on {device} pools" if max_tp != engine.max_tp else ""
        out.append(warning("tp-not-implemented", f"engine {name} runs a rollout replica on at most {max_tp} "
                           f"device{'s' * (max_tp != 1)}{on}, but `{role.name}` sets tp = {tp}", role.span_of("tp"),
                           f"`rlgraph run` refuses the spec; {instead}", label="not implemented"))
    if not engine.kept_log_probs:
        for call in graph.role_calls(role.name, "generate"):
            kept = dict(call.outputs).get("log_prob")
            if kept is not None:
                out.append(warning("log-probs-not-implemented", f"engine {name} cannot keep the log-probs of its "
                                   "samples", call.field_spans.get(kept, call.span),
                                   f"`rlgraph run` refuses the spec; drop `{kept}` here and compute it with "
                                   f"`responses -> ACTOR.log_prob -> {kept}`", label="not implemented"))
    if role.is_set("memory_fraction") and not engine.memory_fraction:
        out.append(_ignored(role, "memory_fraction", f"engine {name} takes the memory it needs",
                            "remove `memory_fraction`"))
    host = _in_place_host(program, graph, role) if engine.in_place else None
    if host is not None:
        out += _in_place(program, graph, role, host)
    return out


def _in_place_host(program: Program, graph: StepGraph, rollout: Decl) -> Decl | None:
    """The policy a rollout generates with in place: as the runtime picks it (runtime/roles.py), the role
    that syncs into it, else an actor, when it shares its devices (and so its processes)."""
    sources = [e.source for e in graph.syncs if e.target == rollout.name]
    actors = [r.name for r in program.roles.values() if r.kind == "actor"]
    for name in sources + actors:
        host = program.roles.get(name)
        if host is not None and host is not rollout and root_of(program, host) is root_of(program, rollout):
            return host
    return None


def _in_place(program: Program, graph: StepGraph, rollout: Decl, host: Decl) -> list[Diagnostic]:
    why = f"`{rollout.name}` generates with the module of `{host.name}` in place"
    out = []
    host_dtype = host.get("dtype", "fp32")
    if rollout.is_set("dtype") and rollout["dtype"] != host_dtype:
        out.append(_ignored(rollout, "dtype", f"{why}, in {host_dtype}",
                            f"remove `dtype`, or set `dtype = {rollout['dtype']}` on `{host.name}`"))
    synced = any(e.source == host.name and e.target == rollout.name for e in graph.syncs)
    host_model = model_of(program, host)
    if rollout.is_set("model") and host_model is not None and rollout["model"] != host_model and not synced:
        # (synced, the bad-sync check reports the mismatch)
        out.append(_ignored(rollout, "model", f"{why}, model `{host_model}`",
                            f"remove `model`, or give `{rollout.name}` a pool of its own to generate with "
                            f"`{rollout['model']}`"))
    return out


def _strategy(program: Program, role: Decl) -> list[Diagnostic]:
    if not role.is_set("strategy") or role["strategy"] != "fsdp" or dp_size(program, role) > 1:
        return []
    return [_ignored(role, "strategy", f"`{role.name}` has one replica, so there is nothing to shard over: "
                     "it trains as ddp", f"remove `strategy = fsdp`, or give `{root_of(program, role).name}` "
                     "more replicas")]


def _lora_sharded(program: Program, role: Decl) -> list[Diagnostic]:
    if not (role.get("lora") or {}).get("rank") or role.get("strategy") != "fsdp" or dp_size(program, role) < 2:
        return []
    return [warning("lora-not-implemented", f"this runtime trains LoRA adapters only on unsharded models, but "
                    f"`{role.name}` shards its model (strategy = fsdp)", role.span_of("lora.rank"),
                    "`rlgraph run` refuses the spec; use `strategy = ddp` (the adapters' grads and Adam state are "
                    "small: the frozen base is most of the memory)", label="not implemented")]


def _ignored(role: Decl, key: str, why: str, hint: str) -> Diagnostic:
    return warning("setting-ignored", f"this runtime ignores `{key}` of `{role.name}`: {why}", role.span_of(key),
                   hint, label="ignored")
