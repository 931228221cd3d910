"""The plan: placement, schedule and memory estimate of a compiled spec, and its renderers.

`rlgraph.plan.model` (the Plan dataclass) is all the runtime imports; it pulls in
nothing else. Building a plan needs the compiler: `rlgraph.plan.build.build_plan`,
also reachable lazily as `rlgraph.plan.build_plan` so that importing the model
never imports the compiler or the parser.
"""

from __future__ import annotations


def __getattr__(name: str):
    if name in ("build_plan", "plan_spec"):
        from rlgraph.plan import build

        return getattr(build, name)
    raise AttributeError(f"module 'rlgraph.plan' has no attribute {name!r}")
