"""The run's length and validation are each said once: steps or epochs, warm-up in steps or as a ratio,
validation samples in the rollout's `val { n }` or train.val_samples."""

from __future__ import annotations

from rlgraph.compiler.graph import StepGraph
from rlgraph.diagnostics import Diagnostic, error, warning
from rlgraph.lang.program import Program


def training(program: Program, graph: StepGraph) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    train = program.train
    if train is not None and train.is_set("steps") and train.is_set("epochs"):
        out.append(warning("setting-ignored", f"train.epochs = {train['epochs']} is ignored: train.steps = "
                           f"{train['steps']} is given and wins (as verl's total_training_steps over total_epochs)",
                           train.span_of("epochs"), "remove one of them", label="ignored",
                           notes=[("train.steps is set here", train.span_of("steps"))]))
    for role in program.roles.values():
        if role.kind in ("actor", "critic") and role.is_set("optim.warmup_ratio") and role.is_set("optim.warmup_steps"):
            out.append(error("conflicting-keys", f"`{role.name}` sets both optim.warmup_steps and optim.warmup_ratio",
                             role.span_of("optim.warmup_ratio"),
                             "warm-up is a number of steps or a share of the run's steps (verl: lr_warmup_steps "
                             "or lr_warmup_steps_ratio): keep one", label="and warmup_steps",
                             notes=[("warmup_steps is set here", role.span_of("optim.warmup_steps"))]))
        if role.kind != "rollout":
            continue
        if role.is_set("val.n") and train is not None and train.is_set("val_samples"):
            out.append(error("conflicting-keys", f"`{role.name}` sets val.n and the spec sets train.val_samples: "
                             "both are the samples per validation prompt", role.span_of("val.n"),
                             "keep one: `val { n = N }` on the rollout, or train.val_samples", label="and val_samples",
                             notes=[("train.val_samples is set here", train.span_of("val_samples"))]))
        val = role["val"]
        if role.is_set("val.temperature") and val["temperature"] == 0 and (val["n"] or 1) > 1:
            out.append(warning("greedy-group", f"`{role.name}` validates with n = {val['n']} answers per prompt at "
                               "temperature 0: they are one greedy answer n times, so best@n is mean@n",
                               role.span_of("val.temperature"),
                               "set val.temperature above 0 (e.g. 0.6, verl's examples) or n = 1",
                               label="greedy"))
    return out
