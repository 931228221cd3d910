"""Evaluation: a model's answers to a set of prompts, scored by a rule reward.

Two callers share what is here, so that they agree on every token:

- the run's validation (`loop.Trainer.validate`), which generates through the rollout role's engine in the
  run's processes: `validation_reward`, `validation_sampling`, `validation_batches`, `validation_seed`,
  `validation_metrics`;
- `rlgraph eval` (rlgraph/commands/eval.py), which runs `evaluate` in its own process, without Ray: an
  engine of rlgraph/workers/engines/ built from a model folder, the prompts tokenized as the run tokenizes
  them (`RLDataset`), generated in the same batches with the same settings and seeds (`generate_rollout`),
  scored by the same reward call (`transforms.score`).

So a greedy `rlgraph eval` of a run's exported model, with the run's spec, scores what the run's last
validation scored: the same greedy tokens, on the same device and in the same dtype.

Sampled answers (n > 1) add mean@n and best@n, as validation reports them, and pass@k: the chance that at
least one of k answers passes (scores at least `pass_score`), with the unbiased estimator of Chen et al. 2021
("Evaluating Large Language Models Trained on Code"): 1 - C(n - c, k) / C(n, k) for c passing answers of n.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlgraph.contract.settings import GenerateSettings, RewardSettings, ValSettings
from rlgraph.runtime.errors import RunError
from rlgraph.runtime.step import derive_seed

if TYPE_CHECKING:
    import torch

    from rlgraph.plan.model import Plan
    from rlgraph.workers import Rollout, RuleReward


# --- shared with the run's validation ---


def validation_reward(plan: Plan) -> str | None:
    """The rule reward validation scores with: the step's rule reward (the first, if it has several); a
    step scored by a reward model alone validates with the spec's one declared rule reward (declare
    e.g. `reward exact { ... }` for that); with none, or several and none in the step, no validation."""
    in_step = [c.target for c in plan.calls if c.kind == "reward"]
    if in_step:
        return in_step[0]
    return next(iter(plan.rewards)) if len(plan.rewards) == 1 else None


def validation_sampling(generate: GenerateSettings, val: ValSettings) -> tuple[GenerateSettings, GenerateSettings | None]:
    """(one answer per prompt, n answers per prompt or None): the step's generate settings (its environment, its
    max_new_tokens) with validation's sampling. The one answer is greedy, unless val.n = 1
    with a temperature; the n answers (val.n > 1) are sampled at val's temperature."""
    sampling = dataclasses.replace(generate, keep_log_probs=False, temperature=val.temperature, top_p=val.top_p,
                                   top_k=val.top_k)
    one = dataclasses.replace(sampling, n=1, temperature=val.temperature if val.n == 1 else 0.0)
    return one, dataclasses.replace(sampling, n=val.n) if val.n > 1 else None


def validation_batches(items: Sequence[dict], batch_size: int) -> list[tuple[int, Sequence[dict]]]:
    """(index of the first item, items) of each generate call: `batch_size` prompts (data.val_batch_size)."""
    return [(start, items[start : start + batch_size]) for start in range(0, len(items), batch_size)]


def validation_seed(seed: int, step: int, start: int, settings: GenerateSettings) -> int:
    """The seed of the generate call whose first item is `start` (0 for greedy: nothing is drawn)."""
    if settings.temperature == 0:
        return 0
    return derive_seed(seed, step, f"val1/{start}" if settings.n == 1 else f"val/{start}")


def validation_scores(name: str, reward: RuleReward, rollouts: Sequence[Rollout], when: str,
                      n: int = 1) -> torch.Tensor:
    """(prompts, n) the sequence score of each answer of `rollouts` (generate calls in prompt order, n answers
    a prompt), by reward `name`; a failing reward is a RunError that says `when`."""
    import torch

    from rlgraph.runtime.transforms import score

    return torch.cat([score(name, reward, r, when).sum(-1) for r in rollouts]).view(-1, n)


def validation_metrics(one: torch.Tensor, sampled: torch.Tensor | None, prefix: str = "val/") -> dict[str, float]:
    """score/mean of the one answer per prompt (`one`: (prompts, 1)); with `sampled` ((prompts, n), n > 1) also
    score/mean@n and score/best@n (the mean of each prompt's best answer)."""
    metrics = {f"{prefix}score/mean": one.mean().item()}
    if sampled is not None:
        n = sampled.shape[1]
        metrics[f"{prefix}score/mean@{n}"] = sampled.mean().item()
        metrics[f"{prefix}score/best@{n}"] = sampled.max(dim=1).values.mean().item()
    return metrics


def demonstration_nll(log_probs: Sequence[torch.Tensor], rollouts: Sequence[Rollout]) -> float:
    """The mean negative log-likelihood of every response token (and EOS) of the demonstrations, over all of
    them (verl's SFT validation loss): `log_probs[i]` (rows, R) of `rollouts[i]`, masked by its loss mask."""
    total = sum(float(-(lp * r.loss_mask).sum()) for lp, r in zip(log_probs, rollouts))
    tokens = sum(int(r.loss_mask.sum()) for r in rollouts)
    return total / max(tokens, 1)


