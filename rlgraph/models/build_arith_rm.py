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
  dropped, an extra digit, no EOS.

The target is 1.0 for a right answer and 0.0 otherwise, with a squared-error loss, so the score is
in the rule reward's units (`exact_match` pays 0 or 1) and a spec can swap one for the other
without retuning. The build stops once the classification accuracy (score > 0.5) on held-out
answers to VAL-split prompts passes the target, and fails if it never does. `rlgraph_build.json`
records every check and the final accuracy per kind of answer.

Deterministic: seeded, one thread, global RNG state restored afterwards. `resolve_model_path(
"builtin:arith-rm")` runs it on first use (and builds builtin:arith-gpt first if needed).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODEL_NAME = "builtin:arith-rm"
MODEL_VERSION = 1  # part of the cache folder name: bump it whenever the recipe below changes


@dataclasses.dataclass(frozen=True)
class Recipe:
    seed: int = 0
    policy_samples: int = 4  # samples of builtin:arith-gpt per train prompt, at temperature 1
    near_misses: int = 2  # hand-made wrong answers per train prompt
    batch_size: int = 256
    lr: float = 1e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    max_steps: int = 1500
    eval_every: int = 50
    target_accuracy: float = 0.97  # held-out accuracy at which training stops
    accept_accuracy: float = 0.90  # below this at max_steps the build fails
    loss: str = "mse"  # "mse" on 0/1 targets, or "bce" on the score as a logit
    dense: bool = False  # also score every answer token against "the answer so far is on track"
    lm_weight: float = 0.0  # weight of a next-token loss on the right answers (keeps the sums in the body)
    extra_layers: int = 0  # fresh blocks on top of the policy's, starting as the identity
    num_threads: int = 1


def build_arith_rm(out: str | Path, recipe: Recipe = Recipe(), log: Callable[[str], None] | None = None) -> dict:
    """Train and save the reward model into `out` (made if missing); returns what rlgraph_build.json holds."""
    import torch

    from rlgraph.models.char_tokenizer import save_char_tokenizer
    from rlgraph.tasks import arith

    log = log or logging.getLogger(__name__).info
    started = time.perf_counter()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.num_threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(recipe.seed)
            model, tokenizer, steps, checks, final = _train(recipe, log)
    finally:
        torch.set_num_threads(threads_before)
    if final["accuracy"] < recipe.accept_accuracy:
        raise RuntimeError(
            f"arith-rm build ended at step {steps} with held-out accuracy {final['accuracy']:.3f}, "
            f"below {recipe.accept_accuracy}; adjust the recipe in {__file__}"
        )

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    save_char_tokenizer(tokenizer, out)
    report = {
        "name": MODEL_NAME,
        "version": MODEL_VERSION,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "initialized_from": "builtin:arith-gpt",
        "steps": steps,
        "heldout": final,  # accuracy overall and per kind of answer, on VAL-split prompts
        "checks": checks,  # (step, held-out accuracy)
        "build_seconds": round(time.perf_counter() - started, 2),
        "recipe": dataclasses.asdict(recipe),
        "torch": torch.__version__,
        "data": f"builtin:arith/train (v{arith.DATA_VERSION}); held out: builtin:arith/val",
    }
    (out / "rlgraph_build.json").write_text(json.dumps(report, indent=2) + "\n")  # last: marks the folder complete
    log(f"arith-rm: step {steps}, held-out accuracy {final['accuracy']:.3f}, {report['build_seconds']:.1f} s")
    return report


