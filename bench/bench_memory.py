"""Peak memory of one actor update: full fine-tuning vs LoRA (rank 16), gradient checkpointing off vs on.

    .venv/bin/python bench/bench_memory.py [--repeats N] [--smoke] [--output FILE]

The model is a random Llama of ~50M parameters built in code (transformers LlamaConfig: hidden 512, MLP 1536,
12 layers, 8 heads, vocabulary 8192, untied head; saved once to a temporary folder, no download). The batch
is what a user's PPO/GRPO step hands one device: 8 samples of a 256-token prompt and a 256-token response,
in micro-batches of 4 (gradient accumulation), one epoch, one mini-batch: the worker's own
`PolicyWorker.update`, fp32, on the CPU.

Each configuration runs in a fresh subprocess, so no allocation of one is seen by another, with glibc's
mmap threshold fixed (MALLOC_ENV below) so that a freed tensor leaves the RSS:

    baseline    RSS after importing torch/transformers/peft and building a throwaway tensor (the libraries)
    warm-up     one update: AdamW allocates its state at its first optimizer step, after the backward; in a
                run it is resident through every later step's forward and backward, so the second is measured
    update peak the kernel's high-water mark of the process's RSS (`ru_maxrss`) after the second update
                (it raised the mark in every configuration measured here; else a 1 ms RSS sampler's peak)
    measured    update peak - baseline: the weights, the adapters, gradients, AdamW state and the
                activations of a micro-batch at the update's worst moment

Beside it, the
plan's estimate for the same shapes (`rlgraph plan` on a spec with this model folder: params, adapters, grads,
optimizer; the plan does not count activations).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, median, write_result

SHAPE = {"batch": 8, "micro_batch": 4, "prompt": 256, "response": 256}
SMOKE_SHAPE = {"batch": 2, "micro_batch": 1, "prompt": 16, "response": 16}
MODEL = {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 12, "num_attention_heads": 8,
         "num_key_value_heads": 8, "vocab_size": 8192, "max_position_embeddings": 1024, "tie_word_embeddings": False}
SMOKE_MODEL = {**MODEL, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 256}
LORA = {"rank": 16, "alpha": 32.0, "dropout": 0.0, "target_modules": "all-linear"}
CONFIGS = {  # name -> (lora, gradient checkpointing)
    "full": (False, False),
    "lora": (True, False),
    "full + checkpointing": (False, True),
    "lora + checkpointing": (True, True),
}
TARGETS = {"lora": 0.50, "checkpointing": 0.35}  # at least this much lower
MiB = 2**20
# glibc raises its mmap threshold each time a large block is freed, after which tensors of up to that size come
# from the heap and stay in the RSS once freed (measured: the same LoRA update then showed 2x its live memory).
# A fixed threshold maps every tensor of 64 KiB or more on its own and unmaps it when freed: the RSS follows
# the live tensors.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def trim() -> None:
    """Give freed heap pages back to the kernel, so the RSS before the update is what is live."""
    gc.collect()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


# --- one configuration, in its own process ---


def measure(model_dir: str, lora: bool, checkpointing: bool, shape: dict) -> dict:
    import torch

    from rlgraph.contract.settings import settings_from_dict
    from rlgraph.workers.batch import Rollout
    from rlgraph.workers.policy import PolicyWorker

    torch.set_num_threads(int(os.environ.get("BENCH_THREADS", "2")))
    import peft  # noqa: F401 (the libraries are in the baseline, not in the measured memory)
    import transformers  # noqa: F401

    torch.ones(1) @ torch.ones(1)
    settings = plan_for(model_dir, lora, checkpointing, shape)[0]
    trim()
    baseline = rss_bytes()

    actor = PolicyWorker(model_dir, settings_from_dict("ActorSettings", settings["actor"]), seed=0, device="cpu")
    batch, vocab = shape["batch"], actor.module.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompts = torch.randint(3, vocab, (batch, shape["prompt"]), generator=generator)
    responses = torch.randint(3, vocab, (batch, shape["response"]), generator=generator)
    rollout = Rollout.build(prompts, torch.ones_like(prompts), responses, torch.ones_like(responses), 0,
                            uid=list(range(batch)), data_source=["bench"] * batch, ground_truth=[""] * batch,
                            extra_info=[{}] * batch, prompt_text=[""] * batch, response_text=[""] * batch)
    old = torch.randn(batch, shape["response"], generator=generator) - 5
    advantages = torch.randn(batch, shape["response"], generator=generator)
    update = settings_from_dict("ActorUpdateSettings", settings["update"])
    # the first update allocates AdamW's state at its optimizer step, after the backward; from the second on it
    # is resident through the forward and backward, as in every later step of a run: that one is measured
    actor.update(rollout, old, advantages, settings=update, shuffle_seed=0)
    trim()
    before, peak_before = rss_bytes(), max_rss_bytes()
    sampler = PeakSampler()
    start = time.perf_counter()
    with sampler:
        actor.update(rollout, old, advantages, settings=update, shuffle_seed=1)
    seconds = time.perf_counter() - start
    high_water = max_rss_bytes()
    # ru_maxrss is exact but spans the process's life; it is this update's peak when the update raised it
    peak = high_water if high_water > peak_before else sampler.peak
    trainable = sum(p.numel() for p in actor.module.parameters() if p.requires_grad)
    return {"baseline_bytes": baseline, "before_update_bytes": before, "peak_before_update_bytes": peak_before,
            "peak_bytes": peak, "sampled_peak_bytes": sampler.peak, "measured_bytes": peak - baseline,
            "update_over_before_bytes": peak - before, "peak_grew_in_update": high_water > peak_before,
            "update_s": seconds, "trainable_params": trainable,
            "params": sum(p.numel() for p in actor.module.parameters())}


class PeakSampler:
    """The highest RSS seen by a thread reading /proc/self/statm every millisecond while the block runs."""

    def __init__(self) -> None:
        import threading

        self.peak, self.done = 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, rss_bytes())
            self.done.wait(0.001)

    def __enter__(self) -> "PeakSampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()
        self.peak = max(self.peak, rss_bytes())


# --- the plan's estimate for the same model ---


def plan_for(model_dir: str, lora: bool, checkpointing: bool, shape: dict) -> tuple[dict, dict[str, int]]:
    """The actor's and its update's settings (as dicts) and the actor's memory rows, from `rlgraph plan` of a
    spec with this model folder: the settings the runtime would hand the worker, the estimate it would print.
    (In the measured process it runs before the baseline is taken: the compiler's memory is the libraries'.)"""
    from rlgraph.compiler import compile_spec
    from rlgraph.contract.settings import settings_to_dict
    from rlgraph.plan.build import plan_spec

    lora_block = (f"lora {{ rank = {LORA['rank']}  alpha = {LORA['alpha']} }}" if lora else "")
    text = f"""rlgraph 1
