"""Placement: devices and processes per role replica, fit checked per node, colocation shares processes."""

from __future__ import annotations

from rlgraph.plan.placement import place

from .helpers import codes, line_of, only, placed, plan_text, spec


def test_replicas_fill_node_0_first_and_ranks_follow_the_nodes(tmp_path):
    text = spec("pool main { nodes = 2  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main  replicas = 6 }\n"
                "role rollout { colocate = actor  n = 2 }", data="batch_size = 24")
    plan, diagnostics = plan_text(tmp_path, text)
    assert not [d for d in diagnostics if d.is_error]
    assert placed(plan, "actor") == [
        (0, 0, [0], "actor/0"), (1, 0, [1], "actor/1"), (2, 0, [2], "actor/2"), (3, 0, [3], "actor/3"),
        (4, 1, [0], "actor/4"), (5, 1, [1], "actor/5"),
    ]
    ranks = [(p.node, p.device) for p in plan.placements_of("actor")]
    assert ranks == sorted(ranks)  # rank order is node order: a resumed run keeps its ranks


def test_two_roots_on_one_pool_never_share_a_device(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main  replicas = 2 }\n"
                "role rollout { model = policy  pool = main  replicas = 2  n = 2 }")
    plan, diagnostics = plan_text(tmp_path, text)
    assert "placement" not in codes(diagnostics) and "oversubscribed" not in codes(diagnostics)
    assert placed(plan, "actor") == [(0, 0, [0], "actor/0"), (1, 0, [1], "actor/1")]
    assert placed(plan, "rollout") == [(0, 0, [2], "rollout/0"), (1, 0, [3], "rollout/1")]


def test_tp_takes_consecutive_devices_on_one_node(tmp_path):
    # 2 nodes x 4: three tp-2 replicas; the third goes to node 1, never across nodes
    text = spec("pool main { nodes = 2  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main  replicas = 1 }\n"
                "role rollout { model = policy  pool = main  replicas = 3  tp = 2  n = 1 }", data="batch_size = 24")
    plan, diagnostics = plan_text(tmp_path, text)
    assert "placement" not in codes(diagnostics)
    assert placed(plan, "actor") == [(0, 0, [0], "actor/0")]
    assert placed(plan, "rollout") == [
        (0, 0, [1, 2], "rollout/0"),  # first fit: node 0 still has devices 1-3
        (1, 1, [0, 1], "rollout/1"),  # node 0 has 1 left: not enough for tp 2
        (2, 1, [2, 3], "rollout/2"),
    ]
    assert plan.role("rollout").tp == 2 and plan.role("rollout").replicas == 3


def test_tp_larger_than_a_node_is_a_placement_error_at_tp(tmp_path):
    text = spec("pool main { nodes = 2  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { model = policy  pool = main  tp = 8  n = 1 }")
    plan, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "placement")
    assert "tp = 8" in d.message and "pool `main`" in d.message and "has 4" in d.message
    assert d.span.line == line_of(text, "tp = 8") and d.span.column == text.splitlines()[d.span.line - 1].index("8") + 1
    assert "lower `tp` of `rollout` to 4" in d.hints[0]
    assert placed(plan, "rollout") == [] and placed(plan, "actor") == [(0, 0, [0], "actor/0")]  # a partial plan


def test_per_node_shortage_that_a_total_count_misses(tmp_path):
    # 2 nodes x 4 = 8 devices; actor 2 + rollout 2 x tp 3 = 8 devices in total, so a total-only check
    # (verl's _check_resource_available) passes; per node, the second tp-3 replica finds no room.
    text = spec("pool main { nodes = 2  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main  replicas = 2 }\n"
                "role rollout { model = policy  pool = main  replicas = 2  tp = 3  n = 1 }")
    plan, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "oversubscribed")
    assert "pool `main` runs out of devices on node 1" in d.message
    assert "`rollout` needs 2 replicas × tp 3 = 6 devices" in d.message and "`actor` holds 2" in d.message
    assert "replica 1" in d.message
    assert d.span.line == line_of(text, "replicas = 2  tp = 3")
    hint = d.hints[0]
    assert "raise `nodes` of pool `main` from 2 to 3" in hint
    assert "raise `devices_per_node` from 4 to 5" in hint
    assert "lower `replicas` of `rollout` from 2 to 1" in hint
    assert placed(plan, "rollout") == []  # left out whole
    assert len(placed(plan, "actor")) == 2


