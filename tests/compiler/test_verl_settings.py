"""The settings verl users write (issue 12): several data files, epochs, warm-up ratio, validation sampling,
top_k = -1, per-call log-prob micro-batches; and the checks around them: a wrong value reported once and
nothing computed from a default in its place, model and data paths checked without importing anything."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlgraph.compiler import compile_spec
from rlgraph.plan.build import plan_spec

GRPO = """\
rlgraph 1
model policy {{ path = {path} }}
pool main {{ nodes = 1  devices_per_node = 2  device = cpu }}
role actor {{ model = policy  pool = main  replicas = 2  micro_batch = 8  optim {{ lr = 1e-5 {optim} }} }}
role rollout {{ colocate = actor  n = 4  max_new_tokens = 6 {rollout} }}
role ref {{ model = policy  colocate = actor }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = {train}  val = "builtin:arith/val"  batch_size = 32 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  responses -> ref.log_prob{ref_args} -> ref_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages, ref_log_prob -> actor.update(minibatch = 4, kl_coef = 0.001)
}}
train {{ {train_block} }}
"""

# 7B on one node of 8 x 80 GiB: fits sharded (fsdp), not replicated (ddp: 16 B/param on every device)
BIG = """\
rlgraph 1
model policy { path = "builtin:arith-gpt"  params = 7B }
pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }
role actor { model = policy  pool = gpus  replicas = 8  strategy = STRATEGY  dtype = bf16  micro_batch = 4 }
role rollout { colocate = actor  n = 4  dtype = bf16 }
reward exact { fn = "rlgraph.tasks.arith:exact_match" }
data { train = "builtin:arith/train"  batch_size = 32 }
step {
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}
"""


def write(tmp_path: Path, path='"builtin:arith-gpt"', optim="", rollout="", train='"builtin:arith/train"',
          ref_args="", train_block="steps = 10", text: str | None = None) -> str:
    file = tmp_path / "spec.rl"
    file.write_text(text if text is not None else GRPO.format(path=path, optim=optim, rollout=rollout, train=train,
                                                                ref_args=ref_args, train_block=train_block))
    return str(file)


def codes(diagnostics) -> list[str]:
    return [d.code for d in diagnostics]


# ---- a wrong value: one error, nothing computed from a default in its place -----------------------


def test_a_wrongly_typed_n_is_one_error_without_a_micro_batch_error_for_n_1(tmp_path):
    spec = write(tmp_path)
    # with n = 1 (the default a wrong value used to fall back to) the micro-batch does not divide: 4 prompts
    # x 1 / 2 replicas = 2 samples per replica, micro_batch = 8
    assert "batch-divisibility" in codes(plan_spec(compile_spec(spec, ["rollout.n=1"]))[1])
    _, diagnostics = plan_spec(compile_spec(spec, ["rollout.n=5.0"]))
    assert [(d.code, d.span.file) for d in diagnostics] == [("wrong-type", "<override 1>")]


def test_an_unknown_strategy_is_one_error_without_an_out_of_memory_computed_for_ddp(tmp_path):
    assert "out-of-memory" in codes(plan_spec(compile_spec(write(tmp_path, text=BIG.replace("STRATEGY", "ddp"))))[1])
    assert codes(plan_spec(compile_spec(write(tmp_path, text=BIG.replace("STRATEGY", "fsdp"))))[1]) == []
    plan, diagnostics = plan_spec(compile_spec(write(tmp_path, text=BIG.replace("STRATEGY", "megatron"))))
    assert codes(diagnostics) == ["wrong-type"]
    assert "megatron" in diagnostics[0].message or "`ddp`, `fsdp`" in diagnostics[0].message
    assert [p.role for p in plan.placements].count("actor") == 8  # placement does not read the strategy


def test_a_wrong_value_leaves_the_other_checks_running(tmp_path):
    # a wrong top_p is one error; the undeclared role in the step is still reported
    spec = write(tmp_path, rollout="top_p = 2")
    text = Path(spec).read_text().replace("responses -> exact", "responses -> exakt")
    Path(spec).write_text(text)
    assert sorted(codes(compile_spec(spec).diagnostics)) == ["unknown-call", "wrong-type"]


def test_a_wrong_call_argument_is_one_error(tmp_path):
    spec = write(tmp_path)
    text = Path(spec).read_text().replace("minibatch = 4,", "minibatch = 4.5,")
    Path(spec).write_text(text)
    plan, diagnostics = plan_spec(compile_spec(spec))
    assert codes(diagnostics) == ["wrong-type"]
    assert next(c for c in plan.calls if c.label == "actor.update").settings is None  # never run, never made up


# ---- paths ---------------------------------------------------------------------------------------


def test_a_data_file_that_is_not_there_is_an_error_at_its_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path, train='["builtin:arith/train", "task/nope.parquet"]')
    diagnostics = compile_spec(spec).diagnostics
    assert codes(diagnostics) == ["data-path"]
    d = diagnostics[0]
    assert d.message == "data.train: there is no file `task/nope.parquet`"
    line = Path(spec).read_text().splitlines()[d.span.line - 1]
    assert line[d.span.column - 1:].startswith('"task/nope.parquet"')  # the item, not the list


def test_data_files_that_are_there_pass_and_are_read_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.parquet").write_text("")
    plan, diagnostics = plan_spec(compile_spec(write(tmp_path, train='["b.parquet", "a.jsonl", "builtin:arith/train"]')))
    assert codes(diagnostics) == []
    assert plan.data.train == ("b.parquet", "a.jsonl", "builtin:arith/train")
    assert plan.data.val == ("builtin:arith/val",)


@pytest.mark.parametrize("name, message", [
    ("builtin:arith/tran", "data.train: built-in task `arith` has no split `tran`"),
    ("builtin:arth/train", "data.train: `builtin:arth/train` is not a built-in data set"),
    ("prompts.csv", "data.train: `prompts.csv` is not a .parquet or .jsonl file"),
])
def test_bad_data_names_are_errors(tmp_path, name, message):
    diagnostics = compile_spec(write(tmp_path, train=f'"{name}"')).diagnostics
    assert [(d.code, d.message) for d in diagnostics] == [("data-path", message)]


def test_a_model_folder_that_is_not_there_is_one_error_and_no_params_advice(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, diagnostics = plan_spec(compile_spec(write(tmp_path, path='"./models/qwen"')))
    assert codes(diagnostics) == ["model-path"]  # no `memory-unknown` asking for `params = 7B`
    assert diagnostics[0].message == "model `policy`: there is no folder `./models/qwen`"
    assert diagnostics[0].span.line == 2


def test_a_model_folder_without_a_readable_config_is_an_error(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "config.json").write_text("{not json")
    diagnostics = compile_spec(write(tmp_path, path='"weights"')).diagnostics
    assert codes(diagnostics) == ["model-path"]
    assert "has no readable config.json (not valid JSON" in diagnostics[0].message
    (tmp_path / "weights" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    assert codes(compile_spec(write(tmp_path, path='"weights"')).diagnostics) == []


def test_a_hub_id_is_accepted_with_the_model_blocks_figures_and_a_note(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = BIG.replace("STRATEGY", "fsdp").replace('path = "builtin:arith-gpt"  params = 7B',
                                                   'path = "Qwen/Qwen2-7B-Instruct"  params = 7B  layers = 28  '
                                                   'hidden = 3584  heads = 28  kv_heads = 4')
    plan, diagnostics = plan_spec(compile_spec(write(tmp_path, text=text)))
    assert [(d.code, d.severity) for d in diagnostics] == [("remote-model", "note")]
    assert "must be in a folder of this name where the run happens" in " ".join(diagnostics[0].hints)
    assert plan.memory and max(row.estimated_bytes for row in plan.memory) > 7e9 * 16 / 8  # 7B, sharded over 8


def test_tp_beyond_a_node_is_an_error(tmp_path):
    text = BIG.replace("STRATEGY", "fsdp").replace("role rollout { colocate = actor",
                                                   "role rollout { pool = gpus  replicas = 1  tp = 16")
    text = text.replace("replicas = 8  strategy", "replicas = 4  strategy")
    assert "placement" in codes(compile_spec(write(tmp_path, text=text)).diagnostics) + \
        codes(plan_spec(compile_spec(write(tmp_path, text=text)))[1])


# ---- epochs, warm-up ratio, validation sampling, top_k = -1 --------------------------------------


def test_epochs_leave_the_steps_to_the_run_and_the_plan_says_so(tmp_path):
    from rlgraph.plan.view import summary

    plan, diagnostics = plan_spec(compile_spec(write(tmp_path, train_block="epochs = 3", optim="warmup_ratio = 0.1")))
    assert codes(diagnostics) == []
    assert (plan.train.steps, plan.train.epochs) == (None, 3)
    assert plan.role("actor").settings.optim.warmup_ratio == 0.1  # warm-up steps follow once the steps are known
    assert "epochs = 3" in summary(plan)


def test_steps_win_over_epochs_with_a_warning_and_resolve_the_warmup_ratio(tmp_path):
    plan, diagnostics = plan_spec(compile_spec(write(tmp_path, train_block="steps = 50  epochs = 3",
                                                     optim="warmup_ratio = 0.1")))
    assert codes(diagnostics) == ["setting-ignored"]
    assert (plan.train.steps, plan.train.epochs) == (50, None)
    assert plan.role("actor").settings.optim.warmup_steps == 5  # int(0.1 x 50), verl's rounding


def test_warmup_steps_and_ratio_together_are_an_error(tmp_path):
    diagnostics = compile_spec(write(tmp_path, optim="warmup_steps = 3  warmup_ratio = 0.1")).diagnostics
    assert codes(diagnostics) == ["conflicting-keys"]


def test_validation_sampling_and_top_k_minus_one(tmp_path):
    plan, diagnostics = plan_spec(compile_spec(write(
        tmp_path, rollout="top_k = -1  val { temperature = 0.6  top_p = 0.95  top_k = -1  n = 4 }")))
    assert codes(diagnostics) == []
    rollout = plan.role("rollout").settings
    assert rollout.top_k == 0
    assert (rollout.val.n, rollout.val.temperature, rollout.val.top_p, rollout.val.top_k) == (4, 0.6, 0.95, 0)


def test_validation_defaults_are_greedy_and_val_samples_is_val_n(tmp_path):
    greedy = plan_spec(compile_spec(write(tmp_path)))[0].role("rollout").settings.val
    assert (greedy.n, greedy.temperature) == (1, 0.0)
    sampled = plan_spec(compile_spec(write(tmp_path, train_block="steps = 10  val_samples = 3")))[0]
    assert (sampled.role("rollout").settings.val.n, sampled.role("rollout").settings.val.temperature) == (3, 1.0)
    both = compile_spec(write(tmp_path, rollout="val { n = 4 }", train_block="steps = 10  val_samples = 3"))
    assert codes(both.diagnostics) == ["conflicting-keys"]


def test_a_val_block_belongs_to_the_rollout(tmp_path):
    spec = write(tmp_path)
    Path(spec).write_text(Path(spec).read_text().replace("role ref { model = policy",
                                                         "role ref { model = policy  val { n = 2 }"))
    assert codes(compile_spec(spec).diagnostics) == ["unknown-key"]


# ---- per-call micro-batches of forward passes --------------------------------------------------------


def test_a_log_prob_call_takes_its_own_micro_batch(tmp_path):
    plan, diagnostics = plan_spec(compile_spec(write(tmp_path, ref_args="(micro_batch = 2)")))
    assert codes(diagnostics) == []
    calls = {c.label: c.settings for c in plan.calls}
    assert (calls["ref.log_prob"].micro_batch, calls["ref.log_prob"].micro_batch_tokens) == (2, None)
    assert calls["actor.log_prob"].micro_batch == 8  # the role's
    tokens = plan_spec(compile_spec(write(tmp_path, ref_args="(micro_batch_tokens = 512)")))[0]
    ref = next(c for c in tokens.calls if c.label == "ref.log_prob").settings
    assert (ref.micro_batch, ref.micro_batch_tokens) == (None, 512)


def test_a_call_token_budget_below_one_sequence_or_beside_micro_batch_is_an_error(tmp_path):
    short = compile_spec(write(tmp_path, ref_args="(micro_batch_tokens = 16)")).diagnostics
    assert codes(short) == ["token-budget"] and "less than one whole sequence" in short[0].message
    both = compile_spec(write(tmp_path, ref_args="(micro_batch = 2, micro_batch_tokens = 512)")).diagnostics
    assert codes(both) == ["token-budget"]
