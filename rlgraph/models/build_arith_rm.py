"""Build the built-in reward model `builtin:arith-rm`: a sequence classifier that predicts whether an
answer to `a+b=` is right, reading only the text.

    python -m rlgraph.models.build_arith_rm --out DIR

Like the reward models of InstructGPT and verl's examples it starts from the policy: the backbone of
`builtin:arith-gpt` (which already half-knows how to add) under a fresh one-score head
(LlamaForSequenceClassification, num_labels = 1, the score read at the last real token, exactly as
`RewardModelWorker` reads it). It is fine-tuned on the TRAIN split of builtin:arith only, on what a
policy in RL will show it:

- samples of builtin:arith-gpt itself at temperature 1 (right and wrong, with and without EOS),
- the right answer of every prompt, and
- near misses a policy tends to make: off by one in a digit, carries dropped, digits swapped or
  dropped, an extra digit.

Training has two phases. The policy adds right only half the time, and a classifier trained on it
straight away sits at the majority class ("wrong") for hundreds of steps: it has to learn to add
better than the policy first. So phase 1 teaches the body to add by teacher forcing on the right
answers (the policy's own recipe: next-token loss through the tied embeddings, lr 5e-3, warmup,
linear decay; 400 steps take greedy accuracy from ~0.5 to ~0.98). Phase 2 trains the score on
the last token, keeping a smaller next-token loss on the right answers so the sums stay in the
body while it learns to compare. The score target is 1.0 for a right answer and 0.0 otherwise,
with a squared-error loss, so the score is in the rule reward's units (`exact_match` pays 0 or 1)
and a spec can swap one for the other without retuning.

Tried and dropped (held-out accuracy stayed at the majority level, ~0.72, for 600-1500 steps):
lr 3e-3 / 5e-3 without phase 1; per-answer-token "on track" labels; fresh blocks on top of the
body (identity- or randomly-initialized, body frozen or not); balanced batches; batch 64; a
"correct digit at this position" auxiliary loss. A BCE loss did no better than MSE.

The build stops once the classification accuracy (score > 0.5) on held-out answers to VAL-split
prompts passes the target, and fails below the accept bar at the end. `rlgraph_build.json` records
every check and the final accuracy per kind of answer. The shipped build: 0.956 overall (right 0.91,
the policy's wrong samples 0.98, near misses 0.98) after 400 + 2700 steps, 31 minutes on one core of
a busy 2-core machine (an earlier arith-gpt, started from, reached 0.927 in 400 + 1200 steps).

Deterministic on one machine: seeded, one thread, global RNG state restored afterwards. It is the
recipe of the weights shipped as builtin:arith-rm (rlgraph/models/weights/, hashes pinned in
registry.py), started from the shipped builtin:arith-gpt: they are what it produced on the project's
2-core CPU machine. Another CPU may give other bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlgraph.models.recipe import build_main, deterministic, save_build

MODEL_NAME = "builtin:arith-rm"
MODEL_VERSION = 2  # in rlgraph_build.json: bump it whenever the recipe below changes (v2: max_steps 1200 -> 3000)


@dataclasses.dataclass(frozen=True)
class Recipe:
    seed: int = 0
    policy_samples: int = 4  # samples of builtin:arith-gpt per train prompt, at temperature 1
    near_misses: int = 2  # hand-made wrong answers per train prompt
    batch_size: int = 256
    # phase 1: teach the body to add (teacher forcing on the right answers)
    lm_steps: int = 400
    lm_lr: float = 5e-3  # with warmup, then linear decay to 5% over lm_steps
    lm_warmup_steps: int = 30
    # phase 2: the score on the last token (squared error on 0/1), plus lm_weight x the phase-1 loss
    lr: float = 1e-3  # 3e-3 and up never left the majority plateau
    warmup_steps: int = 20
    weight_decay: float = 0.0
    lm_weight: float = 0.3  # keeps the sums in the body while the score learns to compare
    max_steps: int = 3000  # 1200 reached 0.93 from an earlier arith-gpt; from the shipped one, 0.83
    eval_every: int = 50
    target_accuracy: float = 0.95  # held-out accuracy at which training stops
    accept_accuracy: float = 0.90  # below this at max_steps the build fails
    num_threads: int = 1


def build_arith_rm(out: str | Path, recipe: Recipe = Recipe(), log: Callable[[str], None] | None = None) -> dict:
    """Train and save the reward model into `out` (made if missing); returns what rlgraph_build.json holds."""
    import torch

    from rlgraph.tasks import arith

    log = log or logging.getLogger(__name__).info
    started = time.perf_counter()
    with deterministic(recipe.seed, recipe.num_threads):
        model, tokenizer, steps, checks, final = _train(recipe, log)
    if final["accuracy"] < recipe.accept_accuracy:
        raise RuntimeError(
            f"arith-rm build ended at step {steps} with held-out accuracy {final['accuracy']:.3f}, "
            f"below {recipe.accept_accuracy}; adjust the recipe in {__file__}"
        )

    report = {
        "name": MODEL_NAME,
        "version": MODEL_VERSION,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "initialized_from": "builtin:arith-gpt",
        "steps": steps,
        "heldout": final,  # accuracy overall and per kind of answer, on VAL-split prompts
        "checks": checks,  # (phase-2 step, held-out accuracy); "steps" counts both phases
        "build_seconds": round(time.perf_counter() - started, 2),
        "recipe": dataclasses.asdict(recipe),
        "torch": torch.__version__,
        "data": f"builtin:arith/train (v{arith.DATA_VERSION}); held out: builtin:arith/val",
    }
    save_build(out, model, tokenizer, report)
    log(f"arith-rm: step {steps}, held-out accuracy {final['accuracy']:.3f}, {report['build_seconds']:.1f} s")
    return report


def _train(recipe: Recipe, log: Callable[[str], None]) -> tuple[Any, Any, int, list, dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlgraph.models import resolve_model_path
    from rlgraph.tasks import arith
    from rlgraph.models.sequences import last_token_scores

    policy_path = resolve_model_path("builtin:arith-gpt")
    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    policy = AutoModelForCausalLM.from_pretrained(policy_path)
    generator = torch.Generator().manual_seed(recipe.seed)
    train = _examples(policy, tokenizer, arith.make_rows("train"), recipe, generator)
    heldout = _examples(policy, tokenizer, arith.make_rows("val"), recipe, generator)
    del policy
    log(f"arith-rm: {len(train.labels):,} train answers ({train.labels.mean():.2f} right), "
        f"{len(heldout.labels):,} held out")

    model = AutoModelForSequenceClassification.from_pretrained(policy_path, num_labels=1)  # fresh score head
    model.config.pad_token_id = tokenizer.pad_token_id
    right = torch.nonzero(train.labels == 1).squeeze(1)

    def forward(batch: _Answers) -> torch.Tensor:
        return model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                           position_ids=batch.position_ids, use_cache=False).last_hidden_state  # (B, T, H)

    def next_token_loss(hidden: torch.Tensor, batch: _Answers) -> torch.Tensor:
        """Teacher forcing through the tied embeddings: each answer token and EOS of the rows that are right."""
        logits = hidden[:, :-1] @ model.model.embed_tokens.weight.T  # (B, T-1, vocab)
        mask = batch.answer_mask[:, 1:] * batch.labels[:, None]
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.input_ids[:, 1:], reduction="none")
        return (loss * mask).sum() / mask.sum().clamp(min=1)

    def step_with(optimizer: Any, schedule: Any, loss: torch.Tensor) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()

    # Phase 1: teach the body to add, as the policy was taught (its score head is unused here).
    model.train()
    optimizer = torch.optim.AdamW(model.model.parameters(), lr=recipe.lm_lr, betas=(0.9, 0.98), weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(
        1.0, (step + 1) / recipe.lm_warmup_steps) * max(0.05, 1 - step / recipe.lm_steps))
    for step in range(1, recipe.lm_steps + 1):
        batch = train.select(right[torch.randint(len(right), (recipe.batch_size,), generator=generator)])
        step_with(optimizer, schedule, next_token_loss(forward(batch), batch))
    log(f"arith-rm: phase 1 done ({recipe.lm_steps} teacher-forcing steps)")

    # Phase 2: the score on the last token.
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / recipe.warmup_steps))

    def scores(batch: _Answers) -> torch.Tensor:
        return last_token_scores(model, batch.input_ids, batch.attention_mask, batch.position_ids)

    checks: list[tuple[int, float]] = []
    for step in range(1, recipe.max_steps + 1):
        batch = train.select(torch.randint(len(train.labels), (recipe.batch_size,), generator=generator))
        hidden = forward(batch)
        # left-padded, so column -1 is every row's last token, where last_token_scores reads the score
        loss = ((model.score(hidden[:, -1]).squeeze(-1).float() - batch.labels) ** 2).mean()
        if recipe.lm_weight:
            loss = loss + recipe.lm_weight * next_token_loss(hidden, batch)
        step_with(optimizer, schedule, loss)
        if step % recipe.eval_every and step != recipe.max_steps:
            continue
        final = _evaluate(model, heldout, scores)
        checks.append((step, final["accuracy"]))
        log(f"  step {step:5d}  loss {loss.item():.4f}  held-out accuracy {final['accuracy']:.3f}")
        if final["accuracy"] >= recipe.target_accuracy:
            break
    return model.eval(), tokenizer, recipe.lm_steps + step, checks, final


@dataclasses.dataclass
class _Answers:
    input_ids: Any  # (N, T) left-padded prompt + answer (+ EOS), as a rollout holds them
    attention_mask: Any  # (N, T)
    position_ids: Any  # (N, T)
    labels: Any  # (N,) 1.0 right, 0.0 wrong
    answer_mask: Any  # (N, T) 1 on the answer tokens
    kinds: list[str]  # "right", "sample" (a wrong policy sample) or "near-miss"

    def select(self, rows: Any) -> _Answers:
        return _Answers(self.input_ids[rows], self.attention_mask[rows], self.position_ids[rows],
                        self.labels[rows], self.answer_mask[rows], [])


def _examples(policy: Any, tokenizer: Any, rows: list[dict], recipe: Recipe, generator: Any) -> _Answers:
    """Right answers, the policy's own samples and near misses for every row, scored by exact match."""
    import random

    import torch

    from rlgraph.models.sequences import left_pad, position_ids_from_mask
    from rlgraph.tasks.arith import exact_match

    eos = tokenizer.eos_token_id
    prompts = [tokenizer(row["prompt"])["input_ids"] for row in rows]
    sampled = _sample(policy, tokenizer, prompts, recipe.policy_samples, 4, generator)

    shuffle = random.Random(recipe.seed)
    sequences, labels, answer_masks, kinds = [], [], [], []
    for i, (row, prompt) in enumerate(zip(rows, prompts)):
        answer = row["reward_model"]["ground_truth"]
        candidates = [(tokenizer(answer)["input_ids"] + [eos], "right")]
        candidates += [(ids, "sample") for ids in sampled[i * recipe.policy_samples : (i + 1) * recipe.policy_samples]]
        candidates += [(tokenizer(text)["input_ids"] + [eos], "near-miss")
                       for text in _near_misses(answer, recipe.near_misses, shuffle)]
        for ids, kind in candidates:
            text = tokenizer.decode(ids, skip_special_tokens=True)
            right = exact_match("", text, answer) == 1.0 and (eos in ids)
            sequences.append(prompt + ids)
            answer_masks.append([0.0] * len(prompt) + [1.0] * len(ids))
            labels.append(1.0 if right else 0.0)
            kinds.append("right" if right else kind)
    input_ids, attention_mask = left_pad(sequences, tokenizer.pad_token_id)
    width = input_ids.shape[1]
    answer_mask = torch.tensor([[0.0] * (width - len(row)) + row for row in answer_masks])
    return _Answers(input_ids, attention_mask, position_ids_from_mask(attention_mask), torch.tensor(labels),
                    answer_mask, kinds)