def demonstration_answers(max_response_length: int) -> GenerateSettings:
    """How a supervised run's validation answers, with no rollout role to take the settings from: greedily, one
    answer per prompt, at most as many tokens as the longest demonstration it trains on (data.max_response_length,
    EOS included), one turn."""
    return GenerateSettings(n=1, temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=max_response_length,
                            keep_log_probs=False, env=None)


def pass_at_k(scores: Sequence[Sequence[float]], k: int, pass_score: float) -> float:
    """The mean over prompts of the chance that k of a prompt's n answers (`scores[prompt]`, n >= k) drawn
    without replacement hold one that scores at least `pass_score`: 1 - C(n - c, k) / C(n, k), c passing."""
    if not scores:
        raise ValueError("pass@k needs at least one prompt")
    total = 0.0
    for row in scores:
        n, c = len(row), sum(s >= pass_score for s in row)
        if not 1 <= k <= n:
            raise ValueError(f"pass@{k} needs 1 <= k <= n, the answers per prompt; got n = {n}")
        # C(n - c, k) / C(n, k) = prod over i in n-c+1 .. n of (1 - k / i): no huge binomials
        miss = 1.0
        for i in range(n - c + 1, n + 1):
            miss *= 1.0 - k / i
        total += 1.0 - (miss if n - c >= k else 0.0)
    return total / len(scores)


# --- rlgraph eval ---


@dataclass(frozen=True)
class EvalSettings:
    """What `evaluate` generates and how it scores: the settings the run's validation reads off its plan."""

    data: tuple[str, ...]  # files (parquet/jsonl) or `builtin:` names, read one after the other
    reward_name: str  # the spec's reward name, or the function
    reward_fn: str | None  # `module:function` or `path/file.py:function`; None for a reward service (its url)
    reward: RewardSettings  # its guards: max_invalid_fraction, timeout_s, batched, workers, url, ...
    plan: Plan | None  # the spec's: its folder (where a relative path or module in `reward_fn` is looked for),
    # its environments (the tools a chat template renders into the prompts), its user functions; None: no spec
    max_prompt_length: int  # longer prompts are left out (data.max_prompt_length)
    batch_size: int  # prompts per generate call (data.val_batch_size)
    generate: GenerateSettings  # max_new_tokens, env; the sampling comes from `val`
    val: ValSettings  # n, temperature, top_p, top_k (`rlgraph eval --n K --temperature T`)
    engine: str  # a name of rlgraph/contract/engines.py ENGINES
    dtype: str  # torch name: float32, bfloat16, float16
    device: str | None  # "cpu", "cuda"; None: the engine's default (a GPU if there is one)
    memory_fraction: float  # of the device, for an engine that takes one (vLLM on a GPU)
    max_sequences: int | None  # the rollout's: the most sequences the engine generates at once; None = its own
    seed: int = 0
    ks: tuple[int, ...] = ()  # pass@k for each k (each at most val.n); () with n > 1: k = n
    pass_score: float = 1.0  # an answer passes when it scores at least this


@dataclass
class EvalResult:
    metrics: dict[str, float]  # score/mean, and with n > 1 score/mean@n, score/best@n, score/pass@k
    prompts: int  # prompts scored
    filtered: int  # prompts longer than max_prompt_length, left out
    rows: list[dict[str, Any]]  # per prompt: index, prompt, ground_truth, response, score (and samples)
    seconds: dict[str, float] = field(default_factory=dict)  # load, generate, score, total


