"""The step's shape as the memory estimate and its advice read it: prompts per step, samples per prompt, the
lengths, and each role's calls with their arguments as the compiler checked them (the step graph's).

Its own module because both the estimate (memory.py) and the advice (memory_advice.py) read it, and the advice
is imported by the estimate. Built from the compiled graph and the resolved settings (the roles', the data's),
never from the parse tree; a data block the spec lacks (an error reported elsewhere) reads the schema's
defaults, never a number restated here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlgraph.compiler.graph import StepGraph
from rlgraph.contract.settings import DataSettings
from rlgraph.lang.program import InvalidValue
from rlgraph.lang.schema import BLOCKS
from rlgraph.plan.model import RolePlan

_MAX_PROMPT_LENGTH = BLOCKS["data"].keys["max_prompt_length"].default
_MAX_RESPONSE_LENGTH = BLOCKS["data"].keys["max_response_length"].default


@dataclass(frozen=True)
class StepShape:
    """What the step hands each call: prompts per step, samples per prompt, the lengths, each role's calls."""

    batch: int | None  # prompts per step
    n: int  # samples per prompt of the trained generate call
    prompt: int  # max_prompt_length
    response: int  # max_new_tokens of that call's rollout
    calls: dict[str, list[tuple[str, dict]]]  # role name -> [(method, the call's checked arguments)]
    # the longest row of a micro-batch counted in rows, when shorter than the full length (the worst case)
    longest: int | None = None
    # the compiled step graph it was read from: what the compiler's resource rules check a change of the settings
    # on (memory.fit_test), with no compiling again; None: no step
    graph: StepGraph | None = field(default=None, compare=False, repr=False)

    @property
    def length(self) -> int:
        return self.prompt + self.response

    @property
    def row_length(self) -> int:
        """Tokens of a micro-batch's longest row: the working memory that grows with the rows' lengths."""
        return min(self.longest, self.length) if self.longest else self.length


def step_shape(graph: StepGraph | None, roles: list[RolePlan], data: DataSettings | None) -> StepShape:
    """The shape of the step of `graph`. `roles`: the placed roles, in the spec's order, with their resolved
    settings; `data`: the data block's settings (None: the spec has none).

    An argument the spec wrote wrongly (reported as `wrong-type`) raises InvalidValue when read, and so does a
    rollout whose settings did not resolve: the estimate that needs them is skipped, not computed without them."""
    plans = {r.name: r for r in roles}
    calls: dict[str, list[tuple[str, dict]]] = {}
    for call in (graph.calls() if graph is not None else ()):
        if call.kind == "role" and call.target in plans and call.method:
            calls.setdefault(call.target, []).append((call.method, call.kwargs))
    rollouts = [(name, kw) for name, methods in calls.items() for method, kw in methods if method == "generate"]
    name, kw = rollouts[0] if rollouts else (next((r.name for r in roles if r.kind == "rollout"), None), {})
    rollout = plans.get(name) if name else None
    if rollout is not None and rollout.settings is None:
        raise InvalidValue(f"role {name}")
    n = kw.get("n") or (rollout.settings.n if rollout is not None else 1)
    response = rollout.settings.max_new_tokens if rollout is not None else 0
    if not rollouts and any(method == "sft" for methods in calls.values() for method, _ in methods):
        n = 1  # SFT: one demonstration per row, its response as long as the data allows
        response = data.max_response_length if data is not None else _MAX_RESPONSE_LENGTH
    return StepShape(batch=data.batch_size if data is not None else None, n=n,
                     prompt=data.max_prompt_length if data is not None else _MAX_PROMPT_LENGTH,
                     response=response, calls=calls, graph=graph)
