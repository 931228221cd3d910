"""Metrics named as verl names them, written to metrics.jsonl (one object per step), always, and to the
loggers the spec names in `train.loggers` (TensorBoard, wandb, mlflow: rlgraph/runtime/loggers.py).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import torch

from rlgraph.plan.model import CallPlan
from rlgraph.runtime.checkpoint import PLAN, writing
from rlgraph.runtime.loggers import Loggers

METRICS_FILE = "metrics.jsonl"

# (role kind, method) -> verl's timing name
_ROLE_TIMING = {
    ("rollout", "generate"): "gen",
    ("actor", "log_prob"): "old_log_prob",
    ("ref", "log_prob"): "ref",
    ("ref", "top_k"): "ref",  # a teacher's scoring of the student's samples, as verl times a reference's
    ("critic", "values"): "values",
    ("critic", "update"): "update_critic",
    ("actor", "update"): "update_actor",
    ("actor", "distill"): "update_actor",
    ("reward_model", "score"): "reward",
    ("judge", "score"): "reward",  # a generative reward model, as verl times its GenRM's
}


def timing_name(call: CallPlan) -> str:
    """verl's `timing_s/...` name of a call: generate->gen, reward->reward, transforms->adv, ..."""
    if call.kind == "reward":
        return "reward"
    if call.kind == "transform":
        return "adv"
    return _ROLE_TIMING.get((call.role_kind, call.method), f"{call.role_kind}_{call.method}")


