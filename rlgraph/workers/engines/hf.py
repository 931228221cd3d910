"""The Hugging Face engine: `module.generate` with the KV cache on, on CPU or one GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from rlgraph.contract.engines import ENGINES
from rlgraph.workers.engines.base import (Engine, Generation, SamplingParams, as_id_list,
                                          check_weight_names, pad_token_id, stop_token_ids)
from rlgraph.workers.rollout import left_pad, mask_after_eos


class HFEngine(Engine):
    """Samples with `module.generate`.

    It holds a reference to `module`, not a copy: built on the actor's module (the hybrid engine) it samples
    from the actor's current weights, so the weight sync is free. Memory: HF keeps no KV cache between calls,
    so `release_memory` has only the weights to free. On an engine that owns its module on an accelerator
    (`from_pretrained`) it moves them to the CPU and back; on the CPU, or on a module it shares with the
    trainer, it frees nothing (the trainer's weights are not the engine's to move). In every case `generate`
    refuses to run between `release_memory` and `resume_memory`, so a caller that forgets shows up on CPU too.
    """

    capabilities = ENGINES["hf"]

    def __init__(self, module: torch.nn.Module, tokenizer: Any, *, eos_token_id: int | list[int] | None = None,
                 owns_module: bool = False, max_sequences: int | None = None) -> None:
        """`max_sequences`: the rows (prompts x n) of a `generate` call go through `module.generate` in chunks of
        at most this many, one after the other, so the KV cache is one chunk's; None: all at once."""
        if max_sequences is not None and max_sequences < 1:
            raise ValueError(f"max_sequences must be >= 1, got {max_sequences}")
        self.max_sequences = max_sequences
        self.module = module
        self.tokenizer = tokenizer
        self.owns_module = owns_module
        self.synced = False  # set on a sharded (FSDP) module: every rank steps until all ranks are done
        self.released = False
        self.offloaded_from: torch.device | None = None  # where release_memory took the weights from
        if eos_token_id is None:  # from_pretrained read the folder's generation_config.json into the module
            shipped = getattr(getattr(module, "generation_config", None), "eos_token_id", None)
            self.eos_token_ids = stop_token_ids(tokenizer.eos_token_id, shipped)
        else:
            self.eos_token_ids = as_id_list(eos_token_id)
        self.pad_token_id = pad_token_id(tokenizer, self.eos_token_ids)

    @classmethod
    def from_pretrained(cls, model_path: str, *, dtype: str | torch.dtype = "float32", device: str | None = None,
                        memory_fraction: float | None = None, tp: int = 1,
                        max_sequences: int | None = None, deterministic: bool = False) -> HFEngine:
        """`memory_fraction` is ignored: HF allocates the KV cache per call, as it goes. `max_sequences`: the
        chunk of rows one `module.generate` runs (see `__init__`). `deterministic` too: torch's kernels are set up for the whole process (workers/cuda.py make_deterministic)."""
        from rlgraph.workers.loading import as_dtype, default_device, load_causal_lm

        if tp > cls.capabilities.max_tp:
            raise ValueError(f"the hf engine runs on one device; got tp = {tp}")

        module, tokenizer = load_causal_lm(model_path, as_dtype(dtype), default_device(device))
        module.eval().requires_grad_(False)
        return cls(module, tokenizer, owns_module=True, max_sequences=max_sequences)

    # --- generation ---

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, sampling: SamplingParams, seed: int | None = None,
                 with_log_probs: bool = False) -> Generation:
        """Log-probs come from the raw logits of generation divided by the temperature: what
        `PolicyWorker.log_prob` would recompute from the same weights (to float32 rounding: KV-cached steps
        vs one full pass), before any top-k / top-p truncation.

        The rows (prompts x n) go through `module.generate` in chunks of at most the engine's `max_sequences`.
        A chunk is left-padded to its own longest prompt. Sampled chunks draw on one seeded stream, so a seed
        gives the same tokens for the same limit (other tokens than with another limit); greedy tokens do not
        depend on it."""
        from transformers import GenerationConfig

        if self.released:
            raise RuntimeError("the engine's memory is released; call resume_memory() before generate()")
        greedy = sampling.greedy
        device = next(self.module.parameters()).device
        rows = [list(prompt) for prompt in prompt_ids for _ in range(n)]  # p0 p0 p0 p1 p1 p1 ...
        chunk = self.max_sequences or len(rows)

        settings = {} if greedy else {"temperature": sampling.temperature, "top_p": sampling.top_p,
                                      "top_k": sampling.top_k}
        stop_ids = self.eos_token_ids + [i for i in sampling.stop_token_ids if i not in self.eos_token_ids]
        config = GenerationConfig(
            do_sample=not greedy,
            max_new_tokens=sampling.max_new_tokens,
            pad_token_id=self.pad_token_id,
            eos_token_id=stop_ids,
            use_cache=True,
            **settings,
        )
        temperature = 1.0 if greedy else sampling.temperature
        token_ids: list[list[int]] = []
        log_probs: list[list[float]] = []
        # HF fills every setting left unset from the model's own generation_config (a shipped
        # repetition_penalty, say); a blank one there keeps the samples exactly on-policy.
        was_training, model_defaults = self.module.training, getattr(self.module, "generation_config", None)
        self.module.eval()
        if model_defaults is not None:
            self.module.generation_config = GenerationConfig()
        try:
            with _seeded(seed, device):
                # sharded (synced), every rank must call generate as often: one turn's batch is split evenly, so
                # it does (a multi-turn episode's later turns may leave ranks with unequal rows: see docs/runtime.md)
                for start in range(0, len(rows), chunk):
                    ids, kept = self._generate_chunk(rows[start : start + chunk], config, stop_ids, device,
                                                     temperature if with_log_probs else None)
                    token_ids += ids
                    log_probs += kept or []
        finally:
            self.module.train(was_training)
            if model_defaults is not None:
                self.module.generation_config = model_defaults
        return Generation(token_ids, log_probs if with_log_probs else None)

    def _generate_chunk(self, rows: list[list[int]], config: Any, stop_ids: list[int], device: torch.device,
                        temperature: float | None) -> tuple[list[list[int]], list[list[float]] | None]:
        """One `module.generate` call: the rows' tokens up to their first stop token, and with a `temperature`
        their log-probs."""
        from transformers import LogitsProcessorList

        prompts, prompt_mask = left_pad(rows, self.pad_token_id)
        prompts, prompt_mask = prompts.to(device), prompt_mask.to(device)  # (chunk, P)
        kept = _KeptLogProbs(temperature) if temperature is not None else None
        extra = {"synced_gpus": True} if self.synced else {}
        if kept is not None:
            extra["logits_processor"] = LogitsProcessorList([kept])
        output = self.module.generate(input_ids=prompts, attention_mask=prompt_mask, generation_config=config,
                                      **extra)
        # (chunk, <= R): HF stops when all rows did
        responses = output[:, prompts.shape[1] :][:, : config.max_new_tokens]
        lengths = mask_after_eos(responses, stop_ids).sum(dim=1).tolist()
        token_ids = [row[:length] for row, length in zip(responses.tolist(), lengths)]
        if kept is None:
            return token_ids, None
        picked = kept.finish(responses)  # (chunk, generated)
        return token_ids, [row[:length] for row, length in zip(picked.cpu().tolist(), lengths)]

    # --- weights and memory ---

    def load_weights(self, weights: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> None:
        state = dict(weights.items() if isinstance(weights, Mapping) else weights)
        check_weight_names(state, set(self.module.state_dict()))
        self.module.load_state_dict(state, strict=False)

    def release_memory(self) -> None:
        device = next(self.module.parameters()).device
        if self.owns_module and device.type != "cpu" and self.offloaded_from is None:
            self.module.to("cpu")
            self.offloaded_from = device
            if device.type == "cuda":
                torch.cuda.empty_cache()
        self.released = True

    def resume_memory(self) -> None:
        if self.offloaded_from is not None:
            self.module.to(self.offloaded_from)
            self.offloaded_from = None
        self.released = False


class _KeptLogProbs:
    """A logits processor that keeps log pi(token) of each sampled token, and never more than one step's
    full-vocabulary log-probs (HF's `output_logits` would keep every step's: batch x vocab x 4 bytes per token).

    At each step it turns that step's scores into log_softmax(scores / temperature) and, at the next step,
    once the sampled token is the last column of `input_ids`, gathers that token's entry and drops the rest;
    `finish` gathers the last step from the returned sequences. Where it runs (checked in transformers
    5.23, `_get_logits_processor`): after the processors of generation settings such as repetition_penalty
    (none: `generate` leaves them unset) and before the sampling warpers, which HF appends after the user's
    list (TemperatureLogitsWarper, TopK, TopP); `_sample` hands the list a float32 copy of the raw logits.
    So `scores` here are raw, and the log-probs are those of the untruncated distribution at the temperature,
    what `PolicyWorker.log_prob` recomputes. The scores are returned untouched.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.picked: list[torch.Tensor] = []  # one (batch,) per step whose token has been seen
        self.pending: torch.Tensor | None = None  # (batch, vocab): the last step's log-probs, token not yet seen

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.pending is not None:
            self._gather(input_ids[:, -1])
        steps = scores.float()
        if self.temperature != 1.0:
            steps = steps / self.temperature
        self.pending = torch.log_softmax(steps, dim=-1)  # (batch, vocab)
        return scores

    def _gather(self, tokens: torch.Tensor) -> None:
        self.picked.append(self.pending.gather(-1, tokens.to(self.pending.device).unsqueeze(-1)).squeeze(-1))
        self.pending = None

    def finish(self, responses: torch.Tensor) -> torch.Tensor:
        """(batch, generated) log-probs of `responses` (generate's new tokens, cut to max_new_tokens)."""
        generated = responses.shape[1]
        # a step HF ran and then undid (deferred stop checks) has no token in `responses`: it is left out
        if len(self.picked) < generated and self.pending is not None:
            self._gather(responses[:, len(self.picked)])
        self.pending = None
        return torch.stack(self.picked[:generated], dim=1)


@contextlib.contextmanager
def _seeded(seed: int | None, device: torch.device):
    """Sample from a private RNG stream when a seed is given, leaving the global one untouched."""
    if seed is None:
        yield
        return
    on_cpu = device.type == "cpu"
    with torch.random.fork_rng(devices=[] if on_cpu else [device], device_type="cuda" if on_cpu else device.type):
        torch.manual_seed(seed)
        yield
