"""A LoRA run end to end: exact resume, a checkpoint peft loads, and `rlgraph export` of a model that answers."""

from __future__ import annotations

import json

import pytest
import torch

from .helpers import REPO, fast, killed_after, plan_from_spec, read_metrics

SPEC = "specs/grpo_arith_lora.rl"  # LoRA actor, ref = its base, rollout in place


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("lora")


def adapters(folder):
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def export(*args) -> tuple[int, str]:
    import contextlib
    import io

    from rlgraph.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["export", *map(str, args)])
    return code, out.getvalue() + err.getvalue()


def answers(folder) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlgraph.models.eval import greedy_accuracy
    from rlgraph.tasks.arith import make_rows

    model = AutoModelForCausalLM.from_pretrained(folder)
    return greedy_accuracy(model, AutoTokenizer.from_pretrained(folder), make_rows("val")[:100], max_new_tokens=4)


def test_the_ref_of_a_lora_actor_is_its_base_only_where_it_shares_its_process(tmp_path):
    from rlgraph.runtime.roles import BASE, worker_specs

    ref = worker_specs(plan_from_spec(REPO / SPEC), {})["ref"]
    assert (ref.worker, ref.alias_of) == (BASE, "actor")
    assert worker_specs(plan_from_spec(REPO / "specs/grpo_arith.rl"), {})["ref"].worker == "policy"  # full FT
    text = (REPO / SPEC).read_text().replace('"common/', f'"{REPO}/specs/common/')
    own = tmp_path / "own.rl"
    own.write_text(text.replace("role ref { model = policy  colocate = actor }",
                                "pool refs { nodes = 1  devices_per_node = 1 }\nrole ref { model = policy  pool = refs }"))
    assert worker_specs(plan_from_spec(own), {})["ref"].worker == "policy"  # its own devices: a copy of the base


def test_lora_run_resumes_bit_identical(run_cli, runs):
    full, part = runs / "full", runs / "part"
    code, out = run_cli(SPEC, "--output", full, *fast(steps=4, checkpoint_every=2))
    assert code == 0, out
    killed_after(full, part, step=2)
    code, out = run_cli(SPEC, "--output", part, *fast(steps=4, checkpoint_every=2))
    assert code == 0, out
    assert "resuming from" in out and "step 2" in out

    folder = full / "checkpoints" / "step_4" / "actor"
    assert (folder / "adapter_config.json").is_file() and not (folder / "model.safetensors").exists()
    a, b = adapters(folder), adapters(part / "checkpoints" / "step_4" / "actor")
    assert a.keys() == b.keys() and all("lora_" in k for k in a)
    assert not [k for k in a if not torch.equal(a[k], b[k])]
    full_metrics, part_metrics = read_metrics(full), read_metrics(part)
    assert full_metrics[-1]["actor/pg_loss"] == part_metrics[-1]["actor/pg_loss"]
    assert full_metrics[-1]["actor/kl_loss"] != 0  # the ref (the base) and the actor (adapters on) differ


def test_lora_checkpoint_loads_with_peft_and_exports_a_model_that_answers(runs, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    folder = runs / "full" / "checkpoints" / "step_4" / "actor"
    if not folder.is_dir():
        pytest.skip("needs the run of test_lora_run_resumes_bit_identical")
    base_path = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base_path), str(folder)).eval()

    code, out = export(runs / "full", "--out", tmp_path / "merged")
    assert code == 0, out
    assert "step_4" in out and "LoRA rank 16 merged" in out
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    assert not any("lora" in name for name, _ in merged.named_parameters())
    ids = torch.tensor([[4, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids=ids).logits, peft_model(input_ids=ids).logits, atol=1e-5, rtol=0)
    assert answers(tmp_path / "merged") > 0


def test_export_of_a_full_fine_tuning_run_and_its_errors(run_cli, runs, tmp_path):
    run = runs / "full-ft"
    code, out = run_cli("specs/grpo_arith.rl", "--output", run, *fast(steps=1))
    assert code == 0, out
    code, out = export(run / "checkpoints" / "step_1", "--out", tmp_path / "model")
    assert code == 0, out
    assert answers(tmp_path / "model") > 0

    code, out = export(tmp_path / "nothing", "--out", tmp_path / "x")
    assert code == 1 and "does not exist" in out
    (tmp_path / "empty-run").mkdir()
    code, out = export(tmp_path / "empty-run", "--out", tmp_path / "x")
    assert code == 1 and "has no checkpoint to export" in out
    code, out = export(run, "--out", tmp_path / "model")
    assert code == 1 and "is not an empty folder" in out
    code, out = export(run, "--role", "critic", "--out", tmp_path / "y")
    assert code == 1 and "no model of role `critic`" in out and "`actor`" in out
