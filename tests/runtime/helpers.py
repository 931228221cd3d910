"""Helpers for the runtime tests."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPECS = REPO / "specs"


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def killed_after(run_dir: Path, into: Path, step: int) -> Path:
    """A copy of a finished run's folder as the run would be left if it were killed right after its step-`step`
    checkpoint: the later checkpoints gone, the later steps' metrics and samples lines still there (a resume
    must cut them back). A resume test compares a resume of this folder with the run it was copied from, and
    saves the shorter run it would otherwise train first (each run pays its processes' start-up)."""
    shutil.copytree(run_dir, into)
    for checkpoint in (into / "checkpoints").glob("step_*"):
        if int(checkpoint.name.removeprefix("step_")) > step:
            shutil.rmtree(checkpoint)
    assert (into / "checkpoints" / f"step_{step}").is_dir(), f"{run_dir} kept no step_{step} checkpoint"
    return into


def fast(steps: int = 2, batch_size: int = 16, checkpoint_every: int = 0, validate_every: int = 0, **extra) -> list[str]:
    """Overrides that keep a run to a few seconds (by default validation only before the first and after
    the last step, a checkpoint only at the end); `extra` are more `key=value` overrides."""
    overrides = {"train.steps": steps, "data.batch_size": batch_size, "train.validate_every": validate_every,
                 "train.checkpoint_every": checkpoint_every, **extra}
    out = []
    for key, value in overrides.items():
        out += ["-s", f"{key}={value}"]
    return out


def plan_from_spec(spec: str | Path, *overrides: str):
    """The Plan of `spec` with `-s key=value` overrides, as `rlgraph plan` makes it."""
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import plan_spec

    plan, diagnostics = plan_spec(compile_spec(str(spec), list(overrides)))
    assert plan.ok, [d.to_json() for d in diagnostics]
    return plan


class Started:
    """A plan lowered onto the test session's Ray (processes built, data-parallel groups joined)."""

    def __init__(self, plan, model_paths: dict | None = None, process_class: type | None = None) -> None:
        from rlgraph.runtime.lowering import Lowered
        from rlgraph.runtime.preflight import preflight
        from rlgraph.runtime.roles import worker_specs

        self.plan = plan
        self.prepared = preflight(plan, starting_locally=False)
        self.specs = worker_specs(plan, model_paths or self.prepared.model_paths)
        self.lowered = Lowered()
        self.process_class = process_class  # None: the production DeviceProcess (tests/runtime/faults.py has another)

    def __enter__(self) -> "Started":
        from rlgraph.runtime.lowering import lower
        from rlgraph.runtime.process import DeviceProcess

        try:
            lower(self.plan, self.specs, self.lowered, timeout_s=60, process_class=self.process_class or DeviceProcess)
        except BaseException:
            self.lowered.shutdown()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.lowered.shutdown()


def make_reward_model(base: str | Path, out: Path) -> Path:
    """A sequence classifier (num_labels = 1) on `base`'s body and tokenizer, its score head seeded: the
    plumbing of a reward-model role, not a judge of anything."""
    import torch
    from transformers import AutoTokenizer, LlamaForSequenceClassification

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = LlamaForSequenceClassification.from_pretrained(base, num_labels=1)
        torch.nn.init.normal_(model.score.weight, std=0.5)
    model.config.pad_token_id = AutoTokenizer.from_pretrained(base).pad_token_id
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(base).save_pretrained(out)
    return out
