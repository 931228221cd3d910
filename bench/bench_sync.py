"""Weight sync to a rollout on its own pool: the collective path (buckets over a gloo group of its own) against
the object-store path it replaced (the whole state dict put by the actor, fetched by every rollout), on a random
Llama of ~70M parameters (~280 MB in float32), bigger than arith-gpt by far.

    .venv/bin/python bench/bench_sync.py [--repeats 5] [--replicas 1] [--smoke]   # writes bench/results/sync.json

Per path: seconds per sync (median of the repeats, after one warm-up) and the peak resident memory of the
sender (the actor's process) and of each receiver (the rollout processes) during a sync, above what the
process held before it: Linux's VmHWM, reset before each sync through /proc/<pid>/clear_refs. Both paths run
in the same processes, one after the other, so the model and everything else they hold is the same.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from common import ROOT, machine_facts, write_result

SPEC = """rlgraph 1
model policy {{ path = "{model}" }}
pool main {{ nodes = 1  devices_per_node = 1  device = cpu }}
pool gen {{ nodes = 1  devices_per_node = {replicas}  device = cpu }}
role actor {{ model = policy  pool = main  optim {{ lr = 1e-5 }} }}
role rollout {{ model = policy  pool = gen  replicas = {replicas}  engine = hf  n = 2  max_new_tokens = 4 }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "builtin:arith/train"  val = "builtin:arith/val"  batch_size = 8 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  responses -> actor.log_prob -> old_log_prob
  old_log_prob, advantages -> actor.update
}}
train {{ steps = 1  seed = 0 }}
"""

# A Llama body of ~70M parameters on arith-gpt's tokenizer (its vocabulary is tiny: the body is the weight).
SHAPE = {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 10, "num_attention_heads": 12,
         "num_key_value_heads": 12}
SMOKE_SHAPE = {**SHAPE, "num_hidden_layers": 2}


def build_model(folder: Path, shape: dict[str, int]) -> int:
    """A randomly initialised Llama saved as an HF folder; its parameter count."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from rlgraph.models import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:arith-gpt"))
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=256, tie_word_embeddings=False,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id, **shape)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def memory_kb(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM back to the current RSS


def measure(sync: Callable[[], None], pids: dict[str, int], repeats: int) -> dict[str, Any]:
    """Seconds per sync and each process's peak RSS above its RSS before the sync (MB), medians of `repeats`."""
    sync()  # warm-up: first-touch allocations, lazy imports
    seconds: list[float] = []
    peaks: dict[str, list[float]] = {name: [] for name in pids}
    for _ in range(repeats):
        before = {}
        for name, pid in pids.items():
            reset_peak(pid)
            before[name] = memory_kb(pid)["VmRSS"]
        start = time.perf_counter()
        sync()
        seconds.append(time.perf_counter() - start)
        for name, pid in pids.items():
            peaks[name].append((memory_kb(pid)["VmHWM"] - before[name]) / 1024)
    return {"sync_s": statistics.median(seconds), "sync_s_all": seconds,
            "peak_rss_above_baseline_mb": {name: statistics.median(v) for name, v in peaks.items()}}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--replicas", type=int, default=1, help="rollout replicas (processes that receive)")
    parser.add_argument("--smoke", action="store_true", help="a 2-layer model, 2 repeats")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.smoke:
        args.repeats = 2

    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import plan_spec
    from rlgraph.runtime.cluster import ray_cluster
    from rlgraph.runtime.driver import wait_fail_fast
    from rlgraph.runtime.lowering import Lowered, lower
    from rlgraph.runtime.preflight import preflight
    from rlgraph.runtime.roles import worker_specs
    from rlgraph.runtime.versions import PolicyVersions
    from rlgraph.runtime.weight_sync import start_sync
    from rlgraph.runtime.weights import WeightSync
    from rlgraph.workers.weight_sync import BUCKET_BYTES

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        params = build_model(folder, SMOKE_SHAPE if args.smoke else SHAPE)
        spec = Path(tmp) / "sync.rl"
        spec.write_text(SPEC.format(model=folder, replicas=args.replicas))
        plan, diagnostics = plan_spec(compile_spec(str(spec), []))
        if not plan.ok:
            raise SystemExit("\n".join(str(d.to_json()) for d in diagnostics))
        prepared = preflight(plan, starting_locally=True)
        specs = worker_specs(plan, prepared.model_paths)
        with ray_cluster(plan):
            lowered = Lowered()
            try:
                lower(plan, specs, lowered)
                weights = WeightSync(plan, lowered, specs, PolicyVersions())
                edge = lowered.sync_edges[("actor", "rollout")]
                pids = {process: lowered.info[process]["pid"] for process in edge.processes}
                collective = measure(lambda: wait_fail_fast(start_sync(lowered, edge)), pids, args.repeats)
                object_store = measure(lambda: weights.through_object_store("actor", "rollout"), pids, args.repeats)
                startup_s = lowered.seconds.get("weight_sync_groups")
            finally:
                lowered.shutdown()

    result = {
        "model": {"params": params, "bytes": params * 4, "dtype": "float32", **(SMOKE_SHAPE if args.smoke else SHAPE)},
        "rollout_replicas": args.replicas,
        "bucket_bytes": BUCKET_BYTES,
        "repeats": args.repeats,
        "group_startup_s": startup_s,
        "collective": collective,
        "object_store": object_store,
        "machine": machine_facts(),
    }
    path = write_result("sync", result, args.output)
    mb = params * 4 / 2**20
    print(f"model: {params / 1e6:.1f}M params, {mb:.0f} MiB; {args.replicas} rollout replica(s); "
          f"buckets of {BUCKET_BYTES / 2**20:.0f} MiB; group opened in {startup_s:.2f} s")
    for name, r in (("collective", collective), ("object store", object_store)):
        peaks = ", ".join(f"{p} +{v:.0f} MB" for p, v in r["peak_rss_above_baseline_mb"].items())
        print(f"{name:>13}: {r['sync_s']:.3f} s per sync; peak RSS {peaks}")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