def evaluate(model_folder: str, settings: EvalSettings, log: Callable[[str], None] = lambda _: None) -> EvalResult:
    """Score `model_folder` (a local HF folder, or a `builtin:` model) on `settings.data` in this process.
    Raises RunError, with a message for the user, on anything the user can fix."""
    from rlgraph.contract.settings import DataSettings
    from rlgraph.data import DataError, load_files
    from rlgraph.plan.model import Plan
    from rlgraph.runtime.preflight import Checked, prepare
    from rlgraph.runtime.roles import generate_call
    from rlgraph.workers.engines import engine_class
    from rlgraph.workers.rollout import generate_rollout

    started = time.perf_counter()
    one, sampled_settings = validation_sampling(settings.generate, settings.val)
    ks = _pass_ks(settings, sampled_settings)
    # Pre-flight's second part, as the run does it, on a plan whose data are the prompts to score (as both splits:
    # it wants a train split) and whose one reward is the one to score with: the reward (a function or a
    # service) loads, the spec's environments give the tools a chat template renders, the tokenizer loads and
    # tokenizes the prompts. So the prompts are the token ids the run's validation generates from.
    context = settings.plan or Plan(spec="")
    inputs = dataclasses.replace(
        context, rewards={settings.reward_name: settings.reward_fn},
        reward_settings={settings.reward_name: settings.reward},
        data=DataSettings(train=settings.data, val=settings.data, batch_size=1,
                          max_prompt_length=settings.max_prompt_length, shuffle=False,
                          val_batch_size=settings.batch_size,
                          # eval generates: no demonstrations are read, the plan's bound is kept as it was
                          max_response_length=context.data.max_response_length if context.data is not None else 1))
    try:
        rows = load_files(list(settings.data))  # first, before the reward and the model: an error names file and row
    except DataError as err:
        raise RunError(f"data: {err}") from None
    generate_role = generate_call(context).target if generate_call(context) else "model"
    prepared = prepare(inputs, Checked({generate_role: model_folder}, {"train": rows, "val": rows}))
    reward = prepared.rewards[settings.reward_name]
    try:
        # the data are both splits here: each note once, naming neither
        for line in dict.fromkeys(line.replace("data.train", "data").replace("data.val", "data")
                                  for line in [*prepared.notes, *getattr(prepared, "warnings", [])]):
            log(line)
        dataset = prepared.val
        try:
            engine_cls = engine_class(settings.engine)
            engine_cls.check_installed()
        except (ValueError, ImportError) as err:
            raise RunError(str(err)) from None
        try:
            engine = engine_cls.from_pretrained(model_folder, dtype=settings.dtype, device=settings.device,
                                                memory_fraction=settings.memory_fraction, tp=1,
                                                max_sequences=settings.max_sequences)
        except (OSError, ValueError) as err:
            raise RunError(f"the model in {model_folder} does not load with the {settings.engine} engine: "
                           f"{type(err).__name__}: {err}") from None
        loaded = time.perf_counter()
        items = list(dataset)
        log(f"{len(items)} prompts, {settings.engine} engine: "
            + ("greedy" if one.temperature == 0 else f"one answer at temperature {one.temperature}")
            + (f" and {sampled_settings.n} sampled at temperature {sampled_settings.temperature}"
               if sampled_settings else ""))

        def generate(gen: GenerateSettings) -> list[Any]:
            return [generate_rollout(engine, batch, gen, seed=validation_seed(settings.seed, 0, start, gen))
                    for start, batch in validation_batches(items, settings.batch_size)]

        greedy_rollouts = generate(one)
        sampled_rollouts = generate(sampled_settings) if sampled_settings else []
        generated = time.perf_counter()
        one_scores = validation_scores(settings.reward_name, reward, greedy_rollouts, "evaluation")  # (prompts, 1)
        sampled_scores = validation_scores(settings.reward_name, reward, sampled_rollouts, "evaluation",
                                           sampled_settings.n) if sampled_settings else None  # (prompts, n)
    finally:
        reward.close()
    metrics = validation_metrics(one_scores, sampled_scores, prefix="")
    if greedy_rollouts[0].episodes is not None:  # how the greedy answers used the tools, as validation reports it
        from rlgraph.runtime.metrics import episode_metrics
        from rlgraph.workers import Rollout

        episodes = episode_metrics(Rollout.concat(greedy_rollouts))
        env_seconds = episodes.pop("timing_s/env", None)  # a time: with the others in `seconds`
        metrics |= episodes
    else:
        env_seconds = None
    per_prompt = sampled_scores.tolist() if sampled_scores is not None else None
    for k in ks:
        metrics[f"score/pass@{k}"] = pass_at_k(per_prompt, k, settings.pass_score)
    responses = [text for r in greedy_rollouts for text in r.response_text]
    samples = [text for r in sampled_rollouts for text in r.response_text]
    result_rows = []
    for i, item in enumerate(items):
        row = {"index": item["index"], "prompt": item["prompt_text"], "ground_truth": item["ground_truth"],
               "response": responses[i], "score": one_scores[i, 0].item()}
        if per_prompt is not None:
            n = sampled_settings.n
            row["samples"] = [{"response": text, "score": value}
                              for text, value in zip(samples[i * n : (i + 1) * n], per_prompt[i])]
        result_rows.append(row)
    done = time.perf_counter()
    seconds = {"load": loaded - started, "generate": generated - loaded, "score": done - generated,
               "total": done - started} | ({"env": env_seconds} if env_seconds is not None else {})
    return EvalResult(metrics, len(items), dataset.num_filtered, result_rows, seconds)


def _pass_ks(settings: EvalSettings, sampled: GenerateSettings | None) -> tuple[int, ...]:
    if sampled is None:
        if settings.ks:
            raise RunError(f"pass@{settings.ks[0]} needs several answers per prompt: give --n K (K >= "
                           f"{max(settings.ks)})")
        return ()
    too_many = [k for k in settings.ks if not 1 <= k <= sampled.n]
    if too_many:
        raise RunError(f"pass@{too_many[0]} needs 1 <= k <= n, the answers per prompt (n = {sampled.n}); "
                       f"raise --n or lower --k")
    return settings.ks or (sampled.n,)