model policy {{ path = "{model_dir}" }}
pool main {{ nodes = 1  devices_per_node = 1 }}
role actor {{ model = policy  pool = main  micro_batch = {shape['micro_batch']}
              gradient_checkpointing = {str(checkpointing).lower()}  optim {{ lr = 1e-5 }}  {lora_block} }}
role rollout {{ colocate = actor  n = 2  max_new_tokens = {shape['response']} }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "builtin:arith/train"  batch_size = {shape['batch'] // 2}  max_prompt_length = {shape['prompt']} }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(epochs = 1, minibatch = {shape['batch'] // 2})
}}
"""
    with tempfile.TemporaryDirectory() as folder:
        spec = Path(folder) / "memory.rl"
        spec.write_text(text)
        plan, diagnostics = plan_spec(compile_spec(str(spec)))
    errors = [d.message for d in diagnostics if d.is_error]
    if errors:
        raise RuntimeError(f"the bench's spec does not plan: {errors}")
    actor = next(r for r in plan.roles if r.name == "actor")
    update = next(c for c in plan.calls if c.method == "update")
    settings = {"actor": settings_to_dict(actor.settings), "update": settings_to_dict(update.settings)}
    row = plan.memory[0]
    return settings, {k.split("/", 1)[1]: v for k, v in row.breakdown.items() if k.startswith("actor/")}


def build_model(folder: Path, config: dict) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlgraph.models import resolve_model_path

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(**config, pad_token_id=0, eos_token_id=1, bos_token_id=None)).save_pretrained(folder)
    # a tokenizer the worker can load (the update never decodes): the built-in model's
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(resolve_model_path("builtin:arith-gpt")).save_pretrained(folder)


def run_one(model_dir: str, name: str, shape: dict) -> dict:
    lora, checkpointing = CONFIGS[name]
    args = [sys.executable, __file__, "--one", model_dir, "--lora", str(int(lora)), "--checkpointing",
            str(int(checkpointing)), "--shape", json.dumps(shape)]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, **MALLOC_ENV))
    if done.returncode != 0:
        raise RuntimeError(f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per configuration")
    parser.add_argument("--smoke", action="store_true", help="a tiny model and batch, one repeat")
    parser.add_argument("--output", help="result file (default bench/results/memory.json)")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--lora", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--checkpointing", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--shape", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one, bool(args.lora), bool(args.checkpointing), json.loads(args.shape))))
        return 0

    shape, config = (SMOKE_SHAPE, SMOKE_MODEL) if args.smoke else (SHAPE, MODEL)
    repeats = 1 if args.smoke else args.repeats
    with tempfile.TemporaryDirectory() as folder:
        build_model(Path(folder), config)
        estimates = {name: plan_for(folder, lora, checkpointing, shape)[1]
                     for name, (lora, checkpointing) in CONFIGS.items()}
        runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
        for repeat in range(repeats):  # configurations alternate, so a busy spell hits them alike
            for name in CONFIGS:
                runs[name].append(run_one(folder, name, shape))
                r = runs[name][-1]
                print(f"{name:22s} repeat {repeat + 1}: {r['measured_bytes'] / MiB:8.1f} MiB over the libraries "
                      f"(update {r['update_over_before_bytes'] / MiB:7.1f} MiB over its start), "
                      f"{r['update_s']:.1f} s", flush=True)

    configs = {}
    for name, values in runs.items():
        measured = [v["measured_bytes"] for v in values]
        configs[name] = {"measured_bytes": median(measured), "measured_min_bytes": min(measured),
                         "measured_max_bytes": max(measured),
                         "update_over_before_bytes": median([v["update_over_before_bytes"] for v in values]),
                         "update_s": median([v["update_s"] for v in values]),
                         "peak_grew_in_update": all(v["peak_grew_in_update"] for v in values),
                         "params": values[0]["params"], "trainable_params": values[0]["trainable_params"],
                         "estimate": estimates[name], "estimate_bytes": sum(estimates[name].values()),
                         "runs": values}

    def lower(a: str, b: str) -> float:
        return 1 - configs[b]["measured_bytes"] / configs[a]["measured_bytes"]

    comparisons = {
        "lora vs full (checkpointing off)": {"lower": lower("full", "lora"), "target": TARGETS["lora"]},
        "lora vs full (checkpointing on)": {"lower": lower("full + checkpointing", "lora + checkpointing"),
                                            "target": TARGETS["lora"]},
        "checkpointing on vs off (full)": {"lower": lower("full", "full + checkpointing"),
                                           "target": TARGETS["checkpointing"]},
        "checkpointing on vs off (lora)": {"lower": lower("lora", "lora + checkpointing"),
                                           "target": TARGETS["checkpointing"]},
    }
    for c in comparisons.values():
        c["met"] = c["lower"] >= c["target"]
    result = {"shape": shape, "model": config, "lora": LORA, "repeats": repeats, "configs": configs,
              "comparisons": comparisons, "threads": int(os.environ.get("BENCH_THREADS", "2")),
              "command": "bench/bench_memory.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    print()
    for name, c in comparisons.items():
        print(f"{name:36s} {100 * c['lower']:5.1f}% lower (target >= {100 * c['target']:.0f}%: "
              f"{'met' if c['met'] else 'missed'})")
    path = write_result("smoke_memory" if args.smoke else "memory", result, args.output)
    print(f"wrote {path}")
    return 0


def doc_section(result: dict) -> list[str]:
    """The memory section of docs/benchmarks.md (bench/run_all.py renders it)."""
    shape, cfg = result["shape"], result["model"]
    out = ["### Peak memory of one actor update: LoRA and gradient checkpointing", ""]
    full = result["configs"]["full"]
    out.append(
        f"`.venv/bin/python {result['command']}`: the second `PolicyWorker.update` of a fresh actor (the first "
        "allocates AdamW's state, resident from then on as in a run; fp32, CPU, "
        f"{result['threads']} threads) "
        f"on a random Llama of {full['params'] / 1e6:.1f}M parameters built in code (hidden {cfg['hidden_size']}, "
        f"MLP {cfg['intermediate_size']}, {cfg['num_hidden_layers']} layers, vocabulary {cfg['vocab_size']}), "
        f"{shape['batch']} samples of {shape['prompt']} prompt + {shape['response']} response tokens in "
        f"micro-batches of {shape['micro_batch']}; LoRA rank {result['lora']['rank']} on all linear layers. Each "
        "configuration runs in a fresh process, with glibc's mmap threshold fixed at 64 KiB so that freed tensors "
        "leave the RSS (`MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0`); measured = the process's RSS "
        "high-water mark (`ru_maxrss`) after "
        "the update minus its RSS once the libraries were imported, i.e. weights + adapters + gradients + AdamW "
        f"state + activations at the worst moment. Median of {result['repeats']} processes (min..max). The plan's "
        "estimate is `rlgraph plan`'s actor rows for the same model folder; it leaves activations out.")
    out.append("")
    rows = []
    for name, c in result["configs"].items():
        est = ", ".join(f"{k} {v / MiB:.0f}" for k, v in c["estimate"].items())
        rows.append([name, f"{c['trainable_params'] / 1e6:.2f}M",
                     f"{c['measured_bytes'] / MiB:.0f} MiB ({c['measured_min_bytes'] / MiB:.0f}..{c['measured_max_bytes'] / MiB:.0f})",
                     f"{c['estimate_bytes'] / MiB:.0f} MiB ({est})", f"{c['update_s']:.1f} s"])
    out.append("| configuration | trained params | measured peak | plan's estimate (MiB) | update time |")
    out.append("|---|---:|---:|---|---:|")
    out += ["| " + " | ".join(r) + " |" for r in rows]
    out.append("")
    for name, c in result["comparisons"].items():
        out.append(f"- {name}: {100 * c['lower']:.1f}% lower (target ≥ {100 * c['target']:.0f}%: "
                   f"**{'met' if c['met'] else 'missed'}**)")
    out.append("")
    return out


if __name__ == "__main__":
    sys.exit(main())
