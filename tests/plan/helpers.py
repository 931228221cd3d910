"""Spec texts for the plan tests, and a way to plan them."""

from __future__ import annotations

from pathlib import Path

from rlgraph.compiler import compile_spec
from rlgraph.diagnostics import Diagnostic
from rlgraph.plan.build import plan_spec
from rlgraph.plan.model import Plan

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "specs"

GRPO_STEP = """\
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update"""


def spec(body: str, step: str = GRPO_STEP, model: str = 'model policy { path = "builtin:arith-gpt" }',
         data: str = "batch_size = 32") -> str:
    """A whole spec around `body` (pools and roles): a model, a reward `exact`, data and a step."""
    return "\n".join([
        "rlgraph 1", model, body,
        'reward exact { fn = "rlgraph.tasks.arith:exact_match" }',
        f'data {{ train = "builtin:arith/train"  {data} }}',
        "step {\n" + step + "\n}",
    ]) + "\n"


def plan_text(tmp_path: Path, text: str, name: str = "spec.rl") -> tuple[Plan, list[Diagnostic]]:
    path = tmp_path / name
    path.write_text(text)
    return plan_spec(compile_spec(str(path)))


def placed(plan: Plan, role: str) -> list[tuple[int, int, list[int], str]]:
    """(replica, node, devices, process) of every replica of `role`."""
    return [(p.replica, p.node, p.devices, p.process) for p in plan.placements_of(role)]


def codes(diagnostics: list[Diagnostic]) -> list[str]:
    return sorted(d.code for d in diagnostics)


def only(diagnostics: list[Diagnostic], code: str) -> Diagnostic:
    matching = [d for d in diagnostics if d.code == code]
    assert len(matching) == 1, [(d.code, d.message) for d in diagnostics]
    return matching[0]


def line_of(text: str, marker: str) -> int:
    lines = [i for i, line in enumerate(text.splitlines(), 1) if marker in line]
    assert len(lines) == 1, f"{marker!r} is on lines {lines}"
    return lines[0]
