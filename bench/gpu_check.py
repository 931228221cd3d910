"""The GPU path, checked on one device without Ray (issue 15): one command, one line per check, all figures as JSON.

    python bench/gpu_check.py                              # a GPU: Qwen2.5-0.5B's shape, random weights
    python bench/gpu_check.py --device cpu --shape tiny    # the same checks on a CPU (tests/bench runs this)
    python bench/gpu_check.py --device cpu --dtype float32 --workload 4,2,128,128,4 \
        --checks generate,log_prob,update,plan_vs_measured  # the real shape's memory on a CPU (docs/benchmarks.md)

It runs the workers as the runtime's processes do (PolicyWorker, RolloutWorker, the weight-sync buckets, a
one-rank torch.distributed group for fsdp), on a random-init model of a real shape saved to a temporary
folder, with a word-level tokenizer of the model's full vocabulary (no download). Checks:

- outputs on CPU: what generate, log_prob and the weight sync hand back has only CPU tensors
- mixed precision: bf16 actor -> fp32 params, grads and AdamW state; bf16 compute; params move after one
  update at lr 1e-6; fp16 on a trained role refused
- memory: peak of generate, log_prob and update (the CUDA allocator's; on a CPU the resident set's) beside
  the plan's estimate for the same shapes (the plan needs lark; without it that column says so)
- kept vs recomputed log-probs (max |diff| on the loss mask, the PPO ratio's first mean)
- gradient checkpointing engaged (block forwards per micro-batch, peak with and without)
- fsdp on a one-rank group (nccl on a GPU, gloo on a CPU): update, generate, full state dict, save and reload
- weight sync: bucketed stream vs whole state dict (seconds, host peak RSS)
- throughput: generated tokens/s, trained tokens/s, model FLOPs utilisation against `--peak-tflops`
- bf16 compute: the dtype a linear layer's output has inside log_prob and update (autocast engaged)
- reserved memory: the caching allocator's reserved high-water mark beside the allocated one (GPU)
- LoRA: only the adapters move in an update, the base stays bit-equal; the update's peak against full fine-tuning
- remove_padding: packed passes' log-probs against the padded ones (or the refusal the runtime would give)
- optimizer_offload: AdamW's moments on the host between steps, the parameters still move; the steady peak
- param_offload (fsdp one rank, GPU only: FSDP2's CPUOffloadPolicy needs a device to gather to): shards on the host
- release/resume: an engine's memory freed by release_memory, and the same tokens from the same seed after resume
- resume: an actor saved (weights + optimizer state through a file) and rebuilt makes the update the one going on makes
- not here: real sharding (world size 1 never shards a model across ranks; it needs two GPUs)

Exit status 0 when every check passed, 1 otherwise; a check that fails prints FAIL and its reason and the
others still run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from rlgraph.contract import settings as s  # noqa: E402

SHAPES = {
    # Qwen2.5-0.5B's config.json (random weights: shapes and memory are what matter here)
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # the same code paths, small enough for a CPU test
    "tiny": dict(vocab_size=4096, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
}
# (prompts, samples per prompt, prompt tokens, response tokens, micro-batch) per shape
WORKLOADS = {"qwen2.5-0.5b": (16, 4, 256, 256, 8), "tiny": (2, 2, 8, 8, 2)}
H200_BF16_DENSE_TFLOPS = 989.0
SPEC_DTYPES = {"bfloat16": "bf16", "float32": "fp32"}


# --- what the checks share ---------------------------------------------------------------------------


class Report:
    def __init__(self, only: list[str] | None = None) -> None:
        self.results: dict[str, Any] = {}
        self.failed: list[str] = []
        self.only = only

    def check(self, name: str) -> Callable:
        def run(fn: Callable[[], dict[str, Any]]) -> None:
            if self.only is not None and name not in self.only:
                return
            try:
                figures = fn() or {}
                self.results[name] = {"ok": True, **figures}
                print(f"PASS {name}: {_line(figures)}", flush=True)
            except Exception as err:  # one failed check must not hide the others
                self.results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
                self.failed.append(name)
                print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
                traceback.print_exc(limit=4)
        return run


def _line(figures: dict[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)
    return ", ".join(f"{k}={fmt(v)}" for k, v in figures.items())


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


class Peak:
    """Peak memory of a block, in GiB: on a GPU the CUDA allocator's high-water mark; on a CPU (Linux) the
    process's resident-set high-water mark during the block (reset through /proc/self/clear_refs) minus the
    resident set before the model was built (`Peak.baseline`), the nearest CPU figure to what the allocator
    counts. Run CPU measurements with glibc told to hand freed tensors back (main() sets it), or freed memory
    stays in the resident set and the figure only grows."""

    baseline: int | None = None  # bytes resident before any model existed (set by main on a CPU)

    def __init__(self, device: torch.device) -> None:
        self.device, self.gib, self.reserved_gib = device, None, None  # reserved: the caching allocator's (GPU)

    def __enter__(self) -> "Peak":
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        elif Peak.baseline is not None:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # reset the high-water mark to the current resident set
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.gib = torch.cuda.max_memory_allocated(self.device) / 2**30
            self.reserved_gib = torch.cuda.max_memory_reserved(self.device) / 2**30
        elif Peak.baseline is not None:
            self.gib = (_status_bytes("VmHWM") - Peak.baseline) / 2**30
        self.seconds = time.perf_counter() - self.start


def _status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def _return_freed_memory() -> None:
    """glibc: serve every allocation over 128 KiB by mmap and trim the heap, so a freed tensor leaves the
    resident set and a later peak is not hidden by memory kept for reuse (bench/calibrate_memory.py does the
    same through the environment)."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
    libc.mallopt(M_MMAP_THRESHOLD, 128 * 1024)
    libc.mallopt(M_TRIM_THRESHOLD, 128 * 1024)