def _train(recipe: Recipe, log: Callable[[str], None]) -> tuple[Any, Any, int, list, dict]:
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from rlgraph.models import resolve_model_path
    from rlgraph.tasks import arith
    from rlgraph.workers.reward_model import last_token_scores

    policy_path = resolve_model_path("builtin:arith-gpt")
    tokenizer = AutoTokenizer.from_pretrained(policy_path)
    policy = AutoModelForCausalLM.from_pretrained(policy_path)
    generator = torch.Generator().manual_seed(recipe.seed)
    train = _examples(policy, tokenizer, arith.make_rows("train"), recipe, generator)
    heldout = _examples(policy, tokenizer, arith.make_rows("val"), recipe, generator)
    del policy
    log(f"arith-rm: {len(train.labels):,} train answers ({train.labels.mean():.2f} right), "
        f"{len(heldout.labels):,} held out")

    model = _from_policy(policy_path, recipe.extra_layers)
    model.config.pad_token_id = tokenizer.pad_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / recipe.warmup_steps))

    def scores(batch: _Answers) -> torch.Tensor:
        return last_token_scores(model, batch.input_ids, batch.attention_mask, batch.position_ids)

    checks: list[tuple[int, float]] = []
    model.train()
    for step in range(1, recipe.max_steps + 1):
        rows = torch.randint(len(train.labels), (recipe.batch_size,), generator=generator)
        batch = train.select(rows)
        hidden = model.model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                             position_ids=batch.position_ids, use_cache=False).last_hidden_state  # (B, T, H)
        if recipe.dense:
            predicted, target, mask = model.score(hidden).squeeze(-1).float(), batch.prefix_labels, batch.answer_mask
        else:
            predicted, target = model.score(hidden[:, -1]).squeeze(-1).float(), batch.labels
            mask = torch.ones_like(target)
        if recipe.loss == "bce":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(predicted, target, reduction="none")
        else:
            loss = (predicted - target) ** 2
        loss = (loss * mask).sum() / mask.sum()
        if recipe.lm_weight:
            # the tied embeddings as an LM head: predict each next token of the rows whose answer is right
            logits = hidden[:, :-1] @ model.model.embed_tokens.weight.T  # (B, T-1, vocab)
            lm_mask = (batch.answer_mask[:, 1:] * batch.labels[:, None])
            lm = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.input_ids[:, 1:], reduction="none")
            loss = loss + recipe.lm_weight * (lm * lm_mask).sum() / lm_mask.sum().clamp(min=1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()
        if step % recipe.eval_every and step != recipe.max_steps:
            continue
        final = _evaluate(model, heldout, scores, 0.0 if recipe.loss == "bce" else 0.5)
        checks.append((step, final["accuracy"]))
        log(f"  step {step:5d}  loss {loss.item():.4f}  held-out accuracy {final['accuracy']:.3f}")
        if final["accuracy"] >= recipe.target_accuracy:
            break
    return model.eval(), tokenizer, step, checks, final


def _from_policy(policy_path: str, extra_layers: int) -> Any:
    """A one-score sequence classifier on the policy's body, with `extra_layers` fresh blocks on top whose
    output projections start at zero (so at first they pass the policy's hidden states through)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    config = AutoConfig.from_pretrained(policy_path, num_labels=1)
    depth = config.num_hidden_layers
    config.num_hidden_layers = depth + extra_layers
    model = AutoModelForSequenceClassification.from_config(config)
    body = AutoModelForCausalLM.from_pretrained(policy_path).model.state_dict()
    missing, unexpected = model.model.load_state_dict(body, strict=False)
    assert not unexpected and all(k.startswith("layers.") and int(k.split(".")[1]) >= depth for k in missing), missing
    with torch.no_grad():
        for block in model.model.layers[depth:]:
            block.self_attn.o_proj.weight.zero_()
            block.mlp.down_proj.weight.zero_()
    return model


@dataclasses.dataclass
class _Answers:
    input_ids: Any  # (N, T) left-padded prompt + answer (+ EOS), as a rollout holds them
    attention_mask: Any  # (N, T)
    position_ids: Any  # (N, T)
    labels: Any  # (N,) 1.0 right, 0.0 wrong
    prefix_labels: Any  # (N, T) at each answer token: 1.0 while the answer so far is a prefix of the right one
    answer_mask: Any  # (N, T) 1 on the answer tokens
    kinds: list[str]  # "right", "sample" (a wrong policy sample) or "near-miss"

    def select(self, rows: Any) -> _Answers:
        return _Answers(self.input_ids[rows], self.attention_mask[rows], self.position_ids[rows],
                        self.labels[rows], self.prefix_labels[rows], self.answer_mask[rows], [])


def _examples(policy: Any, tokenizer: Any, rows: list[dict], recipe: Recipe, generator: Any) -> _Answers:
    """Right answers, the policy's own samples and near misses for every row, scored by exact match."""
    import random

    import torch

    from rlgraph.tasks.arith import exact_match
    from rlgraph.workers.batch import position_ids_from_mask
    from rlgraph.workers.rollout_hf import HFRollout, left_pad

    eos = tokenizer.eos_token_id
    rollout = HFRollout(policy, tokenizer)
    items = [{"input_ids": tokenizer(row["prompt"])["input_ids"], "ground_truth": row["reward_model"]["ground_truth"]}
             for row in rows]
    sampled = []
    for start in range(0, len(items), 1024):
        part = rollout.generate(items[start : start + 1024], recipe.policy_samples, max_new_tokens=4, seed=generator)
        lengths = part.response_mask.sum(dim=1).tolist()
        sampled += [row[:length] for row, length in zip(part.responses.tolist(), lengths)]

    shuffle = random.Random(recipe.seed)
    sequences, labels, prefix_labels, answer_masks, kinds = [], [], [], [], []
    for i, (row, item) in enumerate(zip(rows, items)):
        answer = row["reward_model"]["ground_truth"]
        candidates = [(tokenizer(answer)["input_ids"] + [eos], "right")]
        candidates += [(ids, "sample") for ids in sampled[i * recipe.policy_samples : (i + 1) * recipe.policy_samples]]
        candidates += [(tokenizer(text)["input_ids"] + [eos], "near-miss")
                       for text in _near_misses(answer, recipe.near_misses, shuffle)]
        target = tokenizer(answer)["input_ids"] + [eos]
        for ids, kind in candidates:
            text = tokenizer.decode(ids, skip_special_tokens=True)
            right = exact_match("", text, answer) == 1.0 and (eos in ids)
            # Dense labels teach the check digit by digit; at the last token the label is the whole answer's.
            on_track = [float(ids[: j + 1] == target[: j + 1]) for j in range(len(ids))]
            prefix_labels.append([0.0] * len(item["input_ids"]) + on_track)
            sequences.append(item["input_ids"] + ids)
            answer_masks.append([0.0] * len(item["input_ids"]) + [1.0] * len(ids))
            labels.append(1.0 if right else 0.0)
            kinds.append("right" if right else kind)
    input_ids, attention_mask = left_pad(sequences, tokenizer.pad_token_id)
    width = input_ids.shape[1]
    dense = torch.tensor([[0.0] * (width - len(row)) + row for row in prefix_labels])  # left-padded like the ids
    answer_mask = torch.tensor([[0.0] * (width - len(row)) + row for row in answer_masks])
    return _Answers(input_ids, attention_mask, position_ids_from_mask(attention_mask), torch.tensor(labels),
                    dense, answer_mask, kinds)


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
    parser = argparse.ArgumentParser(prog="python -m rlgraph.models.build_arith_rm", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the model into (made if missing)")
    args = parser.parse_args(argv)
    build_arith_rm(args.out, log=print)
    return 0


if __name__ == "__main__":
    sys.exit(main())
