"""Small spec texts for the pass tests, and a way to compile them."""

from __future__ import annotations

from pathlib import Path

from rlgraph.compiler import Compilation, compile_spec

ACTOR_ONLY = """\
role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }"""

GRPO_STEP = """\
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update"""

PPO_ROLES = """\
role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
role ref { model = policy  colocate = actor }
role critic { model = policy  colocate = actor }"""

PPO_STEP = """\
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob -> ref_log_prob
  responses -> critic.values -> values
  scores, old_log_prob, ref_log_prob -> kl_penalty -> rewards
  rewards, values -> gae -> advantages, returns
  values, returns -> critic.update
  old_log_prob, advantages -> actor.update"""


def spec(step: str | None = GRPO_STEP, roles: str = ACTOR_ONLY, data: str = "batch_size = 32",
         devices: int = 4, extra: str = "") -> str:
    """A whole spec: one model, one pool of `devices`, the roles, a reward `exact`, data and a step."""
    parts = ["rlgraph 1", 'model policy { path = "builtin:arith-gpt" }',
             f"pool main {{ nodes = 1  devices_per_node = {devices} }}", roles,
             'reward exact { fn = "rlgraph.tasks.arith:exact_match" }']
    if extra:
        parts.append(extra)
    if data is not None:
        parts.append(f'data {{ train = "builtin:arith/train"  {data} }}')
    if step is not None:
        parts.append("step {\n" + step + "\n}")
    return "\n".join(parts) + "\n"


def compile_text(tmp_path: Path, text: str, name: str = "spec.rl") -> Compilation:
    path = tmp_path / name
    path.write_text(text)
    return compile_spec(str(path))


def found(result: Compilation) -> list[tuple[str, int]]:
    """Every diagnostic as (code, line), sorted."""
    return sorted((d.code, d.span.line) for d in result.diagnostics)


def line_of(text: str, marker: str) -> int:
    """The line (1-based) holding `marker`; the marker must be on exactly one line."""
    lines = [i for i, line in enumerate(text.splitlines(), 1) if marker in line]
    assert len(lines) == 1, f"{marker!r} is on lines {lines}"
    return lines[0]


def only(result: Compilation, code: str):
    """The one diagnostic with `code`."""
    matching = [d for d in result.diagnostics if d.code == code]
    assert len(matching) == 1, [(d.code, d.message) for d in result.diagnostics]
    return matching[0]