def test_one_role_larger_than_its_pool_names_the_node_and_the_numbers(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 8 }\n"
                "role actor { model = policy  pool = main  replicas = 10 }\n"
                "role rollout { colocate = actor  n = 1 }", data="batch_size = 40")
    plan, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "placement")
    assert d.message.startswith("pool `main` runs out of devices on node 0 (its only node)")
    assert "10 devices" in d.message and "it has 8" in d.message
    assert "raise `nodes` of pool `main` from 1 to 2" in d.hints[0]
    assert "raise `devices_per_node` from 8 to 10" in d.hints[0]
    assert "lower `replicas` of `actor` from 10 to 8" in d.hints[0]
    assert d.span.line == line_of(text, "replicas = 10")
    assert plan.placements == []  # the root failed, so its colocated rollout has nowhere to go


def test_colocated_roles_share_the_roots_devices_and_processes(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main  replicas = 4 }\n"
                "role rollout { colocate = actor  tp = 2  n = 4 }\n"
                "role ref { model = policy  colocate = actor }\n"
                "role critic { model = policy  colocate = ref }")
    plan, _ = plan_text(tmp_path, text)
    actor = placed(plan, "actor")
    assert [p[3] for p in actor] == ["actor/0", "actor/1", "actor/2", "actor/3"]
    assert placed(plan, "ref") == actor  # same devices, same processes
    assert placed(plan, "critic") == actor  # a chain critic -> ref -> actor ends at the actor
    assert plan.role("critic").colocate == "actor"
    # tp-2 rollout on 4 actor replicas: replica k spans actor replicas 2k, 2k+1 and lives in actor/2k
    assert placed(plan, "rollout") == [(0, 0, [0, 1], "actor/0"), (1, 0, [2, 3], "actor/2")]
    assert plan.role("rollout").replicas == 2
    assert sorted(plan.processes()) == ["actor/0", "actor/1", "actor/2", "actor/3"]
    assert [p.role for p in plan.processes()["actor/0"]] == ["actor", "rollout", "ref", "critic"]


def test_colocated_tp_must_divide_the_roots_devices(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 4 }\n"
                "role actor { model = policy  pool = main  replicas = 3 }\n"
                "role rollout { colocate = actor  tp = 2  n = 1 }", data="batch_size = 6")
    plan, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "placement")
    assert "does not divide the 3 devices of `actor`" in d.message
    assert placed(plan, "rollout") == [] and len(placed(plan, "actor")) == 3


def test_colocated_tp_group_never_spans_nodes(tmp_path):
    text = spec("pool main { nodes = 2  devices_per_node = 3 }\n"
                "role actor { model = policy  pool = main  replicas = 6 }\n"
                "role rollout { colocate = actor  tp = 2  n = 1 }", data="batch_size = 6")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "placement")
    assert "replica 1 of `rollout` (tp = 2) would span nodes 0 and 1" in d.message


def test_sglang_on_a_cpu_pool_is_an_error_at_engine(tmp_path):
    text = spec("pool main { nodes = 1  devices_per_node = 1  device = cpu }\n"
                "role actor { model = policy  pool = main }\n"
                "role rollout { colocate = actor  engine = sglang  n = 1 }")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "placement")
    assert "engine `sglang`, which needs GPUs" in d.message and "pool `main` has device = cpu" in d.message
    assert d.span.line == line_of(text, "engine = sglang")


def test_place_returns_pools_roles_placements_diagnostics(tmp_path):
    from rlgraph.compiler import compile_spec

    path = tmp_path / "spec.rl"
    path.write_text(spec("pool main { nodes = 1  devices_per_node = 2  device = gpu  memory = 80GiB }\n"
                         "role actor { model = policy  pool = main  replicas = 2 }\n"
                         "role rollout { colocate = actor  n = 2 }"))
    pools, roles, placements, diagnostics = place(compile_spec(str(path)).program)
    assert [(p.name, p.nodes, p.devices_per_node, p.device, p.device_memory_bytes) for p in pools] == \
        [("main", 1, 2, "gpu", 80 * 2**30)]
    assert [(r.name, r.kind, r.model, r.model_path, r.replicas, r.tp, r.colocate) for r in roles] == [
        ("actor", "actor", "policy", "builtin:arith-gpt", 2, 1, None),
        ("rollout", "rollout", "policy", "builtin:arith-gpt", 2, 1, "actor"),
    ]
    assert roles[0].settings.optim.lr == 1e-6 and roles[0].pool == "main" and roles[1].pool is None
    assert len(placements) == 4 and diagnostics == []
