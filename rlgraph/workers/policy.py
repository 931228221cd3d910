"""The policy worker: the actor (trainable) or the reference policy (frozen), with a colocated HF engine."""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any, Callable

import torch

from rlgraph.contract.settings import (ActorDistillSettings, ActorSettings, ActorUpdateSettings, GenerateSettings,
                                       LogProbSettings, RefSettings, RolloutSettings, SftSettings,
                                       TopKSettings)
from rlgraph.workers import lora, offload
from rlgraph.workers.activations import checkpoint_blocks
from rlgraph.workers.batch import Rollout
from rlgraph.workers.cuda import free_cached_memory
from rlgraph.workers.engines.hf import HFEngine
from rlgraph.workers.loading import as_dtype, default_device, load_causal_lm  # noqa: F401 (re-exported)
from rlgraph.workers.logits import token_log_probs
from rlgraph.workers.micro import forward_pass, split_rows
from rlgraph.workers.optim import Optimization, shuffle_generator
from rlgraph.workers.packing import check_packed_attention, packed_response_logits
from rlgraph.workers.precision import Precision, computes, in_compute
from rlgraph.workers.rollout import generate_rollout


class PolicyWorker:
    """A causal LM that scores responses (`log_prob`, a teacher's `top_k`), generates (`generate`) and, if
    trainable, learns (`update` by a policy loss, `sft` on demonstrations, `distill` from a teacher's top-k)."""

    def __init__(self, model_path: str, settings: ActorSettings | RefSettings, *, seed: int,
                 device: str | torch.device | None = None) -> None:
        """An actor (ActorSettings: trainable, with its optimizer) or a reference policy (RefSettings: frozen).
        Loss settings come with each `update` call (ActorUpdateSettings), as the critic's do."""
        self.settings = settings
        self.trainable = isinstance(settings, ActorSettings)
        self.strategy = settings.strategy  # "fsdp": `shard()` once the data-parallel group is up
        self.sharded = False
        self.device = default_device(device)
        # trained in bf16: fp32 master weights here, bf16 compute in forward passes (workers/precision.py)
        self.precision = Precision.for_role(settings.dtype, trained=self.trainable, role="actor")
        from rlgraph.workers import fsdp

        # sharded: built on the meta device, rank 0 alone reads the weights and `shard()` hands out the shards
        load = fsdp.load_causal_lm_empty if fsdp.will_shard(self.strategy) else load_causal_lm
        lora_settings = settings.lora if self.trainable else None
        adapters_from = None
        if lora.is_adapter_folder(model_path):  # a LoRA actor's checkpoint: adapters on the base they name
            adapters_from, model_path = model_path, lora.base_model_path(model_path)
        self.base_path = model_path
        # a ref's param_offload unsharded: its weights live on the host, on the device for each log_prob call
        offloaded = not self.trainable and settings.param_offload and not fsdp.will_shard(self.strategy)
        self.offload_host = offload.HOST if offloaded else None
        self.module, self.tokenizer = load(model_path, self.precision.param_dtype, self.offload_host or self.device)
        self.peft = None  # the PeftModel around `module` when the actor trains LoRA adapters
        if lora_settings is not None:
            if fsdp.will_shard(self.strategy):
                raise ValueError("LoRA with strategy = fsdp is not implemented; use strategy = ddp")
            self.peft = lora.add_adapters(self.module, lora_settings, seed=seed, adapters_from=adapters_from)
        elif adapters_from is not None:  # adapters, but no LoRA now: train the merged model in full
            from peft import PeftModel

            self.module = PeftModel.from_pretrained(self.module, adapters_from).merge_and_unload()
        # Dropout off in every role: the ratio new/old must compare the same function.
        self.module.eval()
        if self.trainable and settings.gradient_checkpointing:
            checkpoint_blocks(self.module)  # HF's own checkpointing would not engage in eval mode
        if not fsdp.will_shard(self.strategy):  # sharded: once the shards are in place (`shard`)
            self._check_packing()
        self.shuffle_generator = torch.Generator().manual_seed(seed)
        self.sample_generator = torch.Generator().manual_seed(seed + 1)
        self.engine = HFEngine(self.module, self.tokenizer)  # shares the module: samples from the current weights
        self.hosts_rollout = False  # an in-place rollout gave the engine its settings (`host_rollout`)
        self.optim: Optimization | None = None
        if self.trainable:
            self.optim = Optimization.from_settings(self.module.parameters(), settings.optim,
                                                    offload_state=settings.optimizer_offload)
        else:
            self.module.requires_grad_(False)

    def shard(self) -> None:
        """strategy = fsdp: shard the model over the data-parallel group (see workers/fsdp.py)."""
        from rlgraph.workers import fsdp

        # param_offload: FSDP2's CPU offload policy (workers/offload.py), for the actor and a sharded ref alike
        fsdp.shard(self.module, mp_policy=self.precision.fsdp_policy(),
                   offload_to=self.device if self.settings.param_offload else None)
        self.sharded = True
        self.offload_host = None  # the policy moves the shards now
        self._check_packing()
        self.engine.synced = True  # every rank steps `generate` until all ranks are done
        if self.optim is not None:
            self.optim.set_params(self.module.parameters())

    # --- scoring ---

    def response_logits(self, rollout: Rollout) -> torch.Tensor:
        """Raw logits that predict each response token, in the model's dtype. (batch, R, vocab)"""
        return response_logits(self.module, rollout.to(self.device))

    def _pass(self, rollout: Rollout, rows: torch.Tensor, *,
              cut: bool) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor], torch.Tensor]]:
        """One forward pass over `rows`: (logits (micro, r, vocab) or packed (1, K, vocab), the tokens they
        predict, unpack: a result in that layout -> (micro, R) at the rollout's columns)."""
        if self.settings.remove_padding:  # workers/packing.py
            part = rollout.select(rows)
            return packed_response_logits(self.module, part.input_ids, part.attention_mask, part.responses,
                                          keeps_logits=_accepts_logits_to_keep(self.module))
        part, unpack = forward_pass(rollout, rows, cut=cut)
        return self.response_logits(part), part.responses, unpack  # r = R, or the pass's longest response

    def _check_packing(self) -> None:
        """remove_padding: refuse a model whose attention would mix packed rows (workers/packing.py)."""
        if not self.settings.remove_padding:
            return
        check_packed_attention(self.module, "logits", self.offload_host or self.device)

    @torch.no_grad()
    @offload.moves_weights
    @computes
    def log_prob(self, rollout: Rollout, *, settings: LogProbSettings,
                 with_entropy: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """log pi(response_t | prompt, response_<t) in float32, (batch, R); with entropy if asked.

        Positions off the loss mask (padding, inserted tokens) hold whatever the model says there (0 past a
        row's end under `micro_batch_tokens`); consumers apply `rollout.loss_mask`.
        """
        log_prob = torch.zeros(rollout.responses.shape)  # (batch, R)
        entropy = torch.zeros(rollout.responses.shape) if with_entropy else None
        rollout = rollout.to(self.device)
        for rows in split_rows(rollout, torch.arange(len(rollout)), settings.micro_batch, settings.micro_batch_tokens,
                               packed=self.settings.remove_padding):
            logits, tokens, unpack = self._pass(rollout, rows, cut=bool(settings.micro_batch_tokens))
            part_log_prob, part_entropy = token_log_probs(logits, tokens, settings.temperature,
                                                          with_entropy=with_entropy)  # (micro or 1, r) each
            log_prob[rows] = unpack(part_log_prob).cpu()  # (micro, R)
            if with_entropy:
                entropy[rows] = unpack(part_entropy).cpu()
        return (log_prob, entropy) if with_entropy else log_prob

    @torch.no_grad()
    @offload.moves_weights
    @computes
    def top_k(self, rollout: Rollout, *, settings: TopKSettings) -> torch.Tensor:
        """The model's `settings.k` most likely next tokens at every response position, at `settings.temperature`:
        their log-probs and ids packed as rlgraph.algos.distill.pack_top_k, (batch, R, k, 2) float32 (k unset:
        the whole vocabulary, in its order). Positions off the loss mask hold what the model says there, or 0."""
        from rlgraph.algos.distill import teacher_top_k

        rollout = rollout.to(self.device)
        out: torch.Tensor | None = None
        for rows in split_rows(rollout, torch.arange(len(rollout)), settings.micro_batch, settings.micro_batch_tokens,
                               packed=self.settings.remove_padding):
            logits, _, unpack = self._pass(rollout, rows, cut=bool(settings.micro_batch_tokens))
            part = unpack(teacher_top_k(logits, settings.k, settings.temperature)).cpu()  # (micro, R, k, 2)
            if out is None:
                out = torch.zeros(len(rollout), rollout.response_length, *part.shape[2:])
            out[rows] = part
        return out if out is not None else torch.zeros(0, rollout.response_length, settings.k or 1, 2)

    # --- training ---

    def update(
        self,
        rollout: Rollout,
        old_log_prob: torch.Tensor | None,
        advantages: torch.Tensor,
        ref_log_prob: torch.Tensor | None = None,
        *,
        settings: ActorUpdateSettings,
        shuffle_seed: int | None = None,
        shuffle: bool = True,
    ) -> dict[str, float]:
        """One PPO training step on this rollout (`settings.mini_batch_size` and `micro_batch` count samples).

        `old_log_prob` None: the log-probs kept at sampling time (`rollout.sample_log_probs`).
        `settings.tis` token | sequence: each token's policy loss is scaled by the truncated importance
        weight between `old_log_prob` and those kept log-probs (rlgraph/algos/rollout_is.py)."""
        from rlgraph.algos import AGG_MODES, KL_KINDS, agg_loss, get_policy_loss, kl_penalty, rollout_is_weights
        from rlgraph.workers.user_functions import load_user_function, loss_result

        if settings.loss_agg not in AGG_MODES:
            raise ValueError(f"unknown loss_agg {settings.loss_agg!r}; expected one of {', '.join(AGG_MODES)}")
        if settings.kl_kind not in KL_KINDS:
            raise ValueError(f"unknown kl_kind {settings.kl_kind!r}; expected one of {', '.join(KL_KINDS)}")
        if old_log_prob is None:
            if rollout.sample_log_probs is None:
                raise ValueError("update without old_log_prob needs a rollout generated with kept log-probs")
            old_log_prob = rollout.sample_log_probs
        if settings.tis != "off" and rollout.sample_log_probs is None:
            raise ValueError(f"tis = {settings.tis} needs the rollout's sampling log-probs: generate with kept "
                             "log-probs (`generate -> responses, rollout_log_prob`)")

        if self.optim is None:
            raise RuntimeError("a PolicyWorker built with RefSettings (a reference policy) cannot update")
        user_loss = settings.user_loss  # a `loss` the spec declares, in place of a built-in
        policy_loss_fn = (load_user_function(user_loss, "loss") if user_loss is not None
                          else get_policy_loss(settings.policy_loss))
        agg = settings.loss_agg
        use_kl_loss = settings.kl_coef > 0 and ref_log_prob is not None
        rollout = rollout.to(self.device)
        old_log_prob, advantages = old_log_prob.to(self.device), advantages.to(self.device)
        if use_kl_loss:
            ref_log_prob = ref_log_prob.to(self.device)
        extra = {"clip_c": settings.clip_c} if "clip_c" in inspect.signature(policy_loss_fn).parameters else {}
        extra.update(user_loss.args if user_loss is not None else {})
        tis_weights, tis_metrics = None, {}
        if settings.tis != "off":  # constants of the update: weighed once, applied to each micro-batch
            tis_weights, tis_metrics = rollout_is_weights(old_log_prob, rollout.sample_log_probs.to(self.device),
                                                          rollout.loss_mask, settings.tis, settings.tis_cap)

        cut = bool(settings.micro_batch_tokens)

        def micro_batch_loss(rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            logits, tokens, unpack = self._pass(rollout, rows, cut=cut)
            # the entropy is a gradient term only with a coefficient; else a metric (no backward work)
            log_prob, entropy = token_log_probs(logits, tokens, settings.temperature, with_entropy=True,
                                                entropy_grad=settings.entropy_coeff != 0)  # (micro or 1, r) each
            # at the rollout's columns and width R, so every loss aggregation divides as the whole batch's does
            log_prob, entropy = unpack(log_prob), unpack(entropy)  # (micro, R) each
            mask = rollout.loss_mask[rows]  # (micro, R): inserted tokens are attended to, not trained on
            returned = policy_loss_fn(
                old_log_prob[rows],
                log_prob,
                advantages[rows],
                mask,
                clip_low=settings.clip_low,
                clip_high=settings.clip_high,
                agg=agg,
                **extra,
                **({} if tis_weights is None else {"rollout_is_weights": tis_weights[rows]}),
            )
            pg_loss, metrics = loss_result(returned, user_loss) if user_loss is not None else returned
            metrics["actor/pg_loss"] = pg_loss.item()
            loss = pg_loss
            entropy = agg_loss(entropy, mask, agg)
            if settings.entropy_coeff != 0:
                loss = loss - settings.entropy_coeff * entropy
            metrics["actor/entropy"] = entropy.item()
            if use_kl_loss:
                kl_loss = agg_loss(kl_penalty(log_prob, ref_log_prob[rows], settings.kl_kind), mask, agg)
                loss = loss + settings.kl_coef * kl_loss
                metrics["actor/kl_loss"] = kl_loss.item()
            return loss, metrics

        return self._train(rollout, micro_batch_loss, settings, shuffle_seed, shuffle) | tis_metrics

    def sft(self, demos: Rollout, *, settings: SftSettings, shuffle_seed: int | None = None,
            shuffle: bool = True) -> dict[str, float]:
        """One supervised step on demonstrations (`demonstration_rollout`: each prompt with its response): the
        negative log-likelihood of the response tokens, `settings.loss_agg` over `demos.loss_mask`, so the prompt
        tokens are context and never a target. The same mini-batches, micro-batches, token budgets, clipping,
        optimizer and LoRA as `update`."""
        from rlgraph.algos import AGG_MODES, agg_loss

        if settings.loss_agg not in AGG_MODES:
            raise ValueError(f"unknown loss_agg {settings.loss_agg!r}; expected one of {', '.join(AGG_MODES)}")
        if self.optim is None:
            raise RuntimeError("a PolicyWorker built with RefSettings (a reference policy) cannot train")
        demos = demos.to(self.device)
        cut = bool(settings.micro_batch_tokens)

        def micro_batch_loss(rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            logits, tokens, unpack = self._pass(demos, rows, cut=cut)
            log_prob, _ = token_log_probs(logits, tokens)  # (micro or 1, r): the likelihood at temperature 1
            log_prob = unpack(log_prob)  # (micro, R)
            nll = agg_loss(-log_prob, demos.loss_mask[rows], settings.loss_agg)
            return nll, {"actor/sft_loss": nll.item()}

        return self._train(demos, micro_batch_loss, settings, shuffle_seed, shuffle)

    def distill(self, rollout: Rollout, teacher_top_k: torch.Tensor, *, settings: ActorDistillSettings,
                shuffle_seed: int | None = None, shuffle: bool = True) -> dict[str, float]:
        """One on-policy distillation step on the student's own samples: at every trained position, the divergence
        of its next-token distribution from the teacher's (`teacher_top_k`, (batch, R, k, 2) from a teacher's
        `top_k`; rlgraph.algos.distill_loss with `settings.beta`), `settings.loss_agg` over `rollout.loss_mask`.
        The same mini-batches, micro-batches, token budgets, clipping, optimizer and LoRA as `update`."""
        from rlgraph.algos import AGG_MODES
        from rlgraph.algos.distill import distill_loss

        if settings.loss_agg not in AGG_MODES:
            raise ValueError(f"unknown loss_agg {settings.loss_agg!r}; expected one of {', '.join(AGG_MODES)}")
        if self.optim is None:
            raise RuntimeError("a PolicyWorker built with RefSettings (a reference policy) cannot train")
        if teacher_top_k.shape[:2] != rollout.responses.shape:
            raise ValueError(f"the teacher's top-k are for {tuple(teacher_top_k.shape[:2])} response tokens, the "
                             f"batch has {tuple(rollout.responses.shape)}: score the same responses with the teacher")
        rollout, teacher_top_k = rollout.to(self.device), teacher_top_k.to(self.device)
        cut = bool(settings.micro_batch_tokens)

        def micro_batch_loss(rows: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
            logits, _, unpack = self._pass(rollout, rows, cut=cut)
            # at the rollout's columns, as the teacher's top-k are (micro, R, vocab)
            return distill_loss(unpack(logits), teacher_top_k[rows], rollout.loss_mask[rows], beta=settings.beta,
                                temperature=settings.temperature, agg=settings.loss_agg)

        return self._train(rollout, micro_batch_loss, settings, shuffle_seed, shuffle)

    def _train(self, rollout: Rollout, micro_batch_loss: Callable[[torch.Tensor], tuple[torch.Tensor, dict]],
               settings: ActorUpdateSettings | SftSettings | ActorDistillSettings, shuffle_seed: int | None,
               shuffle: bool) -> dict[str, float]:
        """`settings.epochs` passes of optimizer steps over shuffled mini-batches of `rollout`, each mini-batch's
        gradient accumulated over its micro-batches (`micro_batch` rows or `micro_batch_tokens` tokens) with the
        weights that make it the whole mini-batch's `loss_agg`; the metrics as verl names them."""
        from rlgraph.algos.core import agg_weight

        with lora.adapter_dropout(self.module) if self.peft is not None else contextlib.nullcontext():
            metrics = self.optim.run_epochs(
                len(rollout),
                in_compute(self, micro_batch_loss),  # backward and the optimizer step run outside
                epochs=settings.epochs,
                mini_batch_size=settings.mini_batch_size,
                micro_batch_size=settings.micro_batch,
                generator=shuffle_generator(shuffle_seed, self.shuffle_generator, shuffle),
                split=lambda mini: split_rows(rollout, mini, settings.micro_batch, settings.micro_batch_tokens,
                                              packed=self.settings.remove_padding),
                weight=lambda micro, mini: agg_weight(rollout.loss_mask[micro], rollout.loss_mask[mini],
                                                      settings.loss_agg),
            )
        metrics["actor/grad_norm"] = metrics.pop("grad_norm")
        metrics["actor/lr"] = metrics.pop("lr")
        metrics["actor/skipped_update_frac"] = metrics.pop("skipped_update_frac")
        return metrics

    # --- rollout (hybrid engine: samples from this worker's own weights) ---

    def host_rollout(self, settings: RolloutSettings) -> None:
        """Generate for an in-place rollout role: its engine settings (`max_sequences`) reach this worker's
        engine once, here, as a rollout with weights of its own gets them where its engine is built. Called
        when the rollout's alias is built (rlgraph/runtime/process.py); without it the engine has no limit."""
        limit = settings.max_sequences
        if self.hosts_rollout and limit != self.engine.max_sequences:  # one engine, one limit
            raise ValueError(f"two in-place rollouts on one policy set max_sequences = {self.engine.max_sequences} "
                             f"and {limit}: give them the same limit")
        self.engine.max_sequences, self.hosts_rollout = limit, True  # 'settings' are schema-checked: limit >= 1

    @computes
    def generate(self, items: list[dict], *, settings: GenerateSettings, seed: int | torch.Generator | None = None,
                 uid_offset: int = 0, policy_version: int = 0) -> Rollout:
        """`generate_rollout` on this worker's weights; without a seed, draws one from the worker's seed."""
        from rlgraph.workers import fsdp

        # sharded: every block gathered once for the whole call, not once per decoded token
        with fsdp.unsharded(self.module) if self.sharded else contextlib.nullcontext():
            rollout = generate_rollout(self.engine, items, settings,
                                       seed=self.sample_generator if seed is None else seed,
                                       uid_offset=uid_offset, policy_version=policy_version)
        if self.trainable:
            free_cached_memory(self.device)  # generation's KV-cache blocks go back before training needs the room
        return rollout

    # --- weights and checkpoints ---

    def state_dict(self) -> dict[str, torch.Tensor]:
        """A CPU copy of the weights, for weight sync through the object store (sharded: rank 0's, gathered)."""
        from rlgraph.workers import fsdp

        if self.sharded:
            return fsdp.full_state_dict(self.module)
        if self.peft is not None:  # a rollout takes whole weights: the adapters merged in, under the plain names
            return lora.merged_state_dict(self.module)
        return {name: t.detach().to("cpu", copy=True) for name, t in self.module.state_dict().items()}

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        if self.sharded or self.peft is not None:
            raise RuntimeError("a sharded or LoRA policy is trained in place; weights are not loaded into it")
        self.module.load_state_dict(state_dict)

    def save(self, directory: str | Path) -> None:
        """An HF folder that `PolicyWorker(directory, ...)` (or `from_pretrained`) loads back; with LoRA, the
        adapters in peft's format (`PeftModel.from_pretrained` on the base it names loads them).

        Sharded, every rank must call it: the weights are gathered and rank 0 writes."""
        from rlgraph.workers import fsdp

        if self.peft is not None:
            lora.save_adapters(self.peft, directory, self.base_path)
        elif not self.sharded:
            self.module.save_pretrained(directory)
        else:
            state = fsdp.full_state_dict(self.module)
            if fsdp.rank() != 0:
                return
            fsdp.save_pretrained_full(self.module, directory, state)
        self.tokenizer.save_pretrained(directory)

    def optimizer_state(self) -> dict[str, Any]:
        """Optimizer and LR-scheduler state; tensors and plain python only (torch.load(weights_only=True)).

        Sharded: the whole state, gathered on rank 0 ({} on the others); every rank must call it."""
        from rlgraph.workers import fsdp

        if self.optim is None:
            raise RuntimeError("a PolicyWorker built with RefSettings (a reference policy) has no optimizer")
        return fsdp.optimizer_state(self.module, self.optim) if self.sharded else self.optim.state_dict()

    def load_optimizer_state(self, state: dict[str, Any]) -> None:
        from rlgraph.workers import fsdp

        if self.optim is None:
            raise RuntimeError("a PolicyWorker built with RefSettings (a reference policy) has no optimizer")
        if self.sharded:
            fsdp.load_optimizer_state(self.module, self.optim, state)
            return
        saved = sum(len(group["params"]) for group in state["optimizer"]["param_groups"])
        if saved != len(self.optim.params):  # LoRA turned on or off since the checkpoint
            raise ValueError(f"the checkpoint's optimizer state is for {saved} parameter tensors, but this actor "
                             f"trains {len(self.optim.params)} ({'LoRA adapters' if self.peft else 'the whole model'}):"
                             " resume with the checkpoint's lora settings, or start over (--no-resume)")
        self.optim.load_state_dict(state)


class BasePolicy:
    """The reference policy of a LoRA actor: the actor's own module with its adapters off. The ref role
    hosted in the actor's process on the actor's model, with no second copy of the weights."""

    def __init__(self, actor: PolicyWorker) -> None:
        if actor.peft is None:
            raise ValueError("a base policy needs an actor with LoRA adapters")
        self.actor = actor

    def log_prob(self, rollout: Rollout, *, settings: LogProbSettings,
                 with_entropy: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        with lora.adapters_disabled(self.actor.peft):
            return self.actor.log_prob(rollout, settings=settings, with_entropy=with_entropy)

    def top_k(self, rollout: Rollout, *, settings: TopKSettings) -> torch.Tensor:
        with lora.adapters_disabled(self.actor.peft):
            return self.actor.top_k(rollout, settings=settings)


def response_logits(module: torch.nn.Module, rollout: Rollout) -> torch.Tensor:
    """Logits at positions P-1 .. P+R-2, the ones that predict the response tokens, in the model's dtype (the
    float32 work on them is done a chunk at a time: workers/logits.py). (batch, R, vocab)

    position_ids come from the attention mask, so left padding does not shift the rotary positions.
    """
    response_len = rollout.response_length
    kwargs = {}
    if _accepts_logits_to_keep(module):
        kwargs["logits_to_keep"] = response_len + 1  # only the last R+1 positions go through the LM head
    output = module(
        input_ids=rollout.input_ids,
        attention_mask=rollout.attention_mask,
        position_ids=rollout.position_ids,
        use_cache=False,
        **kwargs,
    )
    return output.logits[:, -response_len - 1 : -1]  # (batch, R, vocab)


_LOGITS_TO_KEEP: dict[type, bool] = {}


def _accepts_logits_to_keep(module: torch.nn.Module) -> bool:
    cls = type(module)
    if cls not in _LOGITS_TO_KEEP:
        _LOGITS_TO_KEEP[cls] = "logits_to_keep" in inspect.signature(module.forward).parameters
    return _LOGITS_TO_KEEP[cls]
