"""Padding-free passes (`remove_padding`) against padded ones: one actor step on prompts and responses of mixed
length, with sample-count and token-budget micro-batches.

    .venv/bin/python bench/bench_packing.py [--repeats 5] [--smoke]     # writes bench/results/packing.json

The model, the batch and the step are bench_token_budget.py's: a random Llama of 4.2M parameters (hidden 256,
4 layers, vocabulary 4096), 64 samples whose prompts and responses each have 32..128 tokens (10,681 real tokens
in a padded batch of 16,384), `log_prob` over the batch then one `update` epoch (two mini-batches of 32),
float32, torch on one thread. The actor's settings are resolved by the compiler from a spec, as a user writes
them:

- `micro_batch = 8` against `micro_batch = 8  remove_padding = true`: the same 8 rows a pass, packed;
- `micro_batch_tokens = 2048` against the same with `remove_padding = true` (a pass then counts the packed rows
  it runs on, so more rows fit in the same budget).

Each repeat builds the four actors from the same weights and runs them back to back (the order rotates), so
each ratio is taken on one machine state; the figures are the ratios' median and range over the repeats. The
packed actors must give the padded ones' loss: pg_loss and old log-probs are compared in every repeat.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench_token_budget import (BUDGET, LONGEST, MICRO_BATCH, MINI_BATCH, SAMPLES, SHORTEST, SIZES, SMOKE_SIZES,
                                build_model, mixed_batch, one_step, settings)
from common import load_average, machine_facts, spread, write_result

VARIANTS = {
    "padded": f"micro_batch = {MICRO_BATCH}",
    "packed": f"micro_batch = {MICRO_BATCH}  remove_padding = true",
    "budget": f"micro_batch_tokens = {BUDGET}",
    "budget_packed": f"micro_batch_tokens = {BUDGET}  remove_padding = true",
}
PAIRS = {"micro_batch": ("padded", "packed"), "micro_batch_tokens": ("budget", "budget_packed")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the four steps (default 5)")
    parser.add_argument("--smoke", action="store_true",
                        help="a smaller model and one repeat; writes smoke_packing.json")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a busy shared machine more threads spin and wait)")
    parser.add_argument("--output", default=None, help="the result file (default bench/results/packing.json)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    sizes = SMOKE_SIZES if args.smoke else SIZES
    repeats = 1 if args.smoke else args.repeats
    load_start = load_average()
    names = list(VARIANTS)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        params = build_model(folder / "llama", sizes)
        resolved = {name: settings(folder, micro) for name, micro in VARIANTS.items()}
        rollout, prompt_lengths, response_lengths = mixed_batch(SAMPLES, sizes["vocab_size"])
        advantages = torch.randn(SAMPLES, 1, generator=torch.Generator().manual_seed(1)) * rollout.loss_mask
        for name in ("padded", "packed"):  # warm-up: first-call costs of torch and HF
            one_step(folder, rollout, advantages, resolved[name])
        runs = []
        for repeat in range(repeats):
            order = names[repeat % 4:] + names[: repeat % 4]
            run = {name: one_step(folder, rollout, advantages, resolved[name]) for name in order}
            row: dict[str, Any] = {"order": order}
            for name in names:
                row.update({f"{name}_{key}": run[name][key] for key in ("log_prob_s", "update_s", "step_s")})
            for pair, (plain, packed) in PAIRS.items():
                a, b = run[plain], run[packed]
                row[f"{pair}_step_ratio"] = a["step_s"] / b["step_s"]
                row[f"{pair}_log_prob_ratio"] = a["log_prob_s"] / b["log_prob_s"]
                row[f"{pair}_update_ratio"] = a["update_s"] / b["update_s"]
                row[f"{pair}_pg_loss_diff"] = abs(a["pg_loss"] - b["pg_loss"])
                row[f"{pair}_log_prob_max_abs_diff"] = float((a["log_prob"] - b["log_prob"]).abs().max())
            runs.append(row)
            print(f"repeat {repeat + 1}/{repeats}: step " + ", ".join(f"{n} {run[n]['step_s']:.2f} s" for n in names)
                  + f"; padded/packed {row['micro_batch_step_ratio']:.2f}x, budget/budget_packed "
                  f"{row['micro_batch_tokens_step_ratio']:.2f}x", flush=True)

    result = {
        "command": ".venv/bin/python bench/bench_packing.py" + (" --smoke" if args.smoke else f" --repeats {repeats}"),
        "model": {**sizes, "params": params},
        "batch": {"samples": SAMPLES, "mini_batch": MINI_BATCH, "prompt_tokens": [SHORTEST, LONGEST],
                  "response_tokens": [SHORTEST, LONGEST],
                  "real_tokens": sum(prompt_lengths) + sum(response_lengths), "padded_tokens": SAMPLES * 2 * LONGEST},
        "settings": VARIANTS,
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "runs": runs,
        "step_s_median": {n: statistics.median(r[f"{n}_step_s"] for r in runs) for n in names},
        "load_start": load_start, "load_end": load_average(), "machine": machine_facts(),
    }
    for pair in PAIRS:
        result[f"{pair}_step_ratio"] = spread([r[f"{pair}_step_ratio"] for r in runs])
        for part in ("log_prob", "update"):
            result[f"{pair}_{part}_ratio_median"] = statistics.median(r[f"{pair}_{part}_ratio"] for r in runs)
        # as text: the result file rounds numbers to 4 decimals, and these are far below
        result[f"{pair}_pg_loss_max_abs_diff"] = f'{max(r[f"{pair}_pg_loss_diff"] for r in runs):.1e}'
        result[f"{pair}_log_prob_max_abs_diff"] = f'{max(r[f"{pair}_log_prob_max_abs_diff"] for r in runs):.1e}'
    path = write_result("smoke_packing" if args.smoke else "packing", result, args.output)
    for pair, (plain, packed) in PAIRS.items():
        r = result[f"{pair}_step_ratio"]
        print(f"{pair}: step time {plain} / {packed}: {statistics.median(r['values']):.2f}x "
              f"(repeats {r['min']:.2f}..{r['max']:.2f}); pg_loss differs by at most "
              f"{result[f'{pair}_pg_loss_max_abs_diff']}, log-probs by {result[f'{pair}_log_prob_max_abs_diff']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
