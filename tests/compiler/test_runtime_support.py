"""rlgraph/compiler/passes/runtime_support.py: `check` warns about what rlgraph's runtime would refuse or ignore,
and rlgraph/compiler/runtime_support.py states what the runtime implements, as the runtime itself does."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.compiler import runtime_support as support
from rlgraph.compiler.passes.runtime_support import REFUSES_RUN, refusal, runtime_support
from rlgraph.diagnostics import CODES

from .helpers import ACTOR_ONLY, GRPO_STEP, compile_text, found, line_of, only, spec

REPO = Path(__file__).resolve().parents[2]
CODES_OF_PASS = REFUSES_RUN | {"setting-ignored"}


def runtime_codes(result) -> list[tuple[str, int]]:
    return [(code, line) for code, line in found(result) if code in CODES_OF_PASS]


# ---- what the runtime cannot run ---------------------------------------------------------


def test_tp_beyond_the_hf_engine_warns_at_tp(tmp_path):
    text = spec(roles="role actor { model = policy  pool = main  replicas = 4 }\n"
                      "role rollout { colocate = actor  n = 4  tp = 2 }")
    result = compile_text(tmp_path, text)
    assert result.ok and found(result) == [("tp-not-implemented", line_of(text, "tp = 2"))]
    d = only(result, "tp-not-implemented")
    assert d.severity == "warning" and d.span.column == text.splitlines()[d.span.line - 1].index("2") + 1
    assert d.message == "engine hf runs a rollout replica on at most 1 device, but `rollout` sets tp = 2"
    assert d.hints == ("`rlgraph run` refuses the spec; remove `tp`: colocated, the rollout then has a replica on "
                       "every device it shares",)


def test_tp_on_a_rollout_of_its_own_suggests_replicas_for_the_same_devices(tmp_path):
    text = spec("  sync actor -> rollout\n" + GRPO_STEP, devices=8,
                roles=ACTOR_ONLY.replace("colocate = actor", "model = policy  pool = main  replicas = 2  tp = 2"))
    d = only(compile_text(tmp_path, text), "tp-not-implemented")
    assert d.span.line == line_of(text, "tp = 2")
    assert d.hints == ("`rlgraph run` refuses the spec; set `tp = 1` and `replicas = 4` for the same devices",)


def test_an_engine_the_runtime_lacks_warns_at_engine_and_nothing_else_about_the_rollout(tmp_path):
    text = spec(roles="role actor { model = policy  pool = main }\n"
                      "role rollout { colocate = actor  n = 4  engine = sglang  tp = 2  memory_fraction = 0.8 }")
    result = compile_text(tmp_path, text)
    # a runtime with only the hf engine
    diagnostics = runtime_support(result.program, result.graph, {"hf": support.ENGINES["hf"]})
    assert [(d.code, d.span.line) for d in diagnostics] == [("engine-not-implemented",
                                                             line_of(text, "engine = sglang"))]
    d = diagnostics[0]
    assert d.severity == "warning" and d.span.column == text.splitlines()[d.span.line - 1].index("sglang") + 1
    assert d.message == "rollout `rollout` uses engine = sglang, which this runtime does not implement"
    assert d.hints == ("`rlgraph run` refuses the spec; set `engine = hf` to run it here (engines: `hf`)",)


def test_a_second_generate_call_is_no_longer_refused(tmp_path):
    # the step driver runs every generate call of a step (ReMax's greedy baseline): rlgraph/compiler/passes/sampling.py
    roles = ACTOR_ONLY + "\nrole sampler { kind = rollout  colocate = actor  n = 2 }"
    text = spec(GRPO_STEP + "\n  prompts -> sampler.generate -> more", roles)
    assert runtime_codes(compile_text(tmp_path, text)) == []


def test_one_generate_call_is_fine(tmp_path):
    assert runtime_codes(compile_text(tmp_path, spec())) == []


# ---- settings the runtime would ignore ---------------------------------------------------


def test_memory_fraction_on_an_hf_rollout_is_ignored(tmp_path):
    text = spec(roles=ACTOR_ONLY.replace("n = 4", "n = 4  memory_fraction = 0.3"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("setting-ignored", line_of(text, "memory_fraction"))]
    d = only(result, "setting-ignored")
    assert d.severity == "warning"
    assert d.message == "this runtime ignores `memory_fraction` of `rollout`: engine hf takes the memory it needs"
    assert d.hints == ("remove `memory_fraction`",)
    assert refusal(result.diagnostics) == ""  # a run goes ahead without the setting


def test_dtype_of_a_rollout_that_generates_with_the_actor_in_place_is_ignored(tmp_path):
    text = spec(roles=ACTOR_ONLY.replace("n = 4", "n = 4  dtype = bf16"))
    d = only(compile_text(tmp_path, text), "setting-ignored")
    assert d.span.line == line_of(text, "dtype = bf16")
    assert d.message == ("this runtime ignores `dtype` of `rollout`: `rollout` generates with the module of `actor` "
                         "in place, in fp32")
    assert d.hints == ("remove `dtype`, or set `dtype = bf16` on `actor`",)


@pytest.mark.parametrize("roles", [
    # the actor's own dtype: nothing is lost
    "role actor { model = policy  pool = main  dtype = bf16 }\nrole rollout { colocate = actor  n = 4  dtype = bf16 }",
    # a rollout on its own devices loads its own copy, in its own dtype
    "role actor { model = policy  pool = main  replicas = 2 }\n"
    "role rollout { model = policy  pool = main  replicas = 2  n = 4  dtype = bf16 }",
], ids=["same-as-actor", "own-pool"])
def test_a_dtype_the_runtime_honours(tmp_path, roles):
    step = "  sync actor -> rollout\n" + GRPO_STEP
    assert runtime_codes(compile_text(tmp_path, spec(step, roles))) == []


def test_the_model_of_a_rollout_that_generates_with_the_actor_in_place_is_ignored(tmp_path):
    text = spec(roles=ACTOR_ONLY.replace("n = 4", "n = 4  model = other"),
                extra='model other { path = "builtin:arith-gpt" }')
    d = only(compile_text(tmp_path, text), "setting-ignored")
    assert d.span.line == line_of(text, "model = other")
    assert d.message == ("this runtime ignores `model` of `rollout`: `rollout` generates with the module of `actor` "
                         "in place, model `policy`")


def test_fsdp_with_one_replica_is_ignored_and_with_two_it_is_not(tmp_path):
    text = spec(roles=ACTOR_ONLY.replace("pool = main", "pool = main  strategy = fsdp"))
    d = only(compile_text(tmp_path, text), "setting-ignored")
    assert d.span.line == line_of(text, "strategy = fsdp")
    assert d.message == ("this runtime ignores `strategy` of `actor`: `actor` has one replica, so there is nothing "
                         "to shard over: it trains as ddp")
    two = text.replace("strategy = fsdp", "strategy = fsdp  replicas = 2")
    assert runtime_codes(compile_text(tmp_path, two)) == []


# ---- the table decides ---------------------------------------------------------------------


def _with_engine(tmp_path, text: str, **capabilities):
    result = compile_text(tmp_path, text)
    engine = dataclasses.replace(support.ENGINES["hf"], **capabilities)
    return sorted((d.code, d.span.line) for d in runtime_support(result.program, result.graph, {"hf": engine}))


def test_an_engine_that_honours_more_gets_no_warning(tmp_path):
    text = spec(roles="role actor { model = policy  pool = main  replicas = 2 }\n"
                      "role rollout { colocate = actor  n = 4  tp = 2  memory_fraction = 0.3 }", devices=2)
    assert len(_with_engine(tmp_path, text)) == 2
    assert _with_engine(tmp_path, text, max_tp=2, memory_fraction=True) == []


def test_kept_log_probs_need_an_engine_that_returns_them(tmp_path):
    text = spec(GRPO_STEP.replace("-> responses", "-> responses, sample_log_prob"))
    assert _with_engine(tmp_path, text) == []
    assert _with_engine(tmp_path, text, kept_log_probs=False) == [("log-probs-not-implemented",
                                                                    line_of(text, "sample_log_prob"))]


def test_a_role_kind_the_runtime_lacks(tmp_path):
    result = compile_text(tmp_path, spec())
    kinds = tuple(k for k in support.ROLE_KINDS if k != "rollout")
    got = [(d.code, d.span.line) for d in runtime_support(result.program, result.graph, role_kinds=kinds)]
    assert got == [("kind-not-implemented", line_of(spec(), "role rollout"))]


def test_the_codes_are_registered_warnings():
    for code in CODES_OF_PASS:
        assert CODES[code].severity == "warning", code  # `check` passes: the spec may be for another runtime


# ---- the shipped specs ------------------------------------------------------------------------


CPU_SPECS = sorted(REPO.glob("specs/*_arith*.rl"))


@pytest.mark.parametrize("path", CPU_SPECS, ids=[p.name for p in CPU_SPECS])
def test_the_shipped_cpu_specs_ask_only_for_what_the_runtime_has(path):
    assert runtime_codes(compile_spec(str(path))) == []


def test_the_cluster_spec_asks_only_for_what_the_runtime_has():
    # engine = sglang with tp = 2 and memory_fraction: the sglang engine honours them (where sglang is installed)
    assert runtime_codes(compile_spec(str(REPO / "specs" / "ppo_qwen7b_rm_2x8.rl"))) == []


def test_a_colocated_sglang_rollout_loads_its_own_copy_so_its_dtype_is_honoured(tmp_path):
    text = spec(roles="role actor { model = policy  pool = main }\n"
                      "role rollout { colocate = actor  n = 4  engine = sglang  dtype = bf16  memory_fraction = 0.4 }")
    result = compile_text(tmp_path, text)
    diagnostics = runtime_support(result.program, result.graph)
    assert diagnostics == []  # no "generates with the module of `actor` in place" for an engine with its own copy
    assert [name for name, engine in support.ENGINES.items() if engine.in_place] == ["hf"]


# ---- the table agrees with the runtime ---------------------------------------------------------


def test_the_engine_table_matches_the_runtimes_engines():
    from rlgraph.workers.engines import ENGINES, EngineCapabilities, engine_class

    # one table (rlgraph/contract/engines.py): what the compiler reads is what each engine class carries
    assert support.ENGINES is ENGINES and support.EngineFacts is EngineCapabilities
    for name, stated in support.ENGINES.items():
        assert engine_class(name).capabilities is stated and stated.name == name


def test_the_role_kinds_match_the_runtimes():
    from rlgraph.contract.methods import WORKERS  # the worker of each role kind the runtime builds

    assert sorted(support.ROLE_KINDS) == sorted(WORKERS)
