"""rlgraph against TRL on the same work: steps per second, and greedy accuracy after equal wall time.

    .venv/bin/python bench/bench_trl.py [--budget 60] [--seeds 2] [--val-rows 500] [--only grpo ppo] [--smoke]

GRPO: TRL 1.16 `GRPOTrainer` against `rlgraph run specs/grpo_arith.rl`; PPO: TRL 1.12
`trl.experimental.ppo.PPOTrainer` (policy, ref and value model) against `rlgraph run specs/ppo_arith.rl`.
Both sides train the built-in model (`builtin:arith-gpt`, the same folder) on `builtin:arith/train`
with the numbers of the spec (read off its Plan): prompts and samples per step, new tokens, learning
rates, epochs, mini-batches, clip ranges, KL settings, temperature. Each trains for `--budget`
seconds of wall time (start-up and evaluations not counted): TRL stops at the first step boundary
past the budget; `rlgraph run` validates after every step and is stopped once a step has ended past
the budget (SIGINT as Ctrl-C, with its default restored in case a background shell ignores it, then
SIGKILL to its process group after a grace period: `common.run_rlgraph`). Each
side's own records are then checked (`check_budget`): the result reported for the budget must be
the step that crossed it and the run must have stopped there, else the bench fails (exit 1). The
accuracy is greedy, `rlgraph.models.eval.greedy_accuracy` on the first `--val-rows` rows of
`builtin:arith/val` on TRL's side, the same decoding and reward in rlgraph's validation.

Every trainer runs `--seeds` times (seeds spec + 0, 1, ...), TRL and rlgraph back to back per seed;
the result has per-seed values, mean and range of the steps/s ratio and of each end accuracy, and a
verdict is met or missed only when the difference exceeds the noise (`summarise`), else within noise.
Time: one seed is about 7.3 min (5 trainers x (60 s + start-up + evaluations)); `--seeds 2`, the
default, about 14.5 min, most of `make bench`'s ~21.

TRL lives in its own venv, `bench/.venv-trl` (made on first use: torch==2.13.0 first, then
`-c constraints.txt -r bench/requirements-trl.txt`; TRL 1.12 for PPO is installed next to it with
`pip install --no-deps --target bench/.venv-trl/trl112 -r bench/requirements-trl112.txt`, since TRL
1.16 no longer ships `trl.experimental.ppo`; the PPO worker puts that folder first on sys.path).
The TRL side imports rlgraph from this checkout (sys.path) for the data, the reward and the
evaluation only. Each trainer runs in a fresh process with torch on one thread, as rlgraph's workers.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from common import BENCH, NO_EXTRAS, RESULTS, ROOT, RUN_ID, judge, load_average, machine_facts, median, one_thread_env, \
    python_json, run_rlgraph, spread, step_work, write_result

VENV = BENCH / ".venv-trl"
VENV_PYTHON = VENV / "bin" / "python"
TRL112 = VENV / "trl112"
REQUIREMENTS = BENCH / "requirements-trl.txt"
REQUIREMENTS_112 = BENCH / "requirements-trl112.txt"
SPECS = {"grpo": "specs/grpo_arith.rl", "ppo": "specs/ppo_arith.rl"}
TARGET_SPEEDUP = 1.5
MARKS = (0.25, 0.5, 0.75, 1.0)  # accuracy is measured at these fractions of the budget


# --- the TRL venv ---


def venv_commands() -> list[list[str]]:
    pip = [str(VENV_PYTHON), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    return [
        [sys.executable if not shutil.which("python3") else "python3", "-m", "venv", str(VENV)],
        pip + ["torch==2.13.0"],  # first: the local CPU wheel; any other version pulls a CUDA build
        pip + ["-c", str(ROOT / "constraints.txt"), "-r", str(REQUIREMENTS)],
        pip + ["--no-deps", "--target", str(TRL112), "-r", str(REQUIREMENTS_112)],
    ]


def ensure_venv(log=print) -> dict[str, Any]:
    """Make bench/.venv-trl unless it is already complete; returns what happened (and how long it took)."""
    marker = VENV / ".complete"
    wanted = REQUIREMENTS.read_text() + REQUIREMENTS_112.read_text()
    if marker.exists() and marker.read_text() == wanted and VENV_PYTHON.exists():
        return {"created": False, "seconds": 0.0}
    if VENV.exists():
        shutil.rmtree(VENV)
    start = time.perf_counter()
    for command in venv_commands():
        log("  $ " + " ".join(command))
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            error = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"{' '.join(command)} failed: {' '.join(error[-5:])}")
    marker.write_text(wanted)
    return {"created": True, "seconds": time.perf_counter() - start}


# --- inside the TRL venv: the trainers ---


def _setup_worker(threads: int) -> None:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(1, str(ROOT))  # rlgraph: data, reward, evaluation (nothing of its runtime)
    import torch

    torch.set_num_threads(threads)


def _val_rows(work, count: int) -> list[dict]:
    from rlgraph.data import load_rows, resolve_data_path

    return load_rows(resolve_data_path(work.val or "builtin:arith/val"))[:count]


def _accuracy(model, tokenizer, rows, max_new_tokens: int) -> float:
    from rlgraph.models.eval import greedy_accuracy

    return greedy_accuracy(model, tokenizer, rows, max_new_tokens=max_new_tokens)


def exact_match_reward(completions: list[str], ground_truth: list[str], **_: Any) -> list[float]:
    """rlgraph.tasks.arith:exact_match as a TRL reward function: one float per completion.

    TRL passes the completions decoded without special tokens and cut at the first EOS (what
    rlgraph's rollout passes as `solution_str`), and every dataset column as a keyword argument.
    """
    from rlgraph.tasks.arith import DATA_SOURCE, exact_match

    return [exact_match(DATA_SOURCE, c, gt) for c, gt in zip(completions, ground_truth)]


class _Clock:
    """Training time (evaluations excluded), a stamp per optimizer step, the accuracy at each wall-time mark,
    and a stop once the budget is spent. A step of the spec is `every` optimizer steps; marks and the stop
    fall on whole steps of the spec."""

    def __init__(self, budget_s: float, every: int, evaluate) -> None:
        self.budget_s, self.every, self.evaluate = budget_s, every, evaluate
        self.marks = [round(budget_s * f, 3) for f in MARKS]
        self.start = 0.0
        self.paused = 0.0
        self.ticks: list[float] = []  # training seconds at each optimizer step
        self.curve: list[dict[str, Any]] = []

    def begin(self) -> None:
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.paused

    def tick(self, global_step: int) -> bool:
        """Record an optimizer step; True when training should stop."""
        now = self.elapsed()
        self.ticks.append(now)
        if global_step % self.every:
            return False
        passed = [m for m in self.marks if now >= m]
        if passed:
            t = time.perf_counter()
            accuracy = self.evaluate()
            self.paused += time.perf_counter() - t
            for mark in passed:
                self.curve.append({"mark_s": mark, "train_s": now, "steps": global_step // self.every,
                                   "accuracy": accuracy})
            self.marks = [m for m in self.marks if m not in passed]
        return now >= self.budget_s

    def summary(self, warmup: int) -> dict[str, Any]:
        ends = [0.0] + self.ticks[self.every - 1 :: self.every]
        durations = [b - a for a, b in zip(ends, ends[1:])]
        return {"steps": len(durations), "train_wall_s": ends[-1],
                "step_median_s": median(durations[warmup:]) or median(durations), "step_times_s": durations,
                "step_ends_s": ends[1:], "curve": self.curve}


def trl_grpo(work, budget_s: float, val_count: int, warmup: int, max_steps: int | None) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlgraph.data import load_rows, resolve_data_path
    from rlgraph.models import resolve_model_path

    t0 = time.perf_counter()
    path = resolve_model_path(work.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = load_rows(resolve_data_path(work.train))
    train = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["reward_model"]["ground_truth"]} for r in rows])
    val = _val_rows(work, val_count)
    acc_start = _accuracy(model, tokenizer, val, work.max_new_tokens)

    a = work.actor
    per_generation = work.samples // a["mini_batch"]  # optimizer steps per step of the spec
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-grpo-"), report_to="none", save_strategy="no", logging_steps=10**9,
        use_cpu=True, bf16=False, fp16=False, seed=work.seed, dataloader_num_workers=0, disable_tqdm=True,
        # --- the spec's numbers
        learning_rate=a["optim"]["lr"], lr_scheduler_type="constant", warmup_steps=0,
        weight_decay=a["optim"].get("weight_decay", 0.0), adam_beta1=a["optim"].get("betas", (0.9, 0.999))[0],
        adam_beta2=a["optim"].get("betas", (0.9, 0.999))[1], max_grad_norm=a["optim"].get("grad_clip") or 0.0,
        per_device_train_batch_size=a["mini_batch"], gradient_accumulation_steps=1,
        steps_per_generation=per_generation,  # one generation of prompts x n samples per step of the spec
        num_generations=work.n, max_completion_length=work.max_new_tokens, num_iterations=a["epochs"],
        temperature=work.temperature, top_p=work.top_p, top_k=work.top_k,
        beta=a["loss"]["kl_loss_coef"], epsilon=a["loss"]["clip_low"], epsilon_high=a["loss"]["clip_high"],
        loss_type="bnpo",  # token-mean over the mini-batch, as rlgraph's loss_agg = token-mean
        scale_rewards="group", max_steps=(max_steps * per_generation) if max_steps else 10**7,
    )
    clock = _Clock(budget_s, per_generation, lambda: _accuracy(model, tokenizer, val, work.max_new_tokens))

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.begin()

        def on_step_end(self, args, state, control, **kw):
            if clock.tick(state.global_step):
                control.should_training_stop = True

    trainer = GRPOTrainer(model=model, reward_funcs=exact_match_reward, args=config, train_dataset=train,
                          processing_class=tokenizer, callbacks=[Budget()])
    startup_s = time.perf_counter() - t0
    trainer.train()
    timing = clock.summary(warmup)
    acc_end = clock.curve[-1]["accuracy"] if clock.curve else _accuracy(model, tokenizer, val, work.max_new_tokens)
    return {"trainer": f"trl {trl.__version__} GRPOTrainer", "startup_s": startup_s, **timing,
            "optimizer_steps_per_step": per_generation, "accuracy_start": acc_start, "accuracy_end": acc_end,
            "val_rows": len(val), "threads": torch.get_num_threads(),
            "settings": {k: getattr(config, k) for k in (
                "learning_rate", "per_device_train_batch_size", "steps_per_generation", "generation_batch_size",
                "num_generations", "max_completion_length", "num_iterations", "temperature", "beta", "epsilon",
                "loss_type", "scale_rewards", "max_grad_norm")}}


class _StopTraining(Exception):
    pass


def trl_ppo(work, budget_s: float, val_count: int, warmup: int, max_steps: int | None) -> dict[str, Any]:
    sys.path.insert(0, str(TRL112))  # TRL 1.12: the last release with trl.experimental.ppo
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer, TrainerCallback
    from trl.experimental.ppo import PPOConfig, PPOTrainer

    from rlgraph.data import load_rows, resolve_data_path
    from rlgraph.models import resolve_model_path

    t0 = time.perf_counter()
    path = resolve_model_path(work.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"  # queries are generated from: pad on the left
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    value = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1, dtype=torch.float32)
    torch.nn.init.zeros_(value.score.weight)  # rlgraph's value head starts at zero too
    rows = load_rows(resolve_data_path(work.train))
    ground_truth = {r["prompt"]: r["reward_model"]["ground_truth"] for r in rows}
    train = Dataset.from_list([{"input_ids": tokenizer(r["prompt"])["input_ids"]} for r in rows])
    val = _val_rows(work, val_count)
    acc_start = _accuracy(policy, tokenizer, val, work.max_new_tokens)
    reward_model = RuleRewardModel(tokenizer, ground_truth)

    a, c = work.actor, work.critic
    samples = work.samples  # TRL samples one response per prompt: a batch of prompts x n prompts
    config = PPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl-ppo-"), report_to="none", save_strategy="no", use_cpu=True,
        bf16=False, fp16=False, seed=work.seed, num_sample_generations=0, dataloader_num_workers=0,
        total_episodes=(max_steps or 10**5) * samples,
        # --- the spec's numbers
        learning_rate=a["optim"]["lr"], per_device_train_batch_size=samples, gradient_accumulation_steps=1,
        num_mini_batches=samples // a["mini_batch"], num_ppo_epochs=a["epochs"],
        local_rollout_forward_batch_size=samples, response_length=work.max_new_tokens, stop_token="eos",
        temperature=work.temperature, kl_coef=work.kl_in_reward["coef"], kl_estimator=work.kl_in_reward["kind"],
        cliprange=a["loss"]["clip_low"], cliprange_value=c["clip"], vf_coef=1.0,
        gamma=work.estimator_kwargs.get("gamma", 1.0), lam=work.estimator_kwargs.get("lam", 0.95),
        whiten_rewards=False,
    )
    # One AdamW over policy and value (as TRL does), with each model at its own spec learning rate.
    betas = tuple(a["optim"].get("betas", (0.9, 0.999)))
    optimizer = torch.optim.AdamW([
        {"params": [p for p in policy.parameters() if p.requires_grad], "lr": a["optim"]["lr"]},
        {"params": [p for p in value.parameters() if p.requires_grad], "lr": c["optim"]["lr"]},
    ], betas=betas, weight_decay=a["optim"].get("weight_decay", 0.0))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    clock = _Clock(budget_s, 1, lambda: _accuracy(policy, tokenizer, val, work.max_new_tokens))

    class Budget(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            clock.begin()

        def on_step_end(self, args, state, control, **kw):
            # TRL's PPO loop does not look at control.should_training_stop
            if clock.tick(state.global_step):
                raise _StopTraining

    trainer = PPOTrainer(args=config, processing_class=tokenizer, model=policy, ref_model=ref,
                         reward_model=reward_model, value_model=value, train_dataset=train, eval_dataset=train.select(range(8)),
                         optimizers=(optimizer, scheduler), callbacks=[Budget()])
    startup_s = time.perf_counter() - t0
    try:
        trainer.train()
    except _StopTraining:
        pass
    timing = clock.summary(warmup)
    acc_end = clock.curve[-1]["accuracy"] if clock.curve else _accuracy(policy, tokenizer, val, work.max_new_tokens)
    return {"trainer": f"trl {trl.__version__} experimental PPOTrainer", "startup_s": startup_s, **timing,
            "optimizer_steps_per_step": config.num_ppo_epochs * config.num_mini_batches,
            "accuracy_start": acc_start, "accuracy_end": acc_end, "val_rows": len(val),
            "threads": torch.get_num_threads(),
            "settings": {k: getattr(config, k) for k in (
                "learning_rate", "per_device_train_batch_size", "num_mini_batches", "num_ppo_epochs",
                "response_length", "temperature", "kl_coef", "kl_estimator", "cliprange", "cliprange_value",
                "vf_coef", "gamma", "lam")} | {"value_lr": c["optim"]["lr"]}}


def _rule_reward_model_class():
    import torch

    class RuleRewardModel(torch.nn.Module):
        """The exact-match rule as the reward model that TRL's PPO requires.

        TRL scores with `get_reward(model, ...)`: it runs `getattr(model, model.base_model_prefix)` on the
        query + response tokens (pads replaced by 0, an attention mask) and applies `model.score` to the
        last hidden state, then reads the value at the last response token. Here the "backbone" decodes
        each row's real tokens, splits the text after the prompt's "=" (every builtin:arith prompt is
        "a+b=", and the query is left-padded while the response is cut after EOS by TRL), looks the
        ground truth up by the prompt text, and calls rlgraph.tasks.arith:exact_match on the response
        decoded without special tokens; its "hidden state" is that score at every position, and
        `score` is the identity. No parameters, so nothing of it trains.
        """

        base_model_prefix = "rule"

        def __init__(self, tokenizer, ground_truth: dict[str, str]) -> None:
            super().__init__()
            self.rule = _RuleBackbone(tokenizer, ground_truth)
            self.score = torch.nn.Identity()

    class _RuleBackbone(torch.nn.Module):
        def __init__(self, tokenizer, ground_truth: dict[str, str]) -> None:
            super().__init__()
            self.tokenizer, self.ground_truth = tokenizer, ground_truth

        def forward(self, input_ids, attention_mask, **_: Any):
            from types import SimpleNamespace

            from rlgraph.tasks.arith import DATA_SOURCE, exact_match

            scores = []
            for ids, mask in zip(input_ids.tolist(), attention_mask.tolist()):
                tokens = [t for t, m in zip(ids, mask) if m]
                text = self.tokenizer.decode(tokens, skip_special_tokens=False)
                prompt, sep, _ = text.partition("=")
                prompt_ids = self.tokenizer(prompt + sep)["input_ids"]
                response = self.tokenizer.decode(tokens[len(prompt_ids):], skip_special_tokens=True)
                scores.append(exact_match(DATA_SOURCE, response, self.ground_truth.get(prompt + sep, "")))
            score = torch.tensor(scores, dtype=torch.float32, device=input_ids.device)
            hidden = score[:, None, None].expand(-1, input_ids.shape[1], 1)  # (batch, seq, 1)
            return SimpleNamespace(hidden_states=(hidden,))

    return RuleRewardModel


def RuleRewardModel(tokenizer, ground_truth):  # noqa: N802 - builds the torch class lazily (torch is not imported at the top)
    return _rule_reward_model_class()(tokenizer, ground_truth)


def worker_main(args: argparse.Namespace) -> int:
    from common import StepWork

    _setup_worker(args.threads)
    work = StepWork(**json.loads(Path(args.work).read_text()))  # the TRL venv has no compiler: the numbers come in
    run = trl_grpo if args.worker == "grpo" else trl_ppo
    result = run(work, args.budget, args.val_rows, args.warmup, args.max_steps)
    print(json.dumps(result))
    return 0


# --- the rlgraph side, in this venv ---


def training_points(records: list[dict[str, Any]], times: list[float]) -> list[dict[str, Any]]:
    """Per step: its training time (the time of its metrics line after the step-0 line, less every
    validation and checkpoint until then), the validation accuracy if it validated, and its step time."""
    points, spent = [], 0.0
    for record, t in zip(records[1:], times[1:]):
        spent += (record.get("timing_s/testing") or 0.0) + (record.get("timing_s/save_checkpoint") or 0.0)
        points.append({"steps": record["training/global_step"], "train_s": t - times[0] - spent,
                       "accuracy": record.get("val/score/mean"), "step_s": record["timing_s/step"]})
    return points


def rlgraph_side(spec: str, budget_s: float, val_count: int, warmup: int, step_s: float, workdir: Path,
                 seed: int) -> dict[str, Any]:
    """`rlgraph run` until `budget_s` of training, validating after every step on the same rows.

    The runtime's validation is greedy decoding (max_new_tokens of the spec) scored by the spec's
    reward, exact_match: the number greedy_accuracy gives. The run is given more steps than the budget
    needs and stopped (`run_rlgraph`'s stop: SIGINT, then SIGKILL) once a step has ended past the budget.
    The end point is that step, the first at or past the budget, as TRL's is; the accuracy at a wall-time
    mark is that of the first step at or past the mark, as TRL's. `check_budget` then proves it from the records.
    """
    from rlgraph.data import load_rows, resolve_data_path

    work = step_work(spec)
    steps = int(budget_s * 2.5 / step_s) + 10  # plenty: the run is stopped from outside
    val = load_rows(resolve_data_path(work.val or "builtin:arith/val"))[:val_count]
    val_file = workdir / f"val{val_count}.jsonl"
    val_file.write_text("".join(json.dumps(r) + "\n" for r in val))
    # validation every step, so the step that crosses the budget (or a mark) is a validated one
    overrides = [f"train.steps={steps}", f"train.seed={seed}", "train.validate_every=1", "train.checkpoint_every=0",
                 f"data.val=\"{val_file}\""]

    def past_budget(records: list[dict[str, Any]], times: list[float]) -> bool:
        points = training_points(records, times)
        return bool(points) and points[-1]["train_s"] >= budget_s

    load_before = load_average()
    trace = run_rlgraph(spec, overrides, workdir / f"rlgraph_{Path(spec).stem}_seed{seed}", stop=past_budget)
    points = training_points(trace.records, trace.record_times)
    validated = [p for p in points if p["accuracy"] is not None]
    if not validated:
        raise BudgetError(f"rlgraph run {spec} (seed {seed}) recorded no validated step")
    end = next((p for p in validated if p["train_s"] >= budget_s), validated[-1])
    curve = []
    for fraction in MARKS:
        mark = round(budget_s * fraction, 3)
        at = next((p for p in validated if p["train_s"] >= mark and p["steps"] <= end["steps"]), None)
        if at:
            curve.append({"mark_s": mark, "train_s": at["train_s"], "steps": at["steps"], "accuracy": at["accuracy"]})
    step_times = [p["step_s"] for p in points if p["steps"] <= end["steps"]]
    return {"trainer": "rlgraph run", "seed": seed, "steps": end["steps"], "train_wall_s": end["train_s"],
            "step_median_s": median(step_times[warmup:]) or median(step_times),
            "wall_per_step_median_s": median(trace.wall_between_steps(warmup)),
            "startup_s": trace.record_times[0] - (trace.records[0].get("timing_s/testing") or 0.0),
            "accuracy_start": trace.records[0].get("val/score/mean"), "accuracy_end": end["accuracy"],
            "step_ends_s": [p["train_s"] for p in points], "exit_code": trace.returncode,
            "curve": curve, "val_rows": len(val), "load_average": [load_before, load_average()],
            "command": f"rlgraph run {spec} " + " ".join(f"-s {o}" for o in overrides[:-1])
                       + f" -s data.val=<the first {val_count} rows of {work.val}, as jsonl> --no-resume, "
                         f"stopped once a step ended past {budget_s:.0f} s of training"}


class BudgetError(RuntimeError):
    """A side did not train for the budget: its result must not stand in the budget's column."""


def check_budget(side: str, budget_s: float, step_ends_s: list[float], end_s: float) -> None:
    """Raise BudgetError unless the side trained for `budget_s`, within one step, by its own records.

    `step_ends_s`: training seconds at the end of every step it recorded; `end_s`: the training time of the
    result reported for the budget. That result must be the step that crossed the budget (at or past it,
    less than one step beyond), and the run must have stopped there: at most one more step (the one in
    flight when the stop came) may follow it.
    """
    if not step_ends_s:
        raise BudgetError(f"{side}: no training step recorded")
    crossing = next((i for i, t in enumerate(step_ends_s) if t >= budget_s), None)
    if crossing is None:
        raise BudgetError(f"{side} trained {step_ends_s[-1]:.1f} s, short of the {budget_s:.0f} s budget "
                          f"({len(step_ends_s)} steps)")
    ended = step_ends_s[crossing]
    previous = step_ends_s[crossing - 1] if crossing else 0.0
    if not budget_s <= end_s <= ended + 1e-6:
        raise BudgetError(f"{side}: the result reported for {budget_s:.0f} s was taken at {end_s:.1f} s of training; "
                          f"the step that crossed the budget ended at {ended:.1f} s (a step takes "
                          f"{ended - previous:.2f} s)")
    beyond = len(step_ends_s) - 1 - crossing
    if beyond > 1:
        raise BudgetError(f"{side} trained {step_ends_s[-1]:.1f} s against a {budget_s:.0f} s budget ({beyond} steps "
                          "past it): the run was not stopped at the budget")


def one_sample_per_prompt(spec: str, workdir: Path) -> Path | None:
    """A copy of `spec` with TRL PPO's batch composition: prompts x n distinct prompts, one sample each,
    mini-batches of the same number of samples. None if the rewrite does not give the same work."""
    import re

    work = step_work(spec)
    folder = workdir / "specs_one_sample"
    shutil.copytree(ROOT / Path(spec).parent, folder, dirs_exist_ok=True)  # includes keep their place
    variant = folder / Path(spec).name
    text = variant.read_text()
    text = re.sub(r"(role\s+\w+\s*\{[^}]*\bn\s*=\s*)\d+", r"\g<1>1", text, count=1)
    text = re.sub(r"\bminibatch\s*=\s*(\d+)", lambda m: f"minibatch = {int(m.group(1)) * work.n}", text)
    text = re.sub(r"\bbatch_size\s*=\s*\d+", f"batch_size = {work.samples}", text)
    variant.write_text(text)
    try:
        changed = step_work(str(variant))
    except SystemExit:
        return None
    same = (changed.samples == work.samples and changed.n == 1 and changed.actor["mini_batch"] == work.actor["mini_batch"]
            and (changed.critic or {}).get("mini_batch") == (work.critic or {}).get("mini_batch"))
    return variant if same else None


def rlgraph_step_estimate(spec: str, workdir: Path) -> tuple[float, str]:
    """Wall seconds per step of `rlgraph run spec` (only to size the run's step cap): from this run's floor
    benchmark, else a short probe."""
    floor = RESULTS / "floor.json"
    if floor.exists():
        data = json.loads(floor.read_text())
        for res in data.get("results", []) if data.get("run_id") == RUN_ID else []:
            if res["spec"] == spec and res.get("rlgraph_wall_per_step_s"):
                return res["rlgraph_wall_per_step_s"], "bench/results/floor.json"
    trace = run_rlgraph(spec, ["train.steps=8", *NO_EXTRAS], workdir / f"probe_{Path(spec).stem}")
    return median(trace.wall_between_steps(2)), "an 8-step probe run"


def run_trl(algo: str, work, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One TRL trainer in the TRL venv, a fresh process; {"error": ...} if it fails."""
    work_file = tmp / f"work_{algo}_seed{work.seed}.json"
    work_file.write_text(json.dumps(work.to_json()))
    command = [str(VENV_PYTHON), str(Path(__file__).resolve()), "--worker", algo, "--work", str(work_file),
               "--budget", str(args.budget), "--val-rows", str(args.val_rows), "--warmup", str(args.warmup),
               "--threads", str(args.threads)]
    if args.max_steps:
        command += ["--max-steps", str(args.max_steps)]
    print(f"{algo}, seed {work.seed}: TRL for {args.budget:.0f} s ...", flush=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    load_before = load_average()
    try:
        result = python_json(command, env=env)
    except RuntimeError as err:
        print(f"  TRL {algo} failed: {str(err)[-800:]}", flush=True)
        return {"error": str(err)[-3000:]}
    result["seed"] = work.seed
    result["load_average"] = [load_before, load_average()]
    return result


def trl_end_s(result: dict[str, Any], budget_s: float) -> float:
    """Training seconds at which TRL's accuracy for the budget was taken (its evaluation at the budget's mark)."""
    at_budget = [p["train_s"] for p in result.get("curve", []) if p["mark_s"] == round(budget_s, 3)]
    return at_budget[0] if at_budget else result["train_wall_s"]


def summarise(runs: list[dict[str, Any]], val_rows: int) -> dict[str, Any]:
    """Per-seed values, mean and range of the speed ratio and of each trainer's end accuracy, and the verdicts:
    met or missed only when the difference is larger than the noise (the range across seeds; for accuracy at
    least one standard error of an accuracy on `val_rows` rows), else within noise."""
    out: dict[str, Any] = {}
    paired = [r for r in runs if "speedup" in r]
    if not paired:
        return out
    n = len(paired)
    speed = spread([r["speedup"] for r in paired])
    out["speedup"] = speed
    out["speedup_median_step"] = spread([r["speedup_median_step"] for r in paired])
    out["speed_verdict"] = judge(speed["mean"] - TARGET_SPEEDUP, speed["range"], n)
    standard_error = (0.25 / val_rows) ** 0.5
    accuracy = {side: spread([r[side]["accuracy_end"] for r in paired])
                for side in ("trl", "rlgraph", "rlgraph_one_sample") if all(side in r for r in paired)}
    out["accuracy"] = accuracy
    out["accuracy_standard_error"] = standard_error
    for side in ("rlgraph", "rlgraph_one_sample"):
        if side in accuracy:
            noise = max(accuracy[side]["range"], accuracy["trl"]["range"], standard_error)
            out[f"{side}_accuracy"] = {"difference": accuracy[side]["mean"] - accuracy["trl"]["mean"], "noise": noise,
                                       "verdict": judge(accuracy[side]["mean"] - accuracy["trl"]["mean"], noise, n)}
    marks = sorted({p["mark_s"] for r in paired for side in accuracy for p in r[side]["curve"]})
    out["curve_means"] = {side: [statistics.fmean(at) if (at := [p["accuracy"] for r in paired for p in r[side]["curve"]
                                                                 if p["mark_s"] == mark]) else None for mark in marks]
                          for side in accuracy}
    out["curve_marks_s"] = marks
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=60.0, help="seconds of training per trainer")
    parser.add_argument("--seeds", type=int, default=2,
                        help="runs of each trainer, seeds spec seed + 0, 1, ...; a verdict needs at least 2")
    parser.add_argument("--val-rows", type=int, default=500, help="val rows scored (500 = the whole split; "
                        "fewer make the accuracy comparison noisier: one standard error is sqrt(0.25 / rows))")
    parser.add_argument("--warmup", type=int, default=3, help="steps left out of the step-time medians")
    parser.add_argument("--only", nargs="+", choices=sorted(SPECS), default=["grpo", "ppo"])
    parser.add_argument("--threads", type=int, default=1, help="torch threads of the TRL process")
    parser.add_argument("--max-steps", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true",
                        help="one step of each TRL trainer, one seed, no rlgraph run (bench_floor's smoke runs that); "
                             "nothing if the TRL venv is absent")
    parser.add_argument("--no-install", action="store_true", help="do not create bench/.venv-trl")
    parser.add_argument("--no-variant", action="store_true",
                        help="skip the PPO run of rlgraph with TRL's batch composition (one sample per prompt)")
    parser.add_argument("--output", default=None)
    parser.add_argument("--worker", choices=sorted(SPECS), help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.smoke:
        args.max_steps, args.budget, args.warmup, args.val_rows, args.seeds = 2, 0.0, 0, 20, 1
    if args.seeds < 1 or args.budget < 0 or args.val_rows < 1:
        parser.error("--seeds and --val-rows must be at least 1, --budget not negative")

    result: dict[str, Any] = {"benchmark": "rlgraph vs TRL on the same work, equal wall time",
                              "command": "bench/bench_trl.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                              "budget_s": args.budget, "seeds": args.seeds, "val_rows": args.val_rows,
                              "target_speedup": TARGET_SPEEDUP}
    trl_ok = True
    if args.smoke or args.no_install:
        trl_ok = VENV_PYTHON.exists() and (VENV / ".complete").exists()
        result["venv"] = {"created": False, "present": trl_ok}
    else:
        try:
            result["venv"] = ensure_venv()
        except Exception as err:  # no network, a pin that does not resolve: say why, keep the rest
            trl_ok = False
            result["venv"] = {"error": str(err)}
            print(f"TRL venv could not be made: {err}", flush=True)

    comparisons: dict[str, Any] = {}
    result["comparisons"] = comparisons
    name = "smoke_trl" if args.smoke else "trl"
    try:
        with tempfile.TemporaryDirectory(prefix="rlgraph-bench-trl-") as tmp:
            for algo in args.only:
                comparisons[algo] = compare(algo, args, trl_ok, Path(tmp))
    except RuntimeError as err:  # a BudgetError, or a run that failed: no figure of it may stand as a comparison
        result["error"] = str(err)[-3000:]
        result["machine"] = machine_facts()
        write_result(name, result, args.output)
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    result["machine"] = machine_facts()
    write_result(name, result, args.output)
    return 0


def compare(algo: str, args: argparse.Namespace, trl_ok: bool, tmp: Path) -> dict[str, Any]:
    """Every seed of one algorithm: TRL, then rlgraph (then rlgraph with TRL's batch composition), back to back;
    each side's budget checked from its own records as soon as it has run."""
    spec = SPECS[algo]
    work = step_work(spec)
    entry: dict[str, Any] = {"spec": spec, "work": work.describe(), "runs": []}
    step_s, source = (None, None) if args.smoke else rlgraph_step_estimate(spec, tmp)
    variant = None if args.smoke or algo != "ppo" or args.no_variant else one_sample_per_prompt(spec, tmp)
    if variant is not None:
        entry["one_sample_work"] = step_work(str(variant)).describe()
    for i in range(args.seeds):
        seed = work.seed + i
        run: dict[str, Any] = {"seed": seed}
        entry["runs"].append(run)
        if trl_ok:
            run["trl"] = trl = run_trl(algo, replace(work, seed=seed), args, tmp)
            if "error" not in trl:
                check_budget(f"TRL {algo} (seed {seed})", args.budget, trl["step_ends_s"], trl_end_s(trl, args.budget))
            if i == 0 and not args.smoke and "error" not in trl:
                # the floor of the same step right after TRL: how fast the work itself can go, back to back
                floor = python_json([sys.executable, str(BENCH / "bench_floor.py"), "--worker", spec, "--steps", "20"],
                                    env=one_thread_env())
                entry["floor_step_s"] = median([s["step"] for s in floor["steps"][4:]])
                entry["floor_over_trl"] = trl["step_median_s"] / entry["floor_step_s"]
        if args.smoke:
            _print(algo, run)
            continue
        print(f"{algo}, seed {seed}: rlgraph for {args.budget:.0f} s (step cap from {step_s * 1000:.0f} ms per step, "
              f"{source}) ...", flush=True)
        sides = [("rlgraph", spec)] + ([("rlgraph_one_sample", str(variant))] if variant is not None else [])
        for side, side_spec in sides:
            r = rlgraph_side(side_spec, args.budget, args.val_rows, args.warmup, step_s, tmp, seed)
            if side == "rlgraph_one_sample":
                r["trainer"] = "rlgraph run, one sample per prompt"
            check_budget(f"{r['trainer']} {algo} (seed {seed})", args.budget, r["step_ends_s"], r["train_wall_s"])
            run[side] = r
        trl, rl = run.get("trl") or {}, run["rlgraph"]
        if trl.get("steps") and rl.get("steps"):
            run["trl_steps_per_s"] = trl["steps"] / trl["train_wall_s"]
            run["rlgraph_steps_per_s"] = rl["steps"] / rl["train_wall_s"]
            run["speedup"] = run["rlgraph_steps_per_s"] / run["trl_steps_per_s"]
            run["speedup_median_step"] = trl["step_median_s"] / rl["step_median_s"]
        _print(algo, run)
    entry.update(summarise(entry["runs"], args.val_rows))
    if "speedup" in entry:
        a = entry["speedup"]
        print(f"  {algo}: rlgraph / TRL steps per second {a['mean']:.2f} ({a['min']:.2f}..{a['max']:.2f} over "
              f"{len(a['values'])} seeds): {entry['speed_verdict']}; accuracy: "
              f"{entry.get('rlgraph_accuracy', {}).get('verdict', '–')}", flush=True)
    return entry


def _print(algo: str, run: dict[str, Any]) -> None:
    for side in ("trl", "rlgraph", "rlgraph_one_sample"):
        r = run.get(side)
        if side == "rlgraph_one_sample" and not r:
            continue
        if not r or "error" in r:
            print(f"  {side}: {'not run' if not r else 'failed'}")
            continue
        print(f"  {side:8} {r['steps']:4d} steps in {r['train_wall_s']:6.1f} s = {r['steps'] / max(r['train_wall_s'], 1e-9):5.2f} "
              f"steps/s (median step {r['step_median_s'] * 1000:.0f} ms); accuracy {r['accuracy_start'] or 0:.3f} -> "
              f"{r['accuracy_end']:.3f}", flush=True)
    if "speedup" in run:
        print(f"  {algo}, seed {run['seed']}: rlgraph / TRL steps per second = {run['speedup']:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
