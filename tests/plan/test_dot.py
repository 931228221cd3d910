"""`--format dot`: parsed back with a small DOT reader (and by Graphviz when it is installed)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from rlgraph.plan.dot import render_dot

from .helpers import FIXTURES, REPO

_TOKEN = re.compile(r'\s*(?:(->|--|[{}\[\];,=])|("(?:[^"\\]|\\.)*")|([A-Za-z_\x80-\uffff][\w\x80-\uffff]*|-?(?:\.\d+|\d+(?:\.\d*)?)))',
                    re.S)


def _tokens(text: str) -> list[str]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        assert match, f"DOT syntax error at {text[pos:pos + 40]!r}"
        out.append(match.group(match.lastindex))
        pos = match.end()
    return out


def parse_dot(text: str) -> dict:
    """A reader for the DOT subset rlgraph writes: graph, subgraph, node, edge and attribute statements."""
    tokens = _tokens(text)
    result = {"nodes": {}, "edges": [], "clusters": {}, "graph": {}}
    i = 0

    def take(expected: str | None = None) -> str:
        nonlocal i
        token = tokens[i]
        assert expected is None or token == expected, f"expected {expected!r}, got {token!r} at token {i}"
        i += 1
        return token

    def ident(token: str) -> str:
        assert token not in "{}[];,=" and token not in ("->", "--"), f"expected an ID, got {token!r}"
        return bytes(token[1:-1], "utf-8").decode("unicode_escape") if token.startswith('"') else token

    def attrs() -> dict:
        out = {}
        take("[")
        while tokens[i] != "]":
            key = ident(take())
            take("=")
            out[key] = ident(take())
            if tokens[i] in (",", ";"):
                take()
        take("]")
        return out

    def statements(scope: list[list[str]]) -> None:
        nonlocal i
        take("{")
        while tokens[i] != "}":
            token = take()
            if token in ("subgraph", "{"):
                name = ""
                if token == "subgraph":
                    name = ident(take()) if tokens[i] != "{" else ""
                else:
                    i -= 1  # an anonymous subgraph `{ ... }`
                members: list[str] = []
                statements(scope + [members])
                if name.startswith("cluster"):
                    result["clusters"][name] = members
            elif token in ("graph", "node", "edge") and tokens[i] == "[":
                values = attrs()
                if token == "graph":
                    result["graph"].update(values)
            elif tokens[i] == "=":
                take("=")
                ident(take())
            else:
                chain = [ident(token)]
                while tokens[i] == "->":
                    take("->")
                    chain.append(ident(take()))
                values = attrs() if tokens[i] == "[" else {}
                if len(chain) == 1:
                    result["nodes"][chain[0]] = values
                    for members in scope:
                        members.append(chain[0])
                else:
                    result["edges"] += [(a, b, values) for a, b in zip(chain, chain[1:])]
            if i < len(tokens) and tokens[i] == ";":
                take(";")
        take("}")

    take("digraph")
    if tokens[i] != "{":
        ident(take())
    statements([])
    assert i == len(tokens), f"text after the graph: {tokens[i:]}"
    return result


def _plan(path):
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan

    return build_plan(compile_spec(str(path)))


def test_dot_has_calls_fields_syncs_and_a_cluster_per_process_group():
    plan = _plan(FIXTURES / "rm_2x8.rl")
    dot = parse_dot(render_dot(plan))
    assert set(dot["nodes"]) == {c.id for c in plan.calls} | {"data"}
    clusters = dot["clusters"]
    assert set(clusters) == {"cluster_driver", "cluster_actor", "cluster_actor__actor", "cluster_actor__rollout",
                             "cluster_actor__ref", "cluster_actor__critic", "cluster_reward_model",
                             "cluster_reward_model__reward_model"}
    assert set(clusters["cluster_driver"]) == {"kl_penalty", "gae"}
    assert set(clusters["cluster_actor"]) == {"rollout.generate", "actor.log_prob", "actor.update", "ref.log_prob",
                                              "critic.values", "critic.update"}
    assert clusters["cluster_reward_model"] == ["reward_model.score"]
    edges = {(a, b): attrs for a, b, attrs in dot["edges"]}
    assert edges["data", "rollout.generate"]["label"] == "prompts"
    assert edges["rollout.generate", "reward_model.score"]["label"] == "responses"
    assert edges["gae", "actor.update"]["label"] == "advantages"
    sync = edges["actor.update", "rollout.generate"]
    assert sync["style"] == "dashed" and sync["label"] == "sync weights"


def test_dot_reader_rejects_broken_text():
    with pytest.raises(AssertionError):
        parse_dot('digraph { "a" -> ; }')


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed")
def test_graphviz_accepts_it():
    text = render_dot(_plan(REPO / "specs" / "ppo_arith.rl"))
    done = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "<svg" in done.stdout


def test_a_calls_arguments_are_read_off_its_settings():
    """view.call_arguments, what the dot labels and html tooltips show: the signature's keywords from the call's
    settings, defaults shown, unset ones and those the call takes from its role left out."""
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan
    from rlgraph.plan.view import call_arguments

    def arguments(spec: str) -> dict:
        plan = build_plan(compile_spec(str(REPO / "specs" / spec)))
        return {c.id: call_arguments(plan, c) for c in plan.calls}

    remax = arguments("remax_arith.rl")
    assert remax["rollout.generate"] == {}  # n and temperature are the rollout's
    assert remax["rollout.generate#2"] == {"n": 1, "temperature": 0.0}
    assert remax["exact"] == {}  # a rule reward takes none
    update = arguments("dapo_arith.rl")["actor.update"]
    assert update["clip_low"] == 0.2 and update["clip_high"] == 0.28 and "clip" not in update
    assert arguments("custom_transform_arith.rl")["leave_one_out"] == {"baseline_weight": 1.0}  # a declared one's args
    assert arguments("grpo_arith_tool.rl")["rollout.generate"] == {"env": "calc"}
    assert arguments("ppo_arith.rl")["gae"] == {"gamma": 1.0, "lam": 0.95}
