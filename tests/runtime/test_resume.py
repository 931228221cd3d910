"""Checkpoints: a run killed after a checkpoint and resumed ends bit-identical to one that never
stopped (the killed run: a copy of the unbroken one without its last checkpoint, `killed_after`; a run stopped
by its own train.steps and extended: test_resume_changes.py), and a checkpoint's actor folder is a plain Hugging Face model that answers the task."""

from __future__ import annotations

import pytest
import torch

from .helpers import fast, killed_after, read_metrics

SPEC = "specs/ppo_arith.rl"  # actor, critic, ref and an in-place rollout: every kind of state


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return tmp_path_factory.mktemp("resume")


def weights(folder):
    from safetensors.torch import load_file

    out = {}
    for file in sorted(folder.glob("*.safetensors")):
        out.update({f"{file.name}:{k}": v for k, v in load_file(file).items()})
    assert out
    return out


FSDP = ("-s", "main.devices_per_node=2", "-s", "actor.replicas=2", "-s", "actor.strategy=fsdp",
        "-s", "critic.strategy=fsdp")  # sharded: every rank gathers, rank 0 writes the whole state


@pytest.mark.parametrize("layout", [(), FSDP], ids=["one-replica", "fsdp-2-replicas"])
def test_resumed_run_ends_bit_identical(run_cli, runs, layout):
    suffix = "-fsdp" if layout else ""  # the one-replica run's folders are reused by the tests below
    full, part = runs / f"full{suffix}", runs / f"part{suffix}"
    code, out = run_cli(SPEC, "--output", full, *fast(steps=2, checkpoint_every=1), *layout)
    assert code == 0, out
    killed_after(full, part, step=1)
    code, out = run_cli(SPEC, "--output", part, *fast(steps=2, checkpoint_every=1), *layout)
    assert code == 0, out
    assert "resuming from" in out and "(step 1)" in out

    assert [r["training/global_step"] for r in read_metrics(part)] == [0, 1, 2]
    for role in ("actor", "critic"):
        a, b = weights(full / "checkpoints" / "step_2" / role), weights(part / "checkpoints" / "step_2" / role)
        assert a.keys() == b.keys()
        different = [k for k in a if not torch.equal(a[k], b[k])]
        assert not different, f"{role}: {different[:5]}"
    full_metrics, part_metrics = read_metrics(full), read_metrics(part)
    assert full_metrics[-1]["critic/score/mean"] == part_metrics[-1]["critic/score/mean"]


def test_checkpoint_is_an_hf_model_that_answers(runs, arith_model):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlgraph.models.eval import greedy_accuracy
    from rlgraph.tasks.arith import make_rows

    folder = runs / "full" / "checkpoints" / "step_2" / "actor"
    if not folder.is_dir():
        pytest.skip("needs the run of test_resumed_run_ends_bit_identical")
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert greedy_accuracy(model, tokenizer, make_rows("val")[:200], max_new_tokens=4) > 0
    kept = sorted(p.name for p in (runs / "full" / "checkpoints").iterdir())
    assert kept == ["step_1", "step_2"]  # keep_checkpoints = 2
    state = torch.load(runs / "full" / "checkpoints" / "step_2" / "optim" / "actor.pt", weights_only=True)
    assert {"optimizer", "scheduler"} <= set(state)


def test_resuming_a_finished_run_does_nothing(run_cli, runs):
    code, out = run_cli(SPEC, "--output", runs / "full", *fast(steps=2, checkpoint_every=1))
    assert code == 0, out
    assert "already trained to step 2" in out and "ray:" not in out
