"""Build the built-in policy `builtin:arith-gpt`: a tiny rotary GPT half-taught two-digit addition.

    python -m rlgraph.models.build_arith_gpt --out DIR

It trains a fresh LlamaForCausalLM (about 0.33M parameters, character tokenizer) with teacher forcing
on `a+b=` -> `a+b</s>` over the TRAIN split of builtin:arith only, seeded and single-process, and
stops as soon as greedy accuracy on a fixed subset of the val split reaches the target band, so that
RL starts from a model that is right about half the time and has room to improve. The folder holds
the model (safetensors), the tokenizer and `rlgraph_build.json` (recipe, steps, measured accuracy).

`resolve_model_path("builtin:arith-gpt")` runs this on first use; it takes about half a minute on
two CPU cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

MODEL_NAME = "builtin:arith-gpt"
MODEL_VERSION = 1  # part of the cache folder name: bump it whenever the recipe below changes


@dataclasses.dataclass(frozen=True)
class Architecture:
    hidden_size: int = 128
    intermediate_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    max_position_embeddings: int = 64
    rope_theta: float = 10000.0


@dataclasses.dataclass(frozen=True)
class Recipe:
    seed: int = 0
    batch_size: int = 256
    lr: float = 3e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    max_steps: int = 4000
    eval_every: int = 25  # steps between greedy checks
    eval_rows: int = 200  # the first rows of the val split, checked while training
    target_low: float = 0.40  # stop at the first check at or above this...
    target_high: float = 0.60  # ...and not above this (else keep the check nearest the middle)
    accept_low: float = 0.30  # the band any result must land in
    accept_high: float = 0.70
    num_threads: int = 2  # fixed, so the same machine always builds the same weights


def build_arith_gpt(out: str | Path, recipe: Recipe = Recipe(), arch: Architecture = Architecture(), log=print) -> dict:
    """Train and save the model into `out` (made if missing); returns what rlgraph_build.json holds."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlgraph.models.char_tokenizer import build_char_tokenizer
    from rlgraph.models.eval import greedy_accuracy
    from rlgraph.tasks import arith

    started = time.perf_counter()
    threads_before = torch.get_num_threads()
    torch.set_num_threads(recipe.num_threads)
    try:
        torch.manual_seed(recipe.seed)
        tokenizer = build_char_tokenizer()
        config = LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=arch.hidden_size,
            intermediate_size=arch.intermediate_size,
            num_hidden_layers=arch.num_hidden_layers,
            num_attention_heads=arch.num_attention_heads,
            num_key_value_heads=arch.num_attention_heads,
            max_position_embeddings=arch.max_position_embeddings,
            rope_theta=arch.rope_theta,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        model = LlamaForCausalLM(config)
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        num_params = sum(p.numel() for p in model.parameters())
        log(f"arith-gpt: {num_params:,} parameters; training on builtin:arith/train")

        input_ids, labels = _teacher_forcing_batch(tokenizer, arith.make_rows("train"))
        val_rows = arith.make_rows("val")[: recipe.eval_rows]
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=recipe.weight_decay
        )
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: min(1.0, (step + 1) / recipe.warmup_steps)
        )
        sampler = torch.Generator().manual_seed(recipe.seed)

        checks: list[tuple[int, float]] = []
        snapshots: dict[int, dict[str, Any]] = {}
        model.train()
        step = 0
        while step < recipe.max_steps:
            # --- one supervised step; the loss covers the answer and EOS only
            idx = torch.randint(len(input_ids), (recipe.batch_size,), generator=sampler)
            loss = model(input_ids=input_ids[idx], labels=labels[idx]).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            schedule.step()
            step += 1

            # --- greedy check on the val subset
            if step % recipe.eval_every:
                continue
            accuracy = greedy_accuracy(model, tokenizer, val_rows, max_new_tokens=4)
            checks.append((step, accuracy))
            log(f"  step {step:5d}  loss {loss.item():.3f}  greedy val accuracy {accuracy:.3f}")
            if accuracy >= recipe.target_low:
                if accuracy > recipe.target_high:  # jumped over the band: fall back to the nearest check
                    snapshots[step] = _snapshot(model)
                    best_step = min(snapshots, key=lambda s: abs(dict(checks)[s] - 0.5))
                    model.load_state_dict(snapshots[best_step])
                    step = best_step
                break
            if accuracy >= recipe.accept_low:
                snapshots[step] = _snapshot(model)

        model.eval()
        val_accuracy = greedy_accuracy(model, tokenizer, arith.make_rows("val"), max_new_tokens=4)
        subset_accuracy = dict(checks).get(step)
        if not recipe.accept_low <= val_accuracy <= recipe.accept_high:
            raise RuntimeError(
                f"arith-gpt build ended at step {step} with greedy val accuracy {val_accuracy:.3f}, "
                f"outside [{recipe.accept_low}, {recipe.accept_high}]; adjust the recipe in {__file__}"
            )

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        report = {
            "name": MODEL_NAME,
            "version": MODEL_VERSION,
            "num_parameters": num_params,
            "steps": step,
            "val_subset_accuracy": subset_accuracy,
            "val_accuracy": val_accuracy,
            "val_rows": len(arith.make_rows("val")),
            "checks": checks,
            "build_seconds": round(time.perf_counter() - started, 2),
            "architecture": dataclasses.asdict(arch),
            "recipe": dataclasses.asdict(recipe),
            "torch": torch.__version__,
            "data": f"builtin:arith/train (v{arith.DATA_VERSION})",
        }
        (out / "rlgraph_build.json").write_text(json.dumps(report, indent=2) + "\n")
        log(
            f"arith-gpt: stopped at step {step}; greedy val accuracy {val_accuracy:.3f} on "
            f"{report['val_rows']} prompts; {report['build_seconds']:.1f} s"
        )
        return report
    finally:
        torch.set_num_threads(threads_before)


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


def _snapshot(model: Any) -> dict[str, Any]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlgraph.models.build_arith_gpt", description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the model into (made if missing)")
    args = parser.parse_args(argv)
    build_arith_gpt(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