def _masked_stats(name: str, values: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    valid = values[mask.bool()]
    if valid.numel() == 0:
        return {}
    return {f"{name}/mean": valid.float().mean().item(), f"{name}/max": valid.max().item(), f"{name}/min": valid.min().item()}


def _stats(name: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    return {f"{name}/mean": values.mean().item(), f"{name}/max": values.max().item(), f"{name}/min": values.min().item()}


def batch_metrics(rollout: Any, semantic: dict[str, torch.Tensor]) -> dict[str, float]:
    """verl's data metrics: sequence scores and rewards, advantages, returns and values over the loss
    mask's tokens, response and prompt lengths. `semantic` holds the step's tensors by port meaning.

    response_length counts the loss mask's tokens (the model's own, not those an environment inserted);
    its clip_ratio is the share of samples that fill every response column (cut at max length)."""
    mask = rollout.loss_mask  # (batch, R)
    metrics: dict[str, float] = {}
    # over the rows with a score: a judge's verdict that held none is NaN (rlgraph/workers/judge.py)
    if "scores" in semantic and (scores := _scored(semantic["scores"])).numel():
        metrics |= _stats("critic/score", scores)
    rewards = semantic.get("rewards", semantic.get("scores"))
    if rewards is not None and (rewards := _scored(rewards)).numel():
        metrics |= _stats("critic/rewards", rewards)
    for name in ("advantages", "returns", "values"):
        if name in semantic:
            metrics |= _masked_stats(f"critic/{name}", semantic[name], mask)
    response_length = mask.sum(-1).float()  # (batch,)
    prompt_length = rollout.attention_mask[:, : rollout.prompt_length].sum(-1).float()
    metrics |= _stats("response_length", response_length)
    metrics["response_length/clip_ratio"] = (rollout.attention_mask[:, -1] == 1).float().mean().item()
    metrics |= _stats("prompt_length", prompt_length)
    if "advantages" in semantic:
        metrics |= zero_advantage_metrics(semantic["advantages"], mask, rollout.uid)
    return metrics | episode_metrics(rollout)


def _scored(token_scores: torch.Tensor) -> torch.Tensor:
    """(rows with a score,) each row's sequence score."""
    rows = token_scores.sum(-1)
    return rows[~torch.isnan(rows)]


def zero_advantage_metrics(advantages: torch.Tensor, mask: torch.Tensor, uid: list[int]) -> dict[str, float]:
    """The groups (a prompt's samples) whose every trained token has advantage 0: they teach the policy nothing
    from the reward. A group estimator (GRPO, RLOO) gives exactly 0 (its group means are float64) to a group
    whose samples all got the same score; ReMax, REINFORCE++ and GAE rarely do.
    batch/zero_advantage_groups: their share of the step's groups; batch/zero_advantage_step: 1 when every
    group is one (the step's update moves the policy by its KL and entropy terms alone)."""
    zero_rows = ((advantages.abs() <= 1e-8) | ~mask.bool()).all(-1)  # (batch,)
    groups: dict[int, bool] = {}
    for prompt, zero in zip(uid, zero_rows.tolist()):
        groups[int(prompt)] = groups.get(int(prompt), True) and zero
    if not groups:
        return {}
    zero_groups = sum(groups.values())
    return {"batch/zero_advantage_groups": zero_groups / len(groups),
            "batch/zero_advantage_step": float(zero_groups == len(groups))}


def episode_metrics(rollout: Any, prefix: str = "") -> dict[str, float]:
    """What the environment episodes of a multi-turn rollout did (none for one turn): turns per sample (verl's
    num_turns), tool calls per sample and the share of samples that made one, tool errors per sample and their
    share of the calls, failed samples, the seconds the batch waited on its environment, and response tokens
    the model generated vs tokens the environment inserted (per sample)."""
    episodes = getattr(rollout, "episodes", None)
    if not episodes:
        return {}

    def column(name: str) -> torch.Tensor:
        return torch.tensor([float(getattr(e, name)) for e in episodes])

    calls, errors, failed = column("tool_calls"), column("tool_errors"), column("failed")
    metrics = _stats("num_turns", column("turns")) | _stats("tool_calls", calls) | {
        "tool_calls/rate": (calls > 0).float().mean().item(),
        "tool_errors/mean": errors.mean().item(),
        "tool_errors/rate": (errors.sum() / calls.sum()).item() if calls.sum() > 0 else 0.0,
        "env/failed": failed.sum().item(),
        "env/failed_fraction": failed.mean().item(),
        "env/reward/mean": column("env_reward").mean().item(),
        "response_length/model_tokens_mean": column("model_tokens").mean().item(),
        "response_length/env_tokens_mean": column("env_tokens").mean().item(),
    }
    if not prefix:
        metrics["timing_s/env"] = rollout.env_seconds
    return {f"{prefix}{name}": value for name, value in metrics.items()}


class MetricsWriter:
    """Appends one JSON object per step to metrics.jsonl; sends its numbers to the spec's loggers too.

    Each line is on disk (flushed and fsync'd) when `write` returns: the loop writes a step's line before
    it publishes the step's checkpoint, so a resume from that checkpoint never misses the line, and cuts
    the lines after the checkpoint's step (written, but their checkpoint was not), so none is doubled."""

    def __init__(self, run_dir: Path, keep_up_to_step: int | None, loggers: tuple[str, ...] | None = None) -> None:
        """`loggers`: the spec's `train.loggers`; None reads them from the plan.json the run wrote in `run_dir`."""
        self.path = run_dir / METRICS_FILE
        self.records = cut_jsonl(self.path, "training/global_step", keep_up_to_step)
        self.loggers = Loggers(_plan_loggers(run_dir) if loggers is None else loggers, run_dir, keep_up_to_step)

    def write(self, record: dict[str, Any]) -> None:
        record = {k: _plain(v) for k, v in record.items()}
        with writing(self.path), self.path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())  # ~1 ms a step; what lets the checkpoint after it be published
        self.records.append(record)
        self.loggers.log(record)

    def close(self) -> None:
        self.loggers.close()


def cut_jsonl(path: Path, step_key: str, keep_up_to_step: int | None, create: bool = True) -> list[dict[str, Any]]:
    """The records of a per-step JSON-lines file (metrics.jsonl, samples.jsonl) up to `keep_up_to_step`, the file
    rewritten to hold just them: a resumed run (a recovery too) writes the steps after its checkpoint again, and a
    fresh one (None) starts an empty file. A new file renamed over the old one: a crash here leaves one of the two
    whole, never half of one. `create` False: a missing file stays missing."""
    if not create and not path.is_file():
        return []
    kept = [r for r in read_metrics(path)
            if keep_up_to_step is not None and isinstance(r, dict) and r.get(step_key, 0) <= keep_up_to_step]
    tmp = path.with_name(f".{path.name}.tmp")
    with writing(tmp):
        with tmp.open("w", encoding="utf-8") as f:  # as written: samples keep a user's text unescaped
            f.write("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in kept))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return kept


def read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a crash
            continue
    return records


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _plan_loggers(run_dir: Path) -> tuple[str, ...]:
    """`train.loggers` of the plan the run wrote before it started (none: a Trainer used without `run`)."""
    try:
        plan = json.loads((run_dir / PLAN).read_text())
    except (OSError, ValueError):
        return ()
    return tuple(((plan.get("train") or {}).get("loggers")) or ())


def plot_curves(records: list[dict[str, Any]], path: Path) -> Path | None:
    """curves.png: the training reward and the validation score against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    reward = [(r["training/global_step"], r["critic/score/mean"]) for r in records if r.get("critic/score/mean") is not None]
    val = [(r["training/global_step"], r["val/score/mean"]) for r in records if r.get("val/score/mean") is not None]
    if not reward and not val:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if reward:
        ax.plot(*zip(*reward), label="reward (critic/score/mean)", color="tab:blue", alpha=0.8)
    if val:
        ax.plot(*zip(*val), label="validation (val/score/mean)", color="tab:orange", marker="o")
    ax.set_xlabel("step")
    ax.set_ylabel("score")
    ax.set_ylim(-0.02, 1.02) if all(0 <= y <= 1 for _, y in reward + val) else None
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    try:
        with writing(path):  # a full disk: a RunError naming the file, and no half-written picture left
            fig.savefig(tmp)
            tmp.replace(path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path
