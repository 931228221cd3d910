"""Broken specs still plan what they can: no renderer raises on any golden spec of the compiler tests."""

from __future__ import annotations

import re

import pytest

from rlgraph.cli import main

from .helpers import REPO, spec

BROKEN = sorted(REPO.glob("tests/**/golden/*.rl"))


@pytest.mark.parametrize("path", BROKEN, ids=[p.name for p in BROKEN])
def test_every_format_renders_a_broken_spec(path, capsys):
    for fmt in ("text", "json", "dot", "html"):
        assert main(["plan", str(path), "--format", fmt]) in (0, 1)
        assert capsys.readouterr().out.strip(), fmt


def test_syntax_error_and_cycle(tmp_path, capsys):
    bad = tmp_path / "bad.rl"
    bad.write_text("rlgraph 1\nmodel policy { path = }\n")
    cyclic = tmp_path / "cycle.rl"
    cyclic.write_text("""rlgraph 1
model policy { path = "builtin:arith-gpt" }
pool main { nodes = 1  devices_per_node = 1 }
role actor { model = policy  pool = main }
role rollout { colocate = actor  n = 4 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }
data { train = "builtin:arith/train"  batch_size = 8 }
step {
  prompts -> rollout.generate -> responses
  responses, advantages -> actor.log_prob -> old_log_prob
  old_log_prob -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
""")
    for path in (bad, cyclic):
        for fmt in ("text", "json", "dot", "html"):
            assert main(["plan", str(path), "--format", fmt]) == 1
            out = capsys.readouterr()
            assert out.out.strip() and "error[" in out.err


def test_a_reward_with_a_wrong_value_is_reported_not_raised(tmp_path, capsys):
    path = tmp_path / "spec.rl"
    roles = ("pool main { nodes = 1  devices_per_node = 1 }\nrole actor { model = policy  pool = main }\n"
             "role rollout { colocate = actor  n = 4 }")
    path.write_text(spec(roles).replace('exact_match" }', 'exact_match"  timeout_s = "x" }'))
    assert main(["check", str(path)]) == 1
    assert "error[wrong-type]: wrong value for `timeout_s`" in capsys.readouterr().out
    for fmt in ("text", "json"):
        assert main(["plan", str(path), "--format", fmt]) == 1
        assert "error[wrong-type]" in capsys.readouterr().err


@pytest.mark.parametrize("mend, message", [
    (("actor.update(clip = 0.2, epochs = 2, minibatch = 16)", 'actor.update(clip = 0.2, epochs = 2, minibatch = "x")'),
     "wrong value for `minibatch` of `actor.update`"),
    (('fn = "rlgraph.tasks.arith:exact_match"', "fn = 3"), "wrong value for `fn`"),
], ids=["update-minibatch-a-string", "reward-fn-a-number"])
def test_a_wrong_value_that_planning_reads_is_a_diagnostic_in_check_plan_and_run(mend, message, tmp_path, capsys):
    # memory read the call's argument from the parse tree and planning the reward's `fn` raw: both ended in a
    # traceback (TypeError, InvalidValue) after the compiler had reported the value
    text = (REPO / "specs/ppo_arith.rl").read_text()
    assert mend[0] in text
    path = tmp_path / "spec.rl"
    path.write_text(text.replace(mend[0], mend[1], 1))
    for command in (["check"], ["plan"], ["plan", "--format", "json"], ["run", "--output", str(tmp_path / "run")]):
        assert main([command[0], str(path), *command[1:]]) == 1, command
        out = capsys.readouterr()
        assert message in out.out + out.err and "Traceback" not in out.out + out.err, command
    assert not (tmp_path / "run").exists()  # nothing was started


VALUE = re.compile(r'(\b[a-z_]+\s*=\s*)("[^"\n]*"|[-\w.]+|\[[^\]\n]*\])')  # `key = value`: a string, word, list
OTHER_TYPES = ['"x"', "3", "1.5", "foo", "[]", "-1", "true"]


@pytest.mark.parametrize("name", ["ppo_arith.rl", "grpo_arith_tool.rl"])
def test_any_written_value_of_another_type_is_reported_never_raised(name, tmp_path, capsys):
    # every value the spec writes, in turn, replaced by one of each other type: check and plan end in 0 or 1
    # (a value fuzz of every shipped spec found 84 tracebacks of two kinds before planning read checked values)
    text = (REPO / "specs" / name).read_text()
    path = tmp_path / name
    for match in VALUE.finditer(text):
        for other in OTHER_TYPES:
            path.write_text(text[:match.start(2)] + other + text[match.end(2):])
            for command in (["check", str(path)], ["plan", str(path), "--format", "json"]):
                assert main(command) in (0, 1), (match.group(0), other, command)
            capsys.readouterr()
