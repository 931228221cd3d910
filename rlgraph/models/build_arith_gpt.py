"""Build the built-in policy `builtin:arith-gpt`: a tiny rotary GPT half-taught two-digit addition.

    python -m rlgraph.models.build_arith_gpt --out DIR

It trains a fresh LlamaForCausalLM (4 layers, width 64, about 0.27M parameters, the character
tokenizer of `char_tokenizer`) with teacher forcing on `a+b=` -> `<a+b></s>` (loss on the answer and
EOS) over the TRAIN split of builtin:arith only, and stops at the first greedy check on a fixed subset
of the val split that lands in the target band: RL then starts from a model that is right about half
the time, with room to improve. The folder holds the model (safetensors), the tokenizer and
`rlgraph_build.json` (recipe, steps, every check, the accuracy on the whole val split).

Deterministic on one machine: seeded, one thread (which also keeps a busy machine from stalling it:
with two threads on two shared cores, a step can take ten times longer), global RNG state restored
afterwards. It is the recipe of the weights shipped as builtin:arith-gpt (rlgraph/models/weights/,
hashes pinned in registry.py): they are what it produced on the project's 2-core CPU machine, about
45 s. Another CPU may round differently, stop at another check and give other bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlgraph.models.recipe import build_main, deterministic, save_build, tiny_llama

MODEL_NAME = "builtin:arith-gpt"
MODEL_VERSION = 2  # in rlgraph_build.json: bump it whenever the recipe below changes (v1: 2 x 128)


@dataclasses.dataclass(frozen=True)
class Architecture:
    # Depth learns the carries in fewest steps: 4 x 64 got there in 250 steps where 2 x 128 took 475.
    hidden_size: int = 64
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    max_position_embeddings: int = 64
    rope_theta: float = 10000.0


@dataclasses.dataclass(frozen=True)
class Recipe:
    seed: int = 0
    batch_size: int = 256  # 128 needed 3.5x the steps, 512 more compute for the same result
    lr: float = 5e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    max_steps: int = 2000
    eval_every: int = 10  # steps between greedy checks (accuracy climbs fast once carries are learnt)
    eval_rows: int = 200  # the first rows of the val split, checked while training
    target_low: float = 0.40  # stop at the first check at or above this; if it jumped past
    target_high: float = 0.60  # this, keep whichever check came nearer 0.5
    accept_low: float = 0.30  # the whole val split must land in this band, or the build fails
    accept_high: float = 0.70
    num_threads: int = 1


def build_arith_gpt(
    out: str | Path,
    recipe: Recipe = Recipe(),
    arch: Architecture = Architecture(),
    log: Callable[[str], None] | None = None,
    name: str = MODEL_NAME,
    version: int = MODEL_VERSION,
) -> dict:
    """Train and save the model into `out` (made if missing); returns what rlgraph_build.json holds.

    Progress goes to `log` (default: this module's logger at INFO). `name`, `version`: what the build records
    (builtin:arith-gpt-teacher is this recipe trained further: rlgraph/models/build_arith_teacher.py).
    """
    import torch

    from rlgraph.models.eval import greedy_accuracy
    from rlgraph.tasks import arith

    log = log or logging.getLogger(__name__).info
    started = time.perf_counter()
    val_rows = arith.make_rows("val")
    with deterministic(recipe.seed, recipe.num_threads):
        model, tokenizer, steps, checks = _train(recipe, arch, log)
        val_accuracy = greedy_accuracy(model, tokenizer, val_rows, max_new_tokens=4)
    if not recipe.accept_low <= val_accuracy <= recipe.accept_high:
        raise RuntimeError(
            f"{name} build ended at step {steps} with greedy val accuracy {val_accuracy:.3f}, "
            f"outside [{recipe.accept_low}, {recipe.accept_high}]; adjust the recipe in {__file__}"
        )

    report = {
        "name": name,
        "version": version,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "val_accuracy": val_accuracy,
        "val_rows": len(val_rows),
        "checks": checks,  # (step, greedy accuracy on the first recipe.eval_rows val prompts)
        "build_seconds": round(time.perf_counter() - started, 2),
        "architecture": dataclasses.asdict(arch),
        "recipe": dataclasses.asdict(recipe),
        "torch": torch.__version__,
        "data": f"builtin:arith/train (v{arith.DATA_VERSION})",
    }
    save_build(out, model, tokenizer, report)
    log(
        f"{name}: step {steps}, greedy accuracy {val_accuracy:.3f} on the {len(val_rows)} val prompts, "
        f"{report['build_seconds']:.1f} s"
    )
    return report


def _train(recipe: Recipe, arch: Architecture, log: Callable[[str], None]) -> tuple[Any, Any, int, list]:
    """(model, tokenizer, steps taken, checks) trained until greedy val-subset accuracy is in the band."""
    import torch
    from rlgraph.models.char_tokenizer import build_char_tokenizer
    from rlgraph.models.eval import greedy_accuracy
    from rlgraph.tasks import arith

    tokenizer = build_char_tokenizer()
    model = tiny_llama(arch, tokenizer)
    log(f"arith-gpt: {sum(p.numel() for p in model.parameters()):,} parameters; training on builtin:arith/train")

    input_ids, labels = _teacher_forcing_batch(tokenizer, arith.make_rows("train"))  # (9500, 10) each
    val_subset = arith.make_rows("val")[: recipe.eval_rows]
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=recipe.weight_decay)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / recipe.warmup_steps))
    batches = torch.Generator().manual_seed(recipe.seed)

    checks: list[tuple[int, float]] = []
    fallback: tuple[int, float, dict] | None = None  # the last check in the accept band, below target
    model.train()
    for step in range(1, recipe.max_steps + 1):
        # --- one supervised step; the loss covers the answer and EOS only
        idx = torch.randint(len(input_ids), (recipe.batch_size,), generator=batches)
        loss = model(input_ids=input_ids[idx], labels=labels[idx]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()

        # --- greedy check on the val subset
        if step % recipe.eval_every:
            continue
        accuracy = greedy_accuracy(model, tokenizer, val_subset, max_new_tokens=4)
        checks.append((step, accuracy))
        log(f"  step {step:5d}  loss {loss.item():.3f}  greedy accuracy {accuracy:.3f} (val subset)")
        if accuracy < recipe.target_low:
            if accuracy >= recipe.accept_low:
                fallback = (step, accuracy, {k: v.detach().clone() for k, v in model.state_dict().items()})
            continue
        if accuracy > recipe.target_high and fallback and abs(fallback[1] - 0.5) < abs(accuracy - 0.5):
            step, _, weights = fallback
            model.load_state_dict(weights)
            log(f"  overshot the band: back to step {step}")
        break
    return model.eval(), tokenizer, step, checks


def _teacher_forcing_batch(tokenizer: Any, rows: list[dict]) -> tuple[Any, Any]:
    """(input_ids, labels) for every row, right-padded: prompt + answer + EOS, labels -100 but on the answer + EOS."""
    import torch

    sequences, targets = [], []
    for row in rows:
        prompt = tokenizer(row["prompt"])["input_ids"]
        answer = tokenizer(row["reward_model"]["ground_truth"])["input_ids"] + [tokenizer.eos_token_id]
        sequences.append(prompt + answer)
        targets.append([-100] * len(prompt) + answer)
    width = max(len(s) for s in sequences)
    input_ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in sequences])
    labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    return input_ids, labels


def main(argv: list[str] | None = None) -> int:
    return build_main("rlgraph.models.build_arith_gpt", __doc__, build_arith_gpt, argv)


if __name__ == "__main__":
    sys.exit(main())
