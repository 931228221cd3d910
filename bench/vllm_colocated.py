"""Does a colocated vLLM engine slow the trainer beside it? (issue 26: why the GRPO step was no faster with vLLM)

    .venv/bin/python bench/vllm_colocated.py [--repeats 4]     # writes bench/results/vllm_colocated.json

A colocated rollout runs vLLM's engine in the trainer's own process (VLLM_ENABLE_V1_MULTIPROCESSING=0), on the
one CPU thread a 1-CPU device gets. Two child processes, run one after the other, each time the trainer's work
(the fwd+bwd of 128 rows of 140 tokens in micro-batches of 16, an AdamW step, and a no-grad pass: what the
update and the ref's log_prob do) `--repeats` times, then again after a pause: one ("engine") starts a vLLM
engine in the pause and generates twice with a weight reload between; the other ("control") only sleeps. If the
engine slowed torch (its threads spinning, settings it changes), the engine child's after/before ratio would
exceed the control's. The engine child also reports the CPU seconds its threads other than the main one used
while the trainer's work ran after the engine started (/proc/self/task), and where its generate call's time goes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, machine_facts, write_result

TICKS = os.sysconf("SC_CLK_TCK")


def thread_ticks() -> dict[int, int]:
    """CPU ticks (user + system) of each thread of this process."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        out[int(tid)] = int(fields[11]) + int(fields[12])
    return out


def trainer_work(model: Any, optimizer: Any, ids: Any) -> float:
    import torch

    start = time.perf_counter()
    for i in range(0, len(ids), 16):
        logits = model(input_ids=ids[i:i + 16]).logits
        torch.log_softmax(logits.float(), -1).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        model(input_ids=ids)
    return time.perf_counter() - start


def child(mode: str, folder: str, repeats: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)  # a DeviceProcess of one CPU
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(3, 50, (128, 140))
    trainer_work(model, optimizer, ids)  # warm-up
    before = [trainer_work(model, optimizer, ids) for _ in range(repeats)]
    out: dict[str, Any] = {"mode": mode, "before_s": before}
    if mode == "engine":
        from rlgraph.workers.engines import SamplingParams, engine_class

        engine = engine_class("vllm").from_pretrained(folder, dtype="float32", device="cpu", max_sequences=128)
        sampling = SamplingParams(max_new_tokens=128, temperature=1.0)
        prompts = [[1] + [3 + (i * 7 + j) % 40 for j in range(8 + i % 8)] for i in range(16)]
        engine.generate(prompts, 8, sampling, seed=0, with_log_probs=True)
        engine.load_weights(model.state_dict())  # what a sync does; loaded at the next generate
        start = time.perf_counter()
        engine._load_pending()
        out["reload_s"] = time.perf_counter() - start
        start = time.perf_counter()
        generated = engine.generate(prompts, 8, sampling, seed=1, with_log_probs=True)
        out["generate_s"] = time.perf_counter() - start
        out["generated_tokens"] = sum(len(row) for row in generated.token_ids)
        out["threads_after_start"] = len(os.listdir("/proc/self/task"))
    else:
        time.sleep(1.0)
    ticks = thread_ticks()
    after = [trainer_work(model, optimizer, ids) for _ in range(repeats)]
    used = {tid: t - ticks.get(tid, 0) for tid, t in thread_ticks().items()}
    main = used.pop(os.getpid(), 0)
    out.update(after_s=after, ratio=statistics.median(after) / statistics.median(before),
               main_thread_cpu_s=main / TICKS, other_threads_cpu_s=sum(used.values()) / TICKS)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(child(args.child[0], args.child[1], args.repeats)), flush=True)
        return 0
    from bench_vllm import random_llama

    with tempfile.TemporaryDirectory(prefix="rlgraph-bench-colocated-") as tmp:
        folder = Path(tmp) / "llama3m"
        params = random_llama(folder, hidden=256, layers=4, heads=4, kv_heads=4, intermediate=512)
        runs = []
        for mode in ("engine", "control", "engine", "control"):
            load = os.getloadavg()[0]
            done = subprocess.run([sys.executable, __file__, "--child", mode, str(folder), "--repeats",
                                   str(args.repeats)], cwd=ROOT, capture_output=True, text=True)
            line = next((x for x in done.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise RuntimeError(f"the {mode} child failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
            run = json.loads(line.removeprefix("RESULT ")) | {"load": load}
            runs.append(run)
            print(f"{mode}: trainer work after / before {run['ratio']:.3f}, other threads "
                  f"{run['other_threads_cpu_s']:.2f} s CPU against the main thread's {run['main_thread_cpu_s']:.1f} s,"
                  f" load {load:.1f}", flush=True)
    result = {"command": "bench/vllm_colocated.py " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": machine_facts(), "model_params": params, "runs": runs}
    print(f"wrote {write_result('vllm_colocated', result, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