def host_peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def build_model(folder: Path, shape: str) -> int:
    """A random-init Qwen2 of `shape` and a word-level tokenizer of its whole vocabulary; its parameter count."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config

    config = Qwen2Config(**SHAPES[shape], bos_token_id=None, eos_token_id=1, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(folder)
    vocab = {f"t{i}": i for i in range(config.vocab_size)}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="t2"))
    word_level.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=word_level, eos_token="t1", pad_token="t0", unk_token="t2")
    tokenizer.save_pretrained(folder)
    return sum(p.numel() for p in model.parameters())


def optim(lr: float = 1e-6) -> s.OptimSettings:
    return s.OptimSettings(lr=lr, betas=(0.9, 0.999), weight_decay=0.0, warmup_steps=0, warmup_ratio=None, grad_clip=1.0,
                        schedule="constant", min_lr_ratio=0.0, decay_steps=None)


def actor_settings(dtype: str, micro: int, *, strategy: str = "ddp", checkpointing: bool = False,
                   lora: s.LoraSettings | None = None, param_offload: bool = False, optimizer_offload: bool = False,
                   remove_padding: bool = False, lr: float = 1e-6) -> s.ActorSettings:
    return s.ActorSettings(dtype=dtype, strategy=strategy, micro_batch=micro, micro_batch_tokens=None,
                           entropy_coeff=0.0, optim=optim(lr),
                           gradient_checkpointing=checkpointing, lora=lora, param_offload=param_offload,
                           optimizer_offload=optimizer_offload, remove_padding=remove_padding)


def update_settings(micro: int) -> s.ActorUpdateSettings:
    return s.ActorUpdateSettings(epochs=1, minibatch=None, mini_batch_size=None, micro_batch=micro,
                                 micro_batch_tokens=None,
                                 loss_agg="token-mean", clip_low=0.2, clip_high=0.2, clip_c=3.0, kl_coef=0.0,
                                 kl_kind="k3", policy_loss="vanilla", entropy_coeff=0.0, temperature=1.0,
                                 tis="off", tis_cap=2.0, user_loss=None)


def generate_settings(n: int, response: int, keep: bool = True) -> s.GenerateSettings:
    return s.GenerateSettings(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=response, keep_log_probs=keep,
                              env=None)


def prompts(count: int, length: int, vocab: int) -> list[dict[str, Any]]:
    generator = torch.Generator().manual_seed(1)
    return [{"input_ids": torch.randint(3, vocab, (length,), generator=generator).tolist(), "prompt_text": ""}
            for _ in range(count)]


def tensors_of(value: Any) -> list[torch.Tensor]:
    import dataclasses

    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value):
        return [t for f in dataclasses.fields(value) for t in tensors_of(getattr(value, f.name))]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    return []


def on_cpu(value: Any) -> bool:
    return all(t.device.type == "cpu" for t in tensors_of(value))


@contextlib.contextmanager
def one_rank_group(backend: str):
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": "0", "WORLD_SIZE": "1",
                       "LOCAL_RANK": "0"})
    dist.init_process_group(backend, rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def plan_estimate(folder: Path, dtype: str, device_gib: float, prompts_n: int, n: int, prompt_len: int, response: int,
                  micro: int) -> dict[str, Any]:
    """The plan's per-device memory for the same model (its config.json) and batch: one actor with its hybrid
    rollout."""
    try:
        from rlgraph.compiler import compile_spec
        from rlgraph.plan.build import plan_spec
    except ImportError as err:  # the GPU image has no lark: carry its wheel to get this column
        return {"plan": f"not estimated ({err})"}
    text = f"""rlgraph 1
