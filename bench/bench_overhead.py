"""What one Ray call costs the runtime on this machine: the unit behind rlgraph's step overhead.

    .venv/bin/python bench/bench_overhead.py [--repeats 200] [--smoke]

A private local Ray instance (started as `rlgraph run` starts one: 127.0.0.1, no dashboard) and one
actor on one CPU, as a DeviceProcess. Measured, each as the median of `--repeats` calls after a
warm-up, every call awaited before the next (as the step driver awaits a stage):

- `noop`: an actor call with no arguments that returns (None, seconds), as `DeviceProcess.call` does;
- `rollout_ref`: the same call with a real-sized Rollout passed as the ObjectRef of an earlier
  actor call (what `log_prob`, `values` and `update` receive), returning a (batch, R) tensor;
- `put_tensor`: `ray.put` of a (batch, R) float tensor (what the driver does with advantages,
  returns and rewards before an update);
- `pickle_rollout`: pickling plus unpickling the Rollout in-process (the serialisation share).

Batch = prompts x n of specs/grpo_arith.rl (256 samples).
"""

from __future__ import annotations

import argparse
import logging
import os
import pickle
import statistics
import sys
import time

from common import machine_facts, step_work, write_result


def make_rollout(batch: int, prompt_len: int = 6, response_len: int = 4):
    import torch

    from rlgraph.workers import Rollout

    prompts = torch.randint(3, 50, (batch, prompt_len))
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[::3, :1] = 0
    responses = torch.randint(3, 50, (batch, response_len))
    response_mask = torch.ones_like(responses)
    lists = {
        "uid": [i // 8 for i in range(batch)], "data_source": ["rlgraph/arith"] * batch,
        "ground_truth": [str(i % 199) for i in range(batch)],
        "extra_info": [{"split": "train", "index": i, "a": i % 100, "b": i % 97} for i in range(batch)],
        "prompt_text": [f"{i % 100}+{i % 97}=" for i in range(batch)], "response_text": [str(i % 199) for i in range(batch)],
    }
    return Rollout.build(prompts, prompt_mask, responses, response_mask, 0, **lists)


class Probe:
    """A stand-in for DeviceProcess: same call shape, (result, seconds in the process)."""

    def __init__(self, batch: int) -> None:
        import torch

        torch.set_num_threads(1)
        self.batch = batch

    def noop(self):
        start = time.perf_counter()
        return None, time.perf_counter() - start

    def rollout(self):
        start = time.perf_counter()
        return make_rollout(self.batch), time.perf_counter() - start

    def take(self, rollout):
        import torch

        start = time.perf_counter()
        out = torch.zeros(rollout.responses.shape)
        return out, time.perf_counter() - start


def median_ms(fn, repeats: int, warmup: int = 10) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.smoke:
        args.repeats = 5
    work = step_work("specs/grpo_arith.rl")
    batch = work.samples

    import torch

    torch.set_num_threads(1)
    rollout = make_rollout(batch)
    pickled = pickle.dumps(rollout)
    pickle_ms = median_ms(lambda: pickle.loads(pickle.dumps(rollout)), args.repeats)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    started = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    init_s = time.perf_counter() - started
    try:
        actor = ray.remote(num_cpus=1)(Probe).remote(batch)
        ray.get(actor.noop.remote())
        rollout_ref, _ = actor.rollout.options(num_returns=2).remote()
        ray.get(rollout_ref)
        tensor = torch.zeros(batch, 4)

        def noop():
            result, seconds = actor.noop.options(num_returns=2).remote()
            ray.wait([result, seconds], num_returns=2)
            ray.get(seconds)

        def take():
            result, seconds = actor.take.options(num_returns=2).remote(rollout_ref)
            ray.wait([result, seconds], num_returns=2)
            ray.get(seconds)

        result = {
            "benchmark": "Ray call overhead, one local actor",
            "batch": batch, "repeats": args.repeats, "ray_init_s": init_s,
            "noop_call_ms": median_ms(noop, args.repeats),
            "rollout_ref_call_ms": median_ms(take, args.repeats),
            "put_tensor_ms": median_ms(lambda: ray.put(tensor), args.repeats),
            "pickle_rollout_ms": pickle_ms, "rollout_pickle_bytes": len(pickled),
            "machine": machine_facts(),
        }
    finally:
        ray.shutdown()
    print(f"ray call, no arguments:             {result['noop_call_ms']:.2f} ms")
    print(f"ray call with a Rollout ObjectRef:  {result['rollout_ref_call_ms']:.2f} ms  ({batch} samples, "
          f"{len(pickled) / 1024:.0f} KiB pickled)")
    print(f"ray.put of a ({batch}, 4) tensor:      {result['put_tensor_ms']:.2f} ms")
    print(f"pickle + unpickle the Rollout:      {pickle_ms:.2f} ms")
    write_result("smoke_overhead" if args.smoke else "overhead", result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
