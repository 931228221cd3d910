"""The step's shape as the memory estimate and its advice read it: prompts per step, samples per prompt, the
lengths, and each role's calls with the arguments the spec writes (checked as the compiler checks them).

Its own module because both the estimate (memory.py) and the advice (memory_advice.py) read it, and the advice
is imported by the estimate. Unset values are the schema's defaults (filled in by the compiler); a block the
spec lacks (an error reported elsewhere) reads the schema's default too, never a number restated here.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlgraph.compiler.build import argument_value
from rlgraph.compiler.builtins import ROLE_METHODS
from rlgraph.spec.program import Program, Values
from rlgraph.spec.schema import BLOCKS, ROLE_KEYS, TypeMismatch

_MAX_PROMPT_LENGTH = BLOCKS["data"].keys["max_prompt_length"].default
_MAX_NEW_TOKENS = ROLE_KEYS["rollout"]["max_new_tokens"].default
_MAX_RESPONSE_LENGTH = BLOCKS["data"].keys["max_response_length"].default


@dataclass(frozen=True)
class StepShape:
    """What the step hands each call: prompts per step, samples per prompt, the lengths, each role's calls."""

    batch: int | None  # prompts per step
    n: int  # samples per prompt of the trained generate call
    prompt: int  # max_prompt_length
    response: int  # max_new_tokens of that call's rollout
    calls: dict[str, list[tuple[str, dict]]]  # role name -> [(method, the call's own arguments)]
    # the longest row of a micro-batch counted in rows, when shorter than the full length (the worst case)
    longest: int | None = None

    @property
    def length(self) -> int:
        return self.prompt + self.response

    @property
    def row_length(self) -> int:
        """Tokens of a micro-batch's longest row: the working memory that grows with the rows' lengths."""
        return min(self.longest, self.length) if self.longest else self.length


def step_shape(program: Program) -> StepShape:
    calls: dict[str, list[tuple[str, dict]]] = {}
    for statement in (program.step.statements if program.step is not None else ()):
        call = getattr(statement, "call", None)
        if call is not None and call.target in program.roles and call.method:
            calls.setdefault(call.target, []).append((call.method, _written_arguments(program, call)))
    rollouts = [(name, kw) for name, methods in calls.items() for method, kw in methods if method == "generate"]
    name, kw = rollouts[0] if rollouts else (next((r.name for r in program.roles.values() if r.kind == "rollout"),
                                                  None), {})
    rollout = program.roles.get(name) if name else None
    n = kw.get("n") or (rollout.get("n", 1) if rollout is not None else 1)
    data = program.data
    response = rollout.get("max_new_tokens", _MAX_NEW_TOKENS) if rollout is not None else 0
    if not rollouts and any(method == "sft" for methods in calls.values() for method, _ in methods):
        n = 1  # SFT: one demonstration per row, its response as long as the data allows
        response = data.get("max_response_length", _MAX_RESPONSE_LENGTH) if data is not None else _MAX_RESPONSE_LENGTH
    return StepShape(batch=data.get("batch_size") if data is not None else None, n=n,
                     prompt=data.get("max_prompt_length", _MAX_PROMPT_LENGTH) if data is not None else _MAX_PROMPT_LENGTH,
                     response=response, calls=calls)


def _written_arguments(program: Program, call) -> Values:
    """The arguments a role call writes, as the compiler checks them: one of the wrong type (reported there, as
    `wrong-type`) raises InvalidValue when read, so the estimate that needs it is skipped, not computed with it."""
    signature = ROLE_METHODS.get(program.roles[call.target].kind or "", {}).get(call.method)
    written, invalid = {}, set()
    for argument in call.kwargs:
        written[argument.key] = getattr(argument.value, "value", None)
        key = signature.kwargs.get(argument.key) if signature is not None else None
        if key is not None:
            try:
                argument_value(key, argument, program)
            except TypeMismatch:
                invalid.add(argument.key)
    return Values(written, invalid)