def _sample(policy: Any, tokenizer: Any, prompts: list[list[int]], n: int, max_new_tokens: int,
            generator: Any) -> list[list[int]]:
    """`n` samples per prompt at temperature 1 (rows of one prompt adjacent), each cut after its first EOS.

    Sampled as the HF rollout engine samples (left padding, nothing but these settings, a private RNG
    stream seeded from `generator` per chunk), so the reward model sees what a policy in RL shows it.
    """
    import torch
    from transformers import GenerationConfig

    from rlgraph.models.sequences import left_pad

    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    config = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens,
                              pad_token_id=pad, eos_token_id=[eos], use_cache=True)
    policy.generation_config = GenerationConfig()  # HF would fill unset settings from the model's own
    policy.eval()
    samples = []
    for start in range(0, len(prompts), 1024):
        input_ids, attention_mask = left_pad(prompts[start : start + 1024], pad)
        input_ids, attention_mask = input_ids.repeat_interleave(n, 0), attention_mask.repeat_interleave(n, 0)
        seed = int(torch.randint(0, 2**62, (1,), generator=generator))
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed)
            output = policy.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=config)
        for row in output[:, input_ids.shape[1] :].tolist():  # (batch * n, <= max_new_tokens)
            samples.append(row[: row.index(eos) + 1] if eos in row else row)
    return samples