model policy {{ path = "{folder}" }}
pool gpu {{ nodes = 1  devices_per_node = 1  device = gpu  memory = {device_gib:.0f}GiB }}
role actor {{ model = policy  pool = gpu  dtype = {SPEC_DTYPES[dtype]}  micro_batch = {micro} }}
role rollout {{ colocate = actor  n = {n}  max_new_tokens = {response} }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "builtin:arith/train"  batch_size = {prompts_n}  max_prompt_length = {prompt_len} }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses
  responses -> exact -> scores
  responses -> actor.log_prob -> old_log_prob
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update
}}
"""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "gpu_check.rl"
        spec.write_text(text)
        plan, diagnostics = plan_spec(compile_spec(str(spec)))
    errors = [f"{d.code}: {d.message}" for d in diagnostics if d.severity == "error"]
    if errors:
        raise AssertionError(f"the check's own spec does not plan: {'; '.join(errors)}")
    row = plan.memory[0]
    return {"plan_gib": row.estimated_bytes / 2**30,
            "plan_items_gib": {k: round(v / 2**30, 3) for k, v in row.breakdown.items()}}


# --- the checks ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-0.5b")
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_DENSE_TFLOPS,
                        help="the device's dense bf16 peak, for model FLOPs utilisation (default: H200)")
    parser.add_argument("--out", type=Path, help="write every figure here as JSON")
    parser.add_argument("--workload", help="PROMPTS,N,PROMPT_TOKENS,RESPONSE_TOKENS,MICRO_BATCH instead of the "
                        "shape's default (a CPU measurement of the real shape needs a small one)")
    parser.add_argument("--dtype", choices=sorted(SPEC_DTYPES), default="bfloat16",
                        help="the trained roles' compute dtype (float32 for a CPU measurement: bf16 matmuls "
                        "on a CPU without bf16 units take minutes per pass)")
    parser.add_argument("--checks", help="comma-separated names of the checks to run (default: all; "
                        "generate, log_prob and update build on each other, in that order)")
    args = parser.parse_args(argv)

    from rlgraph.workers import PolicyWorker, RolloutWorker
    from rlgraph.workers import fsdp
    from rlgraph.workers.cuda import indexed_device
    from rlgraph.workers.weight_sync import pack, plan_buckets, unpack

    device = indexed_device(args.device)  # set_device refuses a bare "cuda", the default on a GPU
    if device.type == "cuda":
        torch.cuda.set_device(device)
    elif sys.platform.startswith("linux"):
        _return_freed_memory()
    n_prompts, n, prompt_len, response, micro = (
        tuple(int(x) for x in args.workload.split(",")) if args.workload else WORKLOADS[args.shape])
    # mixed_precision builds the actor that the later checks use: it always runs
    report = Report(["mixed_precision", *args.checks.split(",")] if args.checks else None)
    tmp = tempfile.TemporaryDirectory()
    folder = Path(tmp.name) / "model"
    params = build_model(folder, args.shape)
    if device.type == "cpu" and sys.platform.startswith("linux"):
        # after build_model: the libraries it imported are loaded and its model is freed (a library is not a peak)
        import gc

        gc.collect()
        Peak.baseline = _status_bytes("VmRSS")
    vocab = SHAPES[args.shape]["vocab_size"]
    items = prompts(n_prompts, prompt_len, vocab)
    info = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "torch": torch.__version__, "shape": args.shape, "params": params,
            "workload": {"prompts": n_prompts, "n": n, "prompt_tokens": prompt_len, "response_tokens": response,
                         "micro_batch": micro}}
    print(f"gpu_check: {_line(info)}", flush=True)
    state: dict[str, Any] = {}

    @report.check("mixed_precision")
    def _() -> dict[str, Any]:
        actor = PolicyWorker(str(folder), actor_settings(args.dtype, micro), seed=0, device=device)
        state["actor"] = actor
        dtypes = {p.dtype for p in actor.module.parameters()}
        expect(dtypes == {torch.float32}, f"bf16 actor params are {dtypes}, not fp32 master weights")
        return {"param_dtypes": sorted(str(d) for d in dtypes)}

    @report.check("generate")
    def _() -> dict[str, Any]:
        actor = state["actor"]
        with Peak(device) as peak:
            rollout = actor.generate(items, settings=generate_settings(n, response), seed=0)
        state["rollout"] = rollout
        expect(on_cpu(rollout), "the rollout holds device tensors")
        tokens = int(rollout.loss_mask.sum())
        return {"peak_gib": peak.gib, "seconds": peak.seconds, "tokens_per_s": tokens / peak.seconds,
                "outputs_on_cpu": True}

    @report.check("log_prob")
    def _() -> dict[str, Any]:
        actor, rollout = state["actor"], state["rollout"]
        with Peak(device) as peak:
            log_prob = actor.log_prob(rollout, settings=s.LogProbSettings(temperature=1.0, micro_batch=micro,
                                                                          micro_batch_tokens=None))
        expect(on_cpu(log_prob), "log_prob returned a device tensor")
        mask = rollout.loss_mask.bool()
        kept = rollout.sample_log_probs
        diff = (log_prob - kept).abs()[mask]
        ratio = torch.exp(log_prob - kept)[mask].mean().item()
        state["log_prob"] = log_prob
        return {"peak_gib": peak.gib, "seconds": peak.seconds, "kept_vs_recomputed_max_abs": diff.max().item(),
                "kept_vs_recomputed_mean_abs": diff.mean().item(), "first_ratio_mean": ratio}

    @report.check("update")
    def _() -> dict[str, Any]:
        actor, rollout, log_prob = state["actor"], state["rollout"], state["log_prob"]
        grad_dtypes: set[torch.dtype] = set()
        hooks = [p.register_hook(lambda g: grad_dtypes.add(g.dtype)) for p in actor.module.parameters()]
        before = {name: p.detach().clone() for name, p in actor.module.named_parameters()}
        advantages = torch.randn(rollout.responses.shape, generator=torch.Generator().manual_seed(2))
        with Peak(device) as peak:
            metrics = actor.update(rollout, log_prob, advantages, settings=update_settings(micro), shuffle_seed=0)
        for hook in hooks:
            hook.remove()
        moved = sum(int((p.detach() != before[name]).any()) for name, p in actor.module.named_parameters())
        adam = {t.dtype for st in actor.optim.optimizer.state.values() for t in st.values()
                if isinstance(t, torch.Tensor) and t.dim() > 0}
        expect(grad_dtypes == {torch.float32}, f"gradients are {grad_dtypes}")
        expect(adam == {torch.float32}, f"AdamW state is {adam}")
        expect(moved == len(before), f"only {moved} of {len(before)} parameters changed after one step at lr 1e-6")
        del before  # a whole copy of the parameters: not part of the next peak
        # the plan's estimate is the steady state: AdamW's state exists from the first optimizer step on, so
        # the second update is the one that peaks as every later step will
        with Peak(device) as steady:
            actor.update(rollout, log_prob, advantages, settings=update_settings(micro), shuffle_seed=1)
        tokens = int(rollout.attention_mask.sum())
        flops = 6 * params * tokens  # forward + backward of every token the update reads
        state["update_steady_gib"] = steady.gib
        return {"peak_gib": peak.gib, "steady_peak_gib": steady.gib, "reserved_peak_gib": steady.reserved_gib,
                "seconds": peak.seconds,
                "tokens_per_s": tokens / peak.seconds,
                "mfu": flops / peak.seconds / (args.peak_tflops * 1e12) if device.type == "cuda" else None,
                "grad_dtypes": sorted(str(d) for d in grad_dtypes), "adam_dtypes": sorted(str(d) for d in adam),
                "params_changed": f"{moved}/{len(hooks)}", "grad_norm": metrics.get("actor/grad_norm")}

    @report.check("fp16_refused")
    def _() -> dict[str, Any]:
        try:
            PolicyWorker(str(folder), actor_settings("float16", micro), seed=0, device=device)
        except ValueError as err:
            return {"message": str(err)[:80]}
        raise AssertionError("an fp16 actor was built: it would turn inf/NaN without loss scaling")

    @report.check("gradient_checkpointing")
    def _() -> dict[str, Any]:
        rollout, log_prob = state["rollout"], state["log_prob"]
        advantages = torch.ones(rollout.responses.shape)
        peaks, calls = {}, {}
        for on in (False, True):
            actor = PolicyWorker(str(folder), actor_settings(args.dtype, micro, checkpointing=on), seed=0,
                                 device=device)
            # a pre-hook on a part of the block: a recomputation calls the block's forward, not its hooks, and
            # stops as soon as it has what backward needs (a post-hook may never run)
            count = [0]
            actor.module.model.layers[0].mlp.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
            with Peak(device) as peak:
                actor.update(rollout, log_prob, advantages, settings=update_settings(micro), shuffle_seed=0)
            peaks[on], calls[on] = peak.gib, count[0]
            del actor
        micro_batches = -(-len(rollout) // micro)
        expect(calls[False] == micro_batches, f"block ran {calls[False]} times without checkpointing")
        expect(calls[True] == 2 * micro_batches, f"block ran {calls[True]} times with checkpointing: not engaged")
        return {"block_forwards_off": calls[False], "block_forwards_on": calls[True], "peak_gib_off": peaks[False],
                "peak_gib_on": peaks[True]}

    @report.check("weight_sync")
    def _() -> dict[str, Any]:
        actor = state["actor"]
        rollout_worker = RolloutWorker(str(folder), s.RolloutSettings(
            engine="hf", n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=response, tp=1,
            memory_fraction=0.5, max_sequences=None, dtype=args.dtype, val=s.ValSettings(n=1, temperature=0.0, top_p=1.0, top_k=0)),
            seed=0, device=str(device))
        host_before = host_peak_gib()
        start = time.perf_counter()
        weights = dict(actor.module.state_dict())
        layout = [(name, tuple(t.shape), t.dtype) for name, t in weights.items()]
        sent = 0
        for bucket in plan_buckets(layout):
            flat = pack(bucket, (weights[name] for name in bucket.names), device)
            rollout_worker.engine.load_weights(unpack(bucket, flat))
            sent += flat.numel() * flat.element_size()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        bucketed_s, host_bucketed = time.perf_counter() - start, host_peak_gib() - host_before
        start = time.perf_counter()
        rollout_worker.load_state_dict(actor.state_dict())  # the object-store path: a whole CPU copy
        whole_s, host_whole = time.perf_counter() - start, host_peak_gib() - host_before
        ours = rollout_worker.engine.module.state_dict()
        for name, tensor in weights.items():
            expect(torch.equal(ours[name].float().cpu(), tensor.to(ours[name].dtype).float().cpu()),
                   f"{name} differs after the sync")
        return {"bucketed_s": bucketed_s, "whole_state_dict_s": whole_s, "gib_sent": sent / 2**30,
                "host_peak_growth_bucketed_gib": host_bucketed, "host_peak_growth_whole_gib": host_whole}

    @report.check("fsdp_one_rank")
    def _() -> dict[str, Any]:
        backend = "nccl" if device.type == "cuda" else "gloo"
        rollout = state["rollout"]
        with one_rank_group(backend):
            actor = PolicyWorker(str(folder), actor_settings(args.dtype, micro, strategy="fsdp"), seed=0,
                                 device=device)
            actor.shard()  # one rank: the runtime would not shard, the check does, to run the sharded code
            sharded = [p for p in actor.module.parameters() if hasattr(p, "full_tensor")]
            expect(sharded, "no parameter is a DTensor after shard()")
            log_prob = actor.log_prob(rollout, settings=s.LogProbSettings(temperature=1.0, micro_batch=micro,
                                                                          micro_batch_tokens=None))
            actor.update(rollout, log_prob, torch.ones(rollout.responses.shape), settings=update_settings(micro),
                         shuffle_seed=0)
            with Peak(device) as peak:
                again = actor.generate(items[:2], settings=generate_settings(1, response, keep=False), seed=0)
            expect(on_cpu(again), "a sharded generate returned device tensors")
            full = actor.state_dict()
            expect(on_cpu(full) and len(full) > 0, "the full state dict is empty or not on the CPU")
            saved = Path(tmp.name) / "saved"
            actor.save(saved)
        reloaded = PolicyWorker(str(saved), actor_settings(args.dtype, micro), seed=0, device="cpu")
        mine = reloaded.module.state_dict()
        for name, tensor in full.items():
            expect(torch.equal(mine[name].cpu(), tensor.cpu()), f"{name} differs after save and reload")
        return {"backend": backend, "dtensors": len(sharded), "generate_peak_gib": peak.gib,
                "generate_s": peak.seconds, "saved_and_reloaded": True}

    def fresh_update(actor: Any, seed: int = 0) -> dict[str, Any]:
        """One update of `actor` on the generate check's rollout, with advantages of a fixed seed."""
        rollout, log_prob = state["rollout"], state["log_prob"]
        advantages = torch.randn(rollout.responses.shape, generator=torch.Generator().manual_seed(2))
        return actor.update(rollout, log_prob, advantages, settings=update_settings(micro), shuffle_seed=seed)

    def linear_output_dtypes(actor: Any, run: Callable[[], Any]) -> set[torch.dtype]:
        seen: set[torch.dtype] = set()
        layer = next(m for m in actor.module.modules() if isinstance(m, torch.nn.Linear))
        hook = layer.register_forward_hook(lambda _m, _i, out: seen.add(out.dtype))
        try:
            run()
        finally:
            hook.remove()
        return seen

    @report.check("bf16_compute")
    def _() -> dict[str, Any]:
        actor, rollout = state["actor"], state["rollout"]
        scoring = linear_output_dtypes(actor, lambda: actor.log_prob(rollout, settings=s.LogProbSettings(
            temperature=1.0, micro_batch=micro, micro_batch_tokens=None)))
        training = linear_output_dtypes(actor, lambda: fresh_update(actor))
        want = getattr(torch, args.dtype)
        expect(scoring == {want} and training == {want},
               f"linear outputs are {scoring} in log_prob and {training} in update, not {want}")
        return {"log_prob": sorted(map(str, scoring)), "update": sorted(map(str, training))}

    @report.check("lora")
    def _() -> dict[str, Any]:
        settings = actor_settings(args.dtype, micro, lora=s.LoraSettings(rank=8, alpha=16.0, dropout=0.0,
                                                                          target_modules="all-linear"), lr=1e-3)
        actor = PolicyWorker(str(folder), settings, seed=0, device=device)
        named = dict(actor.module.named_parameters())
        before = {name: p.detach().clone() for name, p in named.items()}
        fresh_update(actor)  # the first step makes AdamW's state; the second is the steady one
        with Peak(device) as steady:
            fresh_update(actor, seed=1)
        adapters = [n for n in named if "lora_" in n]
        moved = [n for n, p in named.items() if not torch.equal(p.detach(), before[n])]
        expect(adapters, "no LoRA adapter parameters")
        expect(set(moved) <= set(adapters), f"base weights moved: {sorted(set(moved) - set(adapters))[:3]}")
        expect(moved, "no adapter moved after two updates at lr 1e-3")
        full = state.get("update_steady_gib")
        if device.type == "cuda" and full:
            expect(steady.gib < full, f"the LoRA update peaks at {steady.gib:.2f} GiB, not under full "
                   f"fine-tuning's {full:.2f} GiB")
        return {"adapters": len(adapters), "adapters_moved": len(moved), "steady_peak_gib": steady.gib,
                "full_steady_peak_gib": full}

    @report.check("remove_padding")
    def _() -> dict[str, Any]:
        rollout = state["rollout"]
        scores = {}
        for packed in (False, True):
            try:
                actor = PolicyWorker(str(folder), actor_settings(args.dtype, micro, remove_padding=packed), seed=0,
                                     device=device)
            except ValueError as err:  # the model cannot run packed rows here: the runtime refuses it the same way
                return {"refused": str(err)[:160]}
            scores[packed] = actor.log_prob(rollout, settings=s.LogProbSettings(temperature=1.0, micro_batch=micro,
                                                                               micro_batch_tokens=None))
            del actor
        mask = rollout.loss_mask.bool()
        diff = (scores[True] - scores[False]).abs()[mask]
        bound = 1e-4 if args.dtype == "float32" else 0.05  # bf16: other kernels over other shapes, same math
        expect(diff.mean().item() < bound, f"packed log-probs differ from padded ones by {diff.mean().item():.4g} "
               f"on average (bound {bound})")
        return {"max_abs": diff.max().item(), "mean_abs": diff.mean().item()}

    @report.check("optimizer_offload")
    def _() -> dict[str, Any]:
        actor = PolicyWorker(str(folder), actor_settings(args.dtype, micro, optimizer_offload=True), seed=0,
                             device=device)
        before = {n: p.detach().clone() for n, p in actor.module.named_parameters()}
        fresh_update(actor)
        with Peak(device) as steady:
            fresh_update(actor, seed=1)
        moments = {t.device.type for st in actor.optim.optimizer.state.values() for t in st.values()
                   if isinstance(t, torch.Tensor) and t.dim() > 0}
        moved = sum(int(not torch.equal(p.detach(), before[n])) for n, p in actor.module.named_parameters())
        expect(moments == {"cpu"}, f"AdamW's moments are on {moments} between steps")
        expect(moved == len(before), f"only {moved} of {len(before)} parameters moved")
        return {"moments_on": sorted(moments), "steady_peak_gib": steady.gib,
                "full_steady_peak_gib": state.get("update_steady_gib")}

    @report.check("param_offload")
    def _() -> dict[str, Any]:
        if device.type != "cuda":
            return {"skipped": "FSDP2's CPU offload gathers to a GPU"}
        with one_rank_group("nccl"):
            actor = PolicyWorker(str(folder), actor_settings(args.dtype, micro, strategy="fsdp", param_offload=True),
                                 seed=0, device=device)
            actor.shard()
            shards = {p.to_local().device.type for p in actor.module.parameters() if hasattr(p, "to_local")}
            before = {n: p.to_local().detach().clone() for n, p in actor.module.named_parameters()}
            with Peak(device) as peak:
                fresh_update(actor)
            moved = sum(int(not torch.equal(p.to_local().detach(), before[n]))
                        for n, p in actor.module.named_parameters())
        expect(shards == {"cpu"}, f"the shards are on {shards}")
        expect(moved == len(before), f"only {moved} of {len(before)} parameters moved")
        return {"shards_on": sorted(shards), "update_peak_gib": peak.gib}

    @report.check("release_resume")
    def _() -> dict[str, Any]:
        worker = RolloutWorker(str(folder), s.RolloutSettings(
            engine="hf", n=1, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=response, tp=1,
            memory_fraction=0.5, max_sequences=None, dtype=args.dtype,
            val=s.ValSettings(n=1, temperature=0.0, top_p=1.0, top_k=0)), seed=0, device=str(device))
        first = worker.generate(items[:2], settings=generate_settings(1, response, keep=False), seed=3)
        held = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
        worker.release_memory()
        released = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
        worker.resume_memory()
        again = worker.generate(items[:2], settings=generate_settings(1, response, keep=False), seed=3)
        expect(torch.equal(first.responses, again.responses), "other tokens from the same seed after resume")
        if device.type == "cuda":
            expect(released < held, f"release_memory freed nothing ({held} bytes allocated before and after)")
        return {"held_gib": held / 2**30 if held is not None else None,
                "released_gib": released / 2**30 if released is not None else None, "same_tokens": True}

    @report.check("resume")
    def _() -> dict[str, Any]:
        settings = actor_settings(args.dtype, micro, lr=1e-4)
        going_on = PolicyWorker(str(folder), settings, seed=0, device=device)
        fresh_update(going_on)
        saved = Path(tmp.name) / "resume"
        going_on.save(saved)
        # through a file, as a checkpoint does: the state dict holds the live moments, which the next step changes
        torch.save(going_on.optimizer_state(), saved / "optimizer.pt")
        resumed = PolicyWorker(str(saved), settings, seed=0, device=device)
        resumed.load_optimizer_state(torch.load(saved / "optimizer.pt", weights_only=True))
        fresh_update(going_on, seed=1)
        fresh_update(resumed, seed=1)
        mine = dict(resumed.module.named_parameters())
        worst = max((p.detach() - mine[n].detach()).abs().max().item() for n, p in going_on.module.named_parameters())
        expect(worst <= 1e-6, f"the resumed actor's update differs by {worst:.3g} from the one that went on")
        return {"max_abs_diff": worst}

    @report.check("plan_vs_measured")
    def _() -> dict[str, Any]:
        device_gib = (torch.cuda.get_device_properties(device).total_memory / 2**30 if device.type == "cuda"
                      else 80.0)
        estimate = plan_estimate(folder, args.dtype, device_gib, n_prompts, n, prompt_len, response, micro)
        measured = {k: report.results.get(k, {}).get("peak_gib") for k in ("generate", "log_prob", "update")}
        steady = report.results.get("update", {}).get("steady_peak_gib")
        ratio = estimate["plan_gib"] / steady if steady and "plan_gib" in estimate else None
        return {**estimate, "measured_peak_gib": measured, "measured_steady_update_gib": steady,
                "plan_over_measured": ratio}

    tmp.cleanup()
    info["ray_imported"] = "ray" in sys.modules  # the GPU machine has no Ray: nothing here may need it
    summary = {"info": info, "checks": report.results, "failed": report.failed}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"gpu_check: {len(report.results) - len(report.failed)} passed, {len(report.failed)} failed"
          + (f" ({', '.join(report.failed)})" if report.failed else ""), flush=True)
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
