"""Calibrate the activation/logit memory model (rlgraph/plan/memory_activations.py) against measured peaks.

Each configuration runs in a fresh subprocess: a random-init Llama- or Qwen2-shaped model (transformers, fp32,
eval mode as rlgraph's workers keep it) runs one pass as rlgraph's workers do (rlgraph/workers/policy.py:
`logits_to_keep`, then rlgraph/workers/logits.py's chunked float32 log-probs; gradient checkpointing via
rlgraph/workers/activations.py), forward+backward or forward-only under no_grad. The peak is the process's
resident-set high-water mark during the pass (reset through /proc/self/clear_refs) minus the resident set
before it; glibc is told to mmap every allocation over 128 KiB so that freed tensors leave the resident set.
The estimate beside it is the memory model's: activations + logits, and for a backward pass the fp32 gradients
(4 B/param) it allocates as it frees the activations (memory_activations.backward_peak).

    .venv/bin/python bench/calibrate_memory.py --save peaks.json  # the table (~12 min of CPU)
    .venv/bin/python bench/calibrate_memory.py --quick           # 4 configurations
    .venv/bin/python bench/calibrate_memory.py --rows 10,10,10   # one configuration three times (the spread)
    .venv/bin/python bench/calibrate_memory.py --load bench/results/calibrate_memory.json  # docs/memory.md's
                                                                 # peaks, with today's estimate
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from rlgraph.plan.memory import count_params  # noqa: E402
from rlgraph.plan.memory_activations import Pass, activation_bytes, backward_peak  # noqa: E402

MODELS = {  # shapes of the families' small members, shrunk to fit a CPU pass in seconds
    "llama-s": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 256, "intermediate_size": 688,
                "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4,
                "tie_word_embeddings": False},
    "qwen2-m": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 512, "intermediate_size": 1536,
                "num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 2,
                "tie_word_embeddings": True},
    "llama-l": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2816,
                "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 8,
                "tie_word_embeddings": False},
    # Qwen2-0.5B's own shape (24 layers, 2 KV heads, a 152k vocabulary): depth, and gradients (2 GB) as large as
    # the activations, so that the backward peak's overlap of the two is measured
    "qwen2-0.5b": {"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
                   "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
                   "tie_word_embeddings": True},
}
# (model, rows, prompt, response, mode): mode = train | ckpt (train with gradient checkpointing) | forward
CONFIGS = [
    ("llama-s", 4, 256, 256, "train"), ("llama-s", 8, 512, 512, "train"), ("llama-s", 8, 512, 512, "ckpt"),
    ("llama-s", 8, 512, 512, "forward"),
    ("qwen2-m", 2, 256, 256, "train"), ("qwen2-m", 4, 256, 512, "train"), ("qwen2-m", 4, 256, 512, "ckpt"),
    ("qwen2-m", 4, 256, 512, "forward"),
    ("llama-l", 2, 256, 256, "train"), ("llama-l", 4, 512, 512, "train"), ("llama-l", 4, 512, 512, "ckpt"),
    ("llama-l", 4, 512, 512, "forward"),
    ("qwen2-0.5b", 2, 256, 256, "train"), ("qwen2-0.5b", 2, 256, 256, "ckpt"),
]
QUICK = [CONFIGS[0], CONFIGS[2], CONFIGS[3], CONFIGS[5]]


def _status(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def measure(name: str, rows: int, prompt: int, response: int, mode: str) -> int:
    """The bytes one pass adds at its peak (in this process: run it in a fresh one)."""
    import gc

    import torch
    import transformers

    from rlgraph.workers.activations import checkpoint_blocks
    from rlgraph.workers.logits import token_log_probs

    torch.set_num_threads(1)
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(**MODELS[name])
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    if mode == "ckpt":
        checkpoint_blocks(model)
    input_ids = torch.randint(0, config.vocab_size, (rows, prompt + response))
    mask = torch.ones_like(input_ids)
    positions = torch.arange(prompt + response).expand(rows, -1)

    def loss():  # as the workers' micro_batch_loss: only autograd holds the logits during the backward
        logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False,
                       logits_to_keep=response + 1).logits[:, -response - 1:-1]
        return -token_log_probs(logits, input_ids[:, -response:])[0].mean()

    def run():
        with torch.set_grad_enabled(mode != "forward"):
            if mode == "forward":
                loss()
            else:
                loss().backward()

    gc.collect()
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current resident set
    run()
    return _status("VmHWM") - before


def estimate(name: str, rows: int, prompt: int, response: int, mode: str) -> int:
    cfg = MODELS[name]
    h = cfg["hidden_size"]
    items = activation_bytes(Pass(rows, prompt + response, response), layers=cfg["num_hidden_layers"], hidden=h,
                             intermediate=cfg["intermediate_size"], vocab=cfg["vocab_size"], dtype_bytes=4,
                             backward=mode != "forward", checkpointing=mode == "ckpt",
                             kv=cfg["num_key_value_heads"] * h // cfg["num_attention_heads"],
                             heads=cfg["num_attention_heads"])
    if mode != "forward":  # one micro-batch after an optimizer step: no gradients before it
        items = backward_peak(items, grads=4 * count_params(cfg), head_grads=4 * cfg["vocab_size"] * h,
                              accumulated=False, tied=cfg["tie_word_embeddings"])
    return sum(items.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 configurations")
    parser.add_argument("--rows", help="comma-separated configuration numbers (1-based), e.g. 10,10,10 to repeat one")
    parser.add_argument("--save", help="write the measured peaks to this JSON file")
    parser.add_argument("--load", help="print the table from peaks measured before (--save), with today's estimate")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a JSON configuration: measure it here
    args = parser.parse_args()
    if args.one:
        print(measure(*json.loads(args.one)))
        return 0
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    if args.load:
        with open(args.load) as f:
            runs = [(tuple(config), measured) for config, measured in json.load(f)]
    else:
        configs = ([CONFIGS[int(i) - 1] for i in args.rows.split(",")] if args.rows
                   else QUICK if args.quick else CONFIGS)
        runs = []
        for config in configs:
            out = subprocess.run([sys.executable, __file__, "--one", json.dumps(config)], env=env,
                                 capture_output=True, text=True, check=True)
            runs.append((config, int(out.stdout.strip().splitlines()[-1])))
            print(f"measured {config}: {runs[-1][1] / 2**20:.0f} MiB", file=sys.stderr, flush=True)
        if args.save:
            with open(args.save, "w") as f:
                json.dump(runs, f)
    MiB = 2**20
    print("| model | params | rows x (prompt + response) | pass | estimate MiB | measured MiB | estimate / measured |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for config, measured in runs:
        est = estimate(*config)
        name, rows, prompt, response, mode = config
        ratio = est / measured
        worst = max(worst, abs(ratio - 1))
        print(f"| {name} | {count_params(MODELS[name]) / 1e6:.0f}M | {rows} x ({prompt} + {response}) | {mode} | "
              f"{est / MiB:.0f} | {measured / MiB:.0f} | {ratio:.2f} |", flush=True)
    print(f"\nworst deviation: {100 * worst:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
