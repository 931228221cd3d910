"""Token-budget micro-batches (`micro_batch_tokens`) against padded ones (`micro_batch`): one actor step on
prompts and responses of mixed length.

    .venv/bin/python bench/bench_token_budget.py [--repeats 5] [--smoke]     # writes bench/results/token_budget.json

The model is a random Llama of 4.2M parameters built here (hidden 256, 4 layers, 4 heads, vocabulary 4096);
the batch is 64 samples whose prompts and responses each have 32..128 tokens (uniform: lengths vary 4x), so
the padded batch is 128 + 128 columns wide. One step is what the actor does in a PPO step: `log_prob` over the
batch (the old log-probs), then `update` (one epoch, mini-batches of 32 samples: two optimizer steps,
token-mean, float32), torch on one thread (`--threads`). The settings are the ones a user would write, resolved
by the compiler from a spec as `rlgraph run` resolves them:

- padded: `micro_batch = 8`: 8 rows x 256 columns = 2,048 token positions per pass;
- token budget: `micro_batch_tokens = 2048`: the same largest pass (so the same peak memory), rows sorted
  by length and each pass cut to its longest row.

Each repeat builds both actors from the same weights and runs them back to back (the order alternates), so
the ratio padded / token-budget step time is taken on one machine state; the figures are the ratios' median
and range over the repeats. Both must give the same loss: the pg_loss, entropy and log-probs of the two are
compared in every repeat. Target (issue 16): at least 1.3x faster per step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import judge, load_average, machine_facts, spread, write_result

TARGET = 1.3
SAMPLES, MINI_BATCH, MICRO_BATCH, BUDGET = 64, 32, 8, 2048
SHORTEST, LONGEST = 32, 128  # tokens of a prompt, and of a response
SIZES = {"hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 4, "vocab_size": 4096}
SMOKE_SIZES = {**SIZES, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}


def build_model(folder: Path, sizes: dict[str, int]) -> int:
    """A random Llama saved as an HF folder (with the built-in character tokenizer); its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlgraph.models.char_tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = LlamaConfig(**sizes, max_position_embeddings=2 * LONGEST, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def mixed_batch(samples: int, vocab: int, seed: int = 0):
    """A Rollout of `samples` rows: prompts and responses of SHORTEST..LONGEST tokens each, uniform."""
    import torch

    from rlgraph.workers.batch import Rollout

    g = torch.Generator().manual_seed(seed)
    pad, eos = 0, 1
    prompt_lengths = torch.randint(SHORTEST, LONGEST + 1, (samples,), generator=g).tolist()
    response_lengths = torch.randint(SHORTEST, LONGEST + 1, (samples,), generator=g).tolist()
    prompts = torch.full((samples, LONGEST), pad)
    prompt_mask = torch.zeros(samples, LONGEST, dtype=torch.long)
    responses = torch.full((samples, LONGEST), pad)
    response_mask = torch.zeros(samples, LONGEST, dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        prompts[row, LONGEST - p:] = torch.randint(4, vocab, (p,), generator=g)
        prompt_mask[row, LONGEST - p:] = 1
        responses[row, :r] = torch.randint(4, vocab, (r,), generator=g)
        responses[row, r - 1] = eos
        response_mask[row, :r] = 1
    lists = {name: [""] * samples for name in ("data_source", "prompt_text", "response_text")}
    rollout = Rollout.build(prompts, prompt_mask, responses, response_mask, pad, uid=list(range(samples)),
                            ground_truth=[None] * samples, extra_info=[None] * samples, **lists)
    return rollout, prompt_lengths, response_lengths


SPEC = """rlgraph 1
model policy {{ path = "{model}" }}
pool main {{ nodes = 1  devices_per_node = 1  device = cpu }}
role actor {{ model = policy  pool = main  {micro}  optim {{ lr = 1e-5 }} }}
role rollout {{ colocate = actor  n = 2  max_new_tokens = {longest} }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "builtin:arith/train"  batch_size = {prompts}  max_prompt_length = {longest} }}
step {{
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(minibatch = {minibatch})
}}
"""


def settings(folder: Path, micro: str):
    """The actor's settings, log-prob settings and update settings as `rlgraph plan` resolves them from a spec
    with `micro` (`micro_batch = 8` or `micro_batch_tokens = 2048`) on the actor: what a user would write."""
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan

    spec = folder / f"actor_{micro.split()[0]}.rl"
    spec.write_text(SPEC.format(model=folder / "llama", micro=micro, longest=LONGEST, prompts=SAMPLES // 2,
                                minibatch=MINI_BATCH // 2))
    compiled = compile_spec(str(spec))
    if not compiled.ok:
        raise SystemExit("\n".join(d.message for d in compiled.diagnostics))
    plan = build_plan(compiled)
    return plan.role("actor").settings, plan.call("actor.log_prob").settings, plan.call("actor.update").settings


def one_step(folder: Path, rollout, advantages, resolved: tuple) -> dict:
    """A fresh actor from `folder`/llama: log_prob over the batch, then one update; timed apart."""
    import torch

    from rlgraph.workers.policy import PolicyWorker

    actor_settings, log_prob_settings, update_settings = resolved
    actor = PolicyWorker(str(folder / "llama"), actor_settings, seed=0, device="cpu")
    start = time.perf_counter()
    old = actor.log_prob(rollout, settings=log_prob_settings)
    log_prob_s = time.perf_counter() - start
    start = time.perf_counter()
    metrics = actor.update(rollout, old, advantages, settings=update_settings, shuffle_seed=0)
    update_s = time.perf_counter() - start
    mask = rollout.loss_mask.bool()
    return {"log_prob_s": log_prob_s, "update_s": update_s, "step_s": log_prob_s + update_s,
            "pg_loss": metrics["actor/pg_loss"], "entropy": metrics["actor/entropy"],
            "grad_norm": metrics["actor/grad_norm"], "log_prob": torch.where(mask, old, 0)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="pairs of steps (default 5)")
    parser.add_argument("--smoke", action="store_true", help="a smaller model and one repeat; writes smoke_token_budget.json")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: on a busy shared machine more threads spin and wait)")
    parser.add_argument("--output", default=None, help="the result file (default bench/results/token_budget.json)")
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    sizes = SMOKE_SIZES if args.smoke else SIZES
    repeats = 1 if args.smoke else args.repeats
    load_start = load_average()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        params = build_model(folder / "llama", sizes)
        resolved = {"padded": settings(folder, f"micro_batch = {MICRO_BATCH}"),
                    "token_budget": settings(folder, f"micro_batch_tokens = {BUDGET}")}
        rollout, prompt_lengths, response_lengths = mixed_batch(SAMPLES, sizes["vocab_size"])
        # advantages of one sign per sample, as a group estimator gives them
        advantages = torch.randn(SAMPLES, 1, generator=torch.Generator().manual_seed(1)) * rollout.loss_mask
        one_step(folder, rollout, advantages, resolved["padded"])  # warm-up: first-call costs of torch and HF
        runs = []
        for repeat in range(repeats):
            order = ["padded", "token_budget"][:: -1 if repeat % 2 else 1]
            run = {name: one_step(folder, rollout, advantages, resolved[name]) for name in order}
            padded, budget = run["padded"], run["token_budget"]
            runs.append({
                "order": order,
                **{f"{name}_{key}": run[name][key] for name in run for key in ("log_prob_s", "update_s", "step_s")},
                "step_ratio": padded["step_s"] / budget["step_s"],
                "log_prob_ratio": padded["log_prob_s"] / budget["log_prob_s"],
                "update_ratio": padded["update_s"] / budget["update_s"],
                "pg_loss": [padded["pg_loss"], budget["pg_loss"]],
                "entropy": [padded["entropy"], budget["entropy"]],
                "grad_norm": [padded["grad_norm"], budget["grad_norm"]],
                "log_prob_max_abs_diff": f'{float((padded["log_prob"] - budget["log_prob"]).abs().max()):.1e}',
            })
            print(f"repeat {repeat + 1}/{repeats}: step padded {padded['step_s']:.2f} s, token budget "
                  f"{budget['step_s']:.2f} s ({runs[-1]['step_ratio']:.2f}x); pg_loss {padded['pg_loss']:.6f} vs "
                  f"{budget['pg_loss']:.6f}", flush=True)

    ratios = spread([r["step_ratio"] for r in runs])
    padded_tokens = SAMPLES * 2 * LONGEST
    real_tokens = sum(prompt_lengths) + sum(response_lengths)
    median_ratio = statistics.median(ratios["values"])
    result = {
        "command": ".venv/bin/python bench/bench_token_budget.py" + (" --smoke" if args.smoke else
                                                                       f" --repeats {repeats}"),
        "model": {**sizes, "params": params},
        "batch": {"samples": SAMPLES, "mini_batch": MINI_BATCH, "prompt_tokens": [SHORTEST, LONGEST],
                  "response_tokens": [SHORTEST, LONGEST], "real_tokens": real_tokens, "padded_tokens": padded_tokens},
        "settings": {"padded": f"micro_batch = {MICRO_BATCH}", "token_budget": f"micro_batch_tokens = {BUDGET}"},
        "threads": torch.get_num_threads(),
        "repeats": repeats,
        "runs": runs,
        "step_ratio": ratios,
        "step_ratio_median": median_ratio,
        "log_prob_ratio_median": statistics.median(r["log_prob_ratio"] for r in runs),
        "update_ratio_median": statistics.median(r["update_ratio"] for r in runs),
        # as text: the result file rounds numbers to 4 decimals, and these are far below
        "pg_loss_max_abs_diff": f'{max(abs(a - b) for a, b in (r["pg_loss"] for r in runs)):.1e}',
        "log_prob_max_abs_diff": f'{max(float(r["log_prob_max_abs_diff"]) for r in runs):.1e}',
        "target": TARGET,
        "verdict": judge(min(ratios["values"]) - TARGET, 0.0, repeats) if min(ratios["values"]) >= TARGET
        else judge(median_ratio - TARGET, ratios["range"] / 2, repeats),
        "load_start": load_start, "load_end": load_average(), "machine": machine_facts(),
    }
    path = write_result("smoke_token_budget" if args.smoke else "token_budget", result, args.output)
    print(f"step time padded / token budget: {median_ratio:.2f}x (repeats {ratios['min']:.2f}..{ratios['max']:.2f}); "
          f"pg_loss differs by at most {result['pg_loss_max_abs_diff']}; wrote {path}")
    return 0


def doc_section(result: dict[str, Any]) -> list[str]:
    """The figures as markdown, for docs/benchmarks.md (run_all.py renders them)."""
    b, r = result["batch"], result["step_ratio"]
    runs = result["runs"]
    med = lambda key: statistics.median(run[key] for run in runs)  # noqa: E731
    out = ["### Token-budget micro-batches", "",
           f"`{result['command']}`: one actor step (`log_prob` over the batch, then `update`) on a random Llama of "
           f"{result['model']['params'] / 1e6:.1f}M parameters, {b['samples']} samples with prompts and responses of "
           f"{b['prompt_tokens'][0]}..{b['prompt_tokens'][1]} tokens each ({b['real_tokens']:,} real tokens in a "
           f"padded batch of {b['padded_tokens']:,}), mini-batches of {b['mini_batch']} samples, float32, "
           f"torch on {result['threads']} thread(s); `{result['settings']['padded']}` against "
           f"`{result['settings']['token_budget']}` (the same largest pass). {result['repeats']} repeats, both "
           "actors built from the same weights and run back to back in each.", "",
           "| | padded | token budget | ratio |", "|---|---:|---:|---:|"]
    for key, name in (("log_prob_s", "`log_prob`"), ("update_s", "`update`"), ("step_s", "step")):
        out.append(f"| {name} (median) | {med('padded_' + key):.2f} s | {med('token_budget_' + key):.2f} s | "
                   f"{med('padded_' + key) / med('token_budget_' + key):.2f}x |")
    out += ["", f"Step time padded / token budget: **{result['step_ratio_median']:.2f}x** (repeats "
            f"{r['min']:.2f}..{r['max']:.2f}), target ≥ {result['target']}x: {result['verdict']}. The same loss: "
            f"pg_loss differs by at most {result['pg_loss_max_abs_diff']}, old log-probs by at most "
            f"{result['log_prob_max_abs_diff']} (float32).", ""]
    return out


if __name__ == "__main__":
    sys.exit(main())
