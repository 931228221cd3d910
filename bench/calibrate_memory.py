"""Calibrate the activation/logit memory model (rlgraph/plan/memory_activations.py) against measured peaks.

Each configuration runs in a fresh subprocess: a random-init Llama- or Qwen2-shaped model (transformers, fp32,
eval mode as rlgraph's workers keep it) runs one pass as rlgraph's workers do (rlgraph/workers/policy.py:
`logits_to_keep`, then rlgraph/workers/logits.py's chunked float32 log-probs; gradient checkpointing via
rlgraph/workers/activations.py), forward+backward or forward-only under no_grad. The peak is the process's
resident-set high-water mark during the pass (reset through /proc/self/clear_refs) minus the resident set
before it; glibc is told to mmap every allocation over 128 KiB so that freed tensors leave the resident set.
The estimate beside it is the memory model's: activations + logits, plus the fp32 gradients (4 B/param) that
a backward pass allocates.

    .venv/bin/python bench/calibrate_memory.py            # the table (about 3 minutes on 2 cores)
    .venv/bin/python bench/calibrate_memory.py --quick    # 4 configurations
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
from rlgraph.plan.memory_activations import Pass, activation_bytes  # noqa: E402

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
}
# (model, rows, prompt, response, mode): mode = train | ckpt (train with gradient checkpointing) | forward
CONFIGS = [
    ("llama-s", 4, 256, 256, "train"), ("llama-s", 8, 512, 512, "train"), ("llama-s", 8, 512, 512, "ckpt"),
    ("llama-s", 8, 512, 512, "forward"),
    ("qwen2-m", 2, 256, 256, "train"), ("qwen2-m", 4, 256, 512, "train"), ("qwen2-m", 4, 256, 512, "ckpt"),
    ("qwen2-m", 4, 256, 512, "forward"),
    ("llama-l", 2, 256, 256, "train"), ("llama-l", 4, 512, 512, "train"), ("llama-l", 4, 512, 512, "ckpt"),
    ("llama-l", 4, 512, 512, "forward"),
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
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
    if mode == "ckpt":
        checkpoint_blocks(model)
    input_ids = torch.randint(0, config.vocab_size, (rows, prompt + response))
    mask = torch.ones_like(input_ids)
    positions = torch.arange(prompt + response).expand(rows, -1)

    def run():
        with torch.set_grad_enabled(mode != "forward"):
            logits = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=False,
                           logits_to_keep=response + 1).logits[:, -response - 1:-1]
            log_prob, _ = token_log_probs(logits, input_ids[:, -response:])
            if mode != "forward":
                (-log_prob.mean()).backward()

    gc.collect()
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current resident set
    run()
    return _status("VmHWM") - before


def estimate(name: str, rows: int, prompt: int, response: int, mode: str) -> int:
    cfg = MODELS[name]
    items = activation_bytes(Pass(rows, prompt + response, response), layers=cfg["num_hidden_layers"],
                             hidden=cfg["hidden_size"], intermediate=cfg["intermediate_size"],
                             vocab=cfg["vocab_size"], dtype_bytes=4, backward=mode != "forward",
                             checkpointing=mode == "ckpt")
    grads = 4 * count_params(cfg) if mode != "forward" else 0
    return sum(items.values()) + grads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 configurations")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a JSON configuration: measure it here
    args = parser.parse_args()
    if args.one:
        print(measure(*json.loads(args.one)))
        return 0
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    MiB = 2**20
    print(f"| model | params | rows x (prompt + response) | pass | estimate MiB | measured MiB | estimate / measured |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for config in QUICK if args.quick else CONFIGS:
        out = subprocess.run([sys.executable, __file__, "--one", json.dumps(config)], env=env, capture_output=True,
                             text=True, check=True)
        measured = int(out.stdout.strip().splitlines()[-1])
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