def _near_misses(answer: str, k: int, rng: Any) -> list[str]:
    """k distinct wrong answers close to `answer`: a digit off by one, a carry lost, digits swapped or dropped."""
    value = int(answer)
    options = {str(value + d) for d in (-1, 1, -10, 10, -9, 9, -11, 11, -100, 100) if value + d >= 0}
    if len(answer) > 1:
        options.add(answer[::-1])
        options.add(answer[1:])
        options.add(answer[:-1])
    options.add(answer + str(rng.randrange(10)))
    options.discard(answer)
    return rng.sample(sorted(options), min(k, len(options)))


def _evaluate(model: Any, answers: _Answers, scores: Callable, threshold: float = 0.5) -> dict:
    import torch

    was_training = model.training
    model.eval()
    with torch.no_grad():
        predicted = torch.cat([scores(answers.select(slice(s, s + 2048))) for s in range(0, len(answers.labels), 2048)])
    model.train(was_training)
    correct = ((predicted > threshold).float() == answers.labels).tolist()
    report = {"accuracy": round(sum(correct) / len(correct), 4), "rows": len(correct)}
    for kind in sorted(set(answers.kinds)):
        hits = [c for c, k in zip(correct, answers.kinds) if k == kind]
        report[f"accuracy_{kind.replace('-', '_')}"] = round(sum(hits) / len(hits), 4)
    return report


def main(argv: list[str] | None = None) -> int:
    return build_main("rlgraph.models.build_arith_rm", __doc__, build_arith_rm, argv)


if __name__ == "__main__":
    sys.exit(main())
