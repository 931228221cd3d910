"""Which blocks and keys a spec may contain, and the type of every value.

The grammar accepts any `key = value`; this table gives keys their meaning. A
key's entry carries its type, its default and a one-line doc, which the
"unknown key" diagnostic lists and docs/spec.md describes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlgraph.contract.engines import DEFAULT_ENGINE, ENGINES
from rlgraph.lang import ast

SUPPORTED_VERSIONS = (1,)

_BYTES = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "PB": 10**15,
          "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_COUNTS = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
# Upper bounds far past any real run. They keep every value finite and every
# static check (which may walk devices, replicas or samples one by one) fast.
_MAX_BYTES, _MAX_COUNT = 2**50, 10**15
MAX_DEVICES_PER_NODE, MAX_NODES, MAX_REPLICAS, MAX_BATCH = 256, 4096, 2**20, 2**20


class TypeMismatch(Exception):
    """The value does not fit the key's type; the message says what would."""


# ---- value types -------------------------------------------------------------------


@dataclass(frozen=True)
class Int:
    min: int | None = None
    max: int | None = None
    describe: str = "an integer"

    def convert(self, node: ast.Value) -> int:
        if not isinstance(node, ast.Number) or node.unit or not isinstance(node.value, int):
            raise TypeMismatch(f"expected {self.describe}")
        if self.min is not None and node.value < self.min:
            raise TypeMismatch(f"expected {self.describe} >= {self.min}, got {node.value}")
        if self.max is not None and node.value > self.max:
            raise TypeMismatch(f"expected {self.describe} <= {self.max}, got {node.value}")
        return node.value


@dataclass(frozen=True)
class TopK:
    """`top_k`: a count of tokens, 0 for all of them; -1 (as verl and vLLM write "all") is read as 0."""

    describe: str = "an integer >= 0 (0 or -1 = all tokens)"

    def convert(self, node: ast.Value) -> int:
        value = Int(describe=self.describe).convert(node)
        if value < -1:
            raise TypeMismatch(f"expected {self.describe}, got {value}")
        return max(value, 0)


@dataclass(frozen=True)
class Float:
    min: float | None = None
    max: float | None = None
    describe: str = "a number"
    min_exclusive: bool = False  # the range is (min, max]: top_p = 0 keeps no token at all

    def convert(self, node: ast.Value) -> float:
        if not isinstance(node, ast.Number) or node.unit:
            raise TypeMismatch(f"expected {self.describe}")
        value = float(node.value)
        if not math.isfinite(value):
            raise TypeMismatch(f"expected {self.describe}, got {node.text}, which is too large")
        if self.min is not None and self.min_exclusive and value <= self.min:
            raise TypeMismatch(f"expected {self.describe} > {self.min}, got {node.text}")
        if self.min is not None and value < self.min:
            raise TypeMismatch(f"expected {self.describe} >= {self.min}, got {node.text}")
        if self.max is not None and value > self.max:
            raise TypeMismatch(f"expected {self.describe} <= {self.max}, got {node.text}")
        return value


@dataclass(frozen=True)
class Bytes:
    describe: str = "a size in bytes such as 80GiB or 512MB"

    def convert(self, node: ast.Value) -> int:
        if not isinstance(node, ast.Number) or (node.unit and node.unit not in _BYTES):
            raise TypeMismatch(f"expected {self.describe}")
        if not node.unit:
            raise TypeMismatch(f"expected {self.describe} (with a unit: KiB, MiB, GiB, TiB, KB, MB, GB, TB)")
        value = node.value * _BYTES[node.unit]
        if not 0 < value <= _MAX_BYTES:
            raise TypeMismatch(f"expected {self.describe}, more than 0 and at most 1PiB")
        return int(value)


@dataclass(frozen=True)
class Count:
    describe: str = "a count such as 7B, 350M or 124000"

    def convert(self, node: ast.Value) -> int:
        if not isinstance(node, ast.Number) or (node.unit and node.unit not in _COUNTS):
            raise TypeMismatch(f"expected {self.describe}")
        value = node.value * _COUNTS.get(node.unit, 1)
        if not 1 <= value <= _MAX_COUNT:
            raise TypeMismatch(f"expected {self.describe}, from 1 to 1000T")
        return int(value)


@dataclass(frozen=True)
class Str:
    describe: str = "a string in double quotes"

    def convert(self, node: ast.Value) -> str:
        if not isinstance(node, ast.String):
            raise TypeMismatch(f"expected {self.describe}")
        return node.value


@dataclass(frozen=True)
class Bool:
    def convert(self, node: ast.Value) -> bool:
        if not isinstance(node, ast.Bool):
            raise TypeMismatch("expected `true` or `false`")
        return node.value


@dataclass(frozen=True)
class Choice:
    options: tuple[str, ...]

    def convert(self, node: ast.Value) -> str:
        value = node.value if isinstance(node, (ast.Ident, ast.String)) else None
        if value not in self.options:
            raise TypeMismatch("expected one of " + ", ".join(f"`{o}`" for o in self.options))
        return value


@dataclass(frozen=True)
class Ref:
    """A bare name that must be declared as a `target` (checked by the resolve pass)."""

    target: str  # "model" | "pool" | "role" | "env"

    def convert(self, node: ast.Value) -> str:
        if not isinstance(node, ast.Ident):
            raise TypeMismatch(f"expected the name of a declared {self.target} (a bare word, no quotes)")
        return node.value


@dataclass(frozen=True)
class ListOf:
    item: Any
    length: int | None = None

    def convert(self, node: ast.Value) -> list:
        if not isinstance(node, ast.List):
            raise TypeMismatch("expected a list such as [0.9, 0.999]")
        if self.length is not None and len(node.items) != self.length:
            raise TypeMismatch(f"expected a list of {self.length} items, got {len(node.items)}")
        return [self.item.convert(item) for item in node.items]


@dataclass(frozen=True)
class Names:
    """A string, or a list of strings (peft's `target_modules`: "all-linear" or ["q_proj", "v_proj"])."""

    describe: str = "a string or a list of strings"

    def convert(self, node: ast.Value) -> str | list[str]:
        if isinstance(node, ast.String):
            return node.value
        if isinstance(node, ast.List) and node.items and all(isinstance(i, ast.String) for i in node.items):
            return [item.value for item in node.items]
        raise TypeMismatch(f"expected {self.describe} such as \"all-linear\" or [\"q_proj\", \"v_proj\"]")


@dataclass(frozen=True)
class Files:
    """A path, or a list of paths used one after the other (verl's data.train_files)."""

    describe: str = 'a path in double quotes, or a list of them such as ["a.parquet", "b.parquet"]'

    def convert(self, node: ast.Value) -> list[str]:
        if isinstance(node, ast.String) and node.value:
            return [node.value]
        if (isinstance(node, ast.List) and node.items
                and all(isinstance(i, ast.String) and i.value for i in node.items)):
            return [item.value for item in node.items]
        raise TypeMismatch(f"expected {self.describe}")


@dataclass(frozen=True)
class FieldNames:
    """A list of bare names, each once: the fields a user transform takes or produces (`[scores, values]`)."""

    describe: str = "a list of bare names such as [scores, values]"

    def convert(self, node: ast.Value) -> list[str]:
        if not isinstance(node, ast.List) or not node.items or not all(isinstance(i, ast.Ident) for i in node.items):
            raise TypeMismatch(f"expected {self.describe} (at least one, no quotes)")
        names = [item.value for item in node.items]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise TypeMismatch(f"expected each name once; {', '.join(f'`{n}`' for n in twice)} is there twice")
        return names


def plain_value(node: ast.Value):
    """A value as Python, whatever its type: `0.5`, `"text"`, `true`, a bare name as a string, lists of those.
    Raises TypeMismatch on a number with a unit (a user function gets plain numbers)."""
    if isinstance(node, ast.List):
        return [plain_value(item) for item in node.items]
    if isinstance(node, ast.Number) and node.unit:
        raise TypeMismatch(f"expected a plain number, not {node.text}")
    return node.value


@dataclass(frozen=True)
class Like:
    """A value of the same type as `default`: a call overriding a user function's declared argument."""

    default: Any

    def convert(self, node: ast.Value):
        value = plain_value(node)
        if _plain_type(value) != _plain_type(self.default):
            raise TypeMismatch(f"expected {_plain_type(self.default)}, as declared (default {self.default!r})")
        return value


def _plain_type(value: Any) -> str:
    return ("`true` or `false`" if isinstance(value, bool) else "a number" if isinstance(value, (int, float))
            else "a list" if isinstance(value, list) else "a string or a bare name")


# ---- keys and blocks -----------------------------------------------------------------


@dataclass(frozen=True)
class Key:
    type: Any
    doc: str
    default: Any = None
    required: bool = False


@dataclass(frozen=True)
class BlockSchema:
    doc: str
    keys: dict[str, Key]
    named: bool = True
    blocks: dict[str, "BlockSchema"] = field(default_factory=dict)  # nested blocks, e.g. optim
    open: bool = False  # any key, any value (`plain_value`): the arguments of a user function


DTYPES = ("fp32", "bf16", "fp16")
ROLE_KINDS = ("actor", "rollout", "ref", "critic", "reward_model", "judge")
TRAINED_KINDS = ("actor", "critic")

OPTIM = BlockSchema("the optimizer (AdamW) of a trained role", named=False, keys={
    "lr": Key(Float(min=0.0), "learning rate", 1e-6),
    "betas": Key(ListOf(Float(0.0, 1.0), 2), "Adam betas", [0.9, 0.999]),
    "weight_decay": Key(Float(min=0.0), "decoupled weight decay", 0.0),
    "warmup_steps": Key(Int(min=0), "linear warm-up steps, then the `schedule`", 0),
    "warmup_ratio": Key(Float(0.0, 1.0), "warm-up steps as a share of the run's steps, instead of warmup_steps: "
                        "int(ratio x steps), the steps of train.epochs counted when the data is loaded (verl: "
                        "optim.lr_warmup_steps_ratio)"),
    "grad_clip": Key(Float(min=0.0), "clip the global gradient norm to this (0 = off)", 1.0),
    "schedule": Key(Choice(("constant", "cosine")), "the learning rate after the warm-up: `constant`, or `cosine` "
                    "from lr down to min_lr_ratio x lr by the end of the run's steps (verl: "
                    "optim.lr_scheduler_type)",
                    "constant"),
    "min_lr_ratio": Key(Float(0.0, 1.0), "cosine: the last step's learning rate as a share of lr (verl: "
                        "optim.min_lr_ratio)", 0.0),
})

LORA = BlockSchema("LoRA adapters on the actor (peft): only the adapters train, the base weights stay frozen; "
                   "a reference policy on the actor's model and devices is the base with the adapters off (no "
                   "second copy)", named=False, keys={
    "rank": Key(Int(min=0, max=4096), "rank of each adapter; 0 = off, full fine-tuning "
                "(verl: actor_rollout_ref.model.lora_rank)", 0),
    "alpha": Key(Float(min=0.0), "scaling: the adapter's output is multiplied by alpha / rank "
                 "(verl: actor_rollout_ref.model.lora_alpha)", 16.0),
    "dropout": Key(Float(0.0, 1.0), "dropout on the adapters' input during updates (scoring and generation "
                   "run without it)", 0.0),
    "target_modules": Key(Names(), "the linear layers that get adapters: \"all-linear\" (every linear layer but "
                          "the output head) or names such as [\"q_proj\", \"v_proj\"] "
                          "(verl: actor_rollout_ref.model.target_modules)", "all-linear"),
})

ROLLOUT_VAL = BlockSchema("how validation samples (verl: actor_rollout_ref.rollout.val_kwargs); val/score/mean "
                          "scores one answer per prompt, greedy unless `temperature` is set above 0; with n > 1 "
                          "(or train.val_samples) also val/score/mean@n and best@n of n sampled answers",
                          named=False, keys={
    "n": Key(Int(min=1, max=4096), "answers per validation prompt; n > 1 adds mean@n and best@n (the same as "
             "train.val_samples, which is then not given; verl: val_kwargs.n)"),
    "temperature": Key(Float(min=0.0), "sampling temperature of validation; unset: 0 (greedy) for val/score/mean "
                       "and the rollout's temperature for the n > 1 samples (verl: val_kwargs.temperature, "
                       "default 0)"),
    "top_p": Key(Float(0.0, 1.0, min_exclusive=True), "nucleus mass of validation sampling; unset: the rollout's "
                 "(verl: val_kwargs.top_p)"),
    "top_k": Key(TopK(), "top-k of validation sampling, 0 or -1 = all tokens; unset: the rollout's (verl: "
                 "val_kwargs.top_k)"),
})

_PLACEMENT = {
    "pool": Key(Ref("pool"), "the pool whose devices this role occupies"),
    "replicas": Key(Int(min=1, max=MAX_REPLICAS), "data-parallel replicas, one device each (times tp)", 1),
    "colocate": Key(Ref("role"), "share the devices (and processes) of this role instead of a pool"),
}
_MODEL = {"model": Key(Ref("model"), "the model this role holds")}
_FROZEN_DTYPE = Key(Choice(DTYPES), "dtype of the weights and of the computation", "fp32")
_TRAINED = {
    "strategy": Key(Choice(("ddp", "fsdp")), "data-parallel strategy: ddp replicates, fsdp shards", "ddp"),
    "dtype": Key(Choice(DTYPES), "compute dtype; bf16 trains in mixed precision (fp32 master weights, gradients "
                 "and AdamW state); fp16 cannot train (no loss scaling)", "fp32"),
    "micro_batch": Key(Int(min=1, max=MAX_BATCH), "samples per device per forward pass (gradient accumulation)"),
    "micro_batch_tokens": Key(Int(min=1), "token budget per device per forward pass, instead of micro_batch: rows "
                              "sorted by length fill each micro-batch up to rows x its longest row (prompt + "
                              "response) <= this, and each pass is cut to its longest row, so padding is not "
                              "computed (verl's use_dynamic_bsz with ppo_max_token_len_per_gpu, "
                              "log_prob_max_token_len_per_gpu, forward_max_token_len_per_gpu)"),
    "gradient_checkpointing": Key(Bool(), "recompute each transformer block's activations in backward instead of "
                                  "keeping them: less memory, about a third more compute", False),
    "param_offload": Key(Bool(), "keep the parameters, gradients and AdamW state in host memory; the optimizer "
                         "step runs on the CPU and each block's shards are copied in when it runs (FSDP2's "
                         "CPUOffloadPolicy; needs strategy = fsdp over 2 or more replicas; verl: "
                         "actor_rollout_ref.actor.fsdp_config.offload_policy; verl's fsdp_config.param_offload "
                         "instead moves the shards in and out around each call)", False),
    "optimizer_offload": Key(Bool(), "keep AdamW's moments in host memory between optimizer steps; moved to the "
                             "device for each step (verl: actor_rollout_ref.actor.fsdp_config.optimizer_offload, "
                             "critic.model.fsdp_config.optimizer_offload)", False),
    "remove_padding": Key(Bool(), "run each forward pass on its rows' tokens without their padding, laid end to end "
                          "(position ids restart per row, so attention stays within it): the same results, less "
                          "work when rows differ in length; refused for a model whose attention would mix the rows "
                          "(docs/runtime.md; verl: *.model.use_remove_padding)", False),
}

# Ulysses sequence parallelism: a placement fact (how a role's devices group), so RolePlan's, not a setting's
_SEQUENCE_PARALLEL = {
    "sequence_parallel": Key(Int(min=1, max=MAX_REPLICAS), "devices that share each sequence (Ulysses sequence "
                             "parallelism; verl: *.ulysses_sequence_parallel_size): each group of this many "
                             "replicas takes the same samples, every device a 1/k slice of each sequence's tokens, "
                             "so the data-parallel size is replicas / k and micro_batch counts samples per group; "
                             "planned and checked, not run by rlgraph's runtime (`rlgraph run` refuses k > 1)", 1),
}

# Keys each role kind accepts. The block keyword is always `role`; `kind` picks
# the row (and defaults to the role's name when that is a kind: `role actor {}`).
ROLE_KEYS: dict[str, dict[str, Key]] = {
    "actor": {**_MODEL, **_PLACEMENT, **_TRAINED, **_SEQUENCE_PARALLEL,
              "entropy_coeff": Key(Float(min=0.0), "entropy bonus coefficient in the actor loss", 0.0)},
    "critic": {**_MODEL, **_PLACEMENT, **_TRAINED, **_SEQUENCE_PARALLEL,
               "head": Key(Choice(("value",)), "the head put on the backbone", "value")},
    "ref": {**_MODEL, **_PLACEMENT, **_SEQUENCE_PARALLEL,
            "dtype": _FROZEN_DTYPE, "micro_batch": _TRAINED["micro_batch"],
            "micro_batch_tokens": _TRAINED["micro_batch_tokens"], "remove_padding": _TRAINED["remove_padding"],
            "param_offload": Key(Bool(), "keep the weights in host memory and move them to the device for "
                                 "each log_prob call (sharded with an fsdp actor: FSDP2's "
                                 "CPUOffloadPolicy; verl: actor_rollout_ref.ref.fsdp_config.param_offload)",
                                 False)},
    "reward_model": {**_MODEL, **_PLACEMENT,
                     "dtype": _FROZEN_DTYPE, "micro_batch": _TRAINED["micro_batch"],
                     "micro_batch_tokens": _TRAINED["micro_batch_tokens"], "remove_padding": _TRAINED["remove_padding"],
                     "retokenize": Key(Bool(), "decode the responses and tokenize the text with the reward "
                                       "model's own tokenizer (a reward model of another model family)", False)},
    "judge": {**_MODEL, **_PLACEMENT,
              "engine": Key(Choice(tuple(ENGINES)), "generation engine of the verdicts (as a rollout's)",
                            DEFAULT_ENGINE),
              "template": Key(Str(), "the judge's prompt, a jinja2 template over `prompt`, `response`, "
                              "`ground_truth`, `data_source` and `extra_info` (\\n for a new line), or a "
                              "`.jinja`/`.j2` file read from the spec's folder; rendered through the judge "
                              "model's chat template when it has one", required=True),
              "parser": Key(Str(), "how a verdict becomes a score: `yes_no` (1 for yes, 0 for no), `tag:NAME` "
                            "(the number in <NAME>...</NAME>), or a function `module:function` / "
                            "`file.py:function` called as fn(verdict, prompt, response, ground_truth) -> a "
                            "number or None", "yes_no"),
              "max_new_tokens": Key(Int(min=1), "the most tokens a verdict may have", 16),
              "temperature": Key(Float(min=0.0), "sampling temperature of the verdicts (0 = greedy)", 0.0),
              "max_sequences": Key(Int(min=1), "at most this many verdicts generated at once (as a rollout's)"),
              "memory_fraction": Key(Float(0.0, 1.0), "share of device memory the engine may take (GPU)", 0.5),
              "max_invalid_fraction": Key(Float(0.0, 1.0), "share of a batch's verdicts that may hold no score "
                                          "(the parser finds none): those rows are left out of the update; more "
                                          "is an error naming the row", 0.0),
              "dtype": _FROZEN_DTYPE},
    "rollout": {**_MODEL, **_PLACEMENT,
                "engine": Key(Choice(tuple(ENGINES)), "generation engine: " + ", ".join(
                    f"{e.name} ({'/'.join(d.upper() for d in e.devices)})" for e in ENGINES.values())
                    + " (verl: actor_rollout_ref.rollout.name)", DEFAULT_ENGINE),
                "n": Key(Int(min=1, max=4096), "samples per prompt", 1),
                "temperature": Key(Float(min=0.0), "sampling temperature (0 = greedy)", 1.0),
                "top_p": Key(Float(0.0, 1.0, min_exclusive=True), "nucleus sampling mass, in (0, 1]", 1.0),
                "top_k": Key(TopK(), "sample among the k likeliest tokens (0 or -1 = all; verl writes -1)", 0),
                "max_new_tokens": Key(Int(min=1), "the most tokens a response may have", 32),
                "tp": Key(Int(min=1, max=MAX_DEVICES_PER_NODE), "tensor-parallel devices per rollout replica", 1),
                "memory_fraction": Key(Float(0.0, 1.0), "share of device memory the engine may take (GPU)", 0.5),
                "max_sequences": Key(Int(min=1), "at most this many sequences generated at once: vLLM's max_num_seqs, "
                                     "SGLang's max_running_requests; the hf engine generates the batch in chunks of "
                                     "this many (unset: the engine's own default; verl: rollout.max_num_seqs)"),
                "dtype": _FROZEN_DTYPE},
}
_ALL_ROLE_KEYS = {"kind": Key(Choice(ROLE_KINDS), "the role's kind; defaults to its name")}
for _keys in ROLE_KEYS.values():
    _ALL_ROLE_KEYS.update(_keys)

LOGGERS = ("console", "tensorboard", "wandb", "mlflow")  # rlgraph/runtime/loggers.py writes to each

BLOCKS: dict[str, BlockSchema] = {
    "model": BlockSchema("a model: weights on disk or built in", keys={
        "path": Key(Str(), "a local folder, `builtin:arith-gpt`, or the trained actor of an earlier stage's run: "
                    "`run:sft_arith.rl` (that spec's run, runs/sft_arith) or `run:DIR` (a run directory)",
                    required=True),
        "params": Key(Count(), "parameter count, for the memory estimate when config.json is absent"),
        "layers": Key(Int(min=1), "transformer layers (for the KV-cache estimate)"),
        "hidden": Key(Int(min=1), "hidden size"),
        "heads": Key(Int(min=1), "attention heads"),
        "kv_heads": Key(Int(min=1), "key/value heads (GQA); defaults to heads"),
        "vocab": Key(Int(min=1), "vocabulary size"),
        "intermediate": Key(Int(min=1), "the MLP's inner size (config.json's intermediate_size), for the "
                            "activation estimate; else derived from params, which is off for tied embeddings"),
        "head_dim": Key(Int(min=1), "each attention head's size (config.json's head_dim), for the KV cache and "
                        "the LoRA adapters; defaults to hidden / heads, which Qwen3 and Gemma do not follow"),
        "experts": Key(Int(min=1), "a mixture of experts' routed experts (config.json's num_experts, "
                       "num_local_experts, n_routed_experts): all of them in params, for the memory estimate"),
        "experts_per_token": Key(Int(min=1), "experts each token is routed to (num_experts_per_tok): the "
                                 "activations follow these only"),
        "expert_intermediate": Key(Int(min=1), "one expert's MLP inner size (moe_intermediate_size)"),
        "shared_expert_intermediate": Key(Int(min=1), "the MLP inner size of the shared experts every token runs "
                                          "(shared_expert_intermediate_size; DeepSeek: n_shared_experts x "
                                          "moe_intermediate_size)"),
    }),
    "pool": BlockSchema("a set of identical nodes and their devices", keys={
        "nodes": Key(Int(min=1, max=MAX_NODES), "number of nodes", required=True),
        "devices_per_node": Key(Int(min=1, max=MAX_DEVICES_PER_NODE), "devices on each node", required=True),
        "device": Key(Choice(("cpu", "gpu")), "device kind", "cpu"),
        "memory": Key(Bytes(), "memory of one device, e.g. 80GiB"),
    }),
    "role": BlockSchema("a role in training: actor, rollout, ref, critic, reward_model or judge", keys=_ALL_ROLE_KEYS,
                        blocks={"optim": OPTIM, "lora": LORA, "val": ROLLOUT_VAL}),
    "reward": BlockSchema("a reward: a Python function `module:function` or `path/to/file.py:function` (`fn`), or a "
                          "service that scores rows over HTTP (`url`)", keys={
        "fn": Key(Str(), "`module:function` or `file.py:function` (a relative path and a module are looked for in the "
                  "spec's folder too) with signature (data_source, solution_str, ground_truth, extra_info), "
                  "returning a float or a dict with a float `score`; one of `fn` and `url`"),
        "url": Key(Str(), "an http:// or https:// address that takes a POST of a JSON object of lists (data_sources, "
                   "solution_strs, ground_truths, extra_infos, prompts) and answers {\"scores\": [...]}, one number "
                   "(or dict with a `score`) per row; one of `fn` and `url`"),
        "max_invalid_fraction": Key(Float(0.0, 1.0), "share of a batch's rows that may get no usable score (NaN, "
                                    "inf, not a number; of a service: a request that finally failed, or garbage): "
                                    "those rows are left out of the update; more is an error", 0.0),
        "timeout_s": Key(Float(min=0.001), "the most seconds one call of the function (one row) may take; of a "
                         "service: the most seconds a request waits to connect, and then for each part of the answer",
                         60.0),
        "batched": Key(Bool(), "the function takes the batch as lists (data_sources, solution_strs, ground_truths, "
                       "extra_infos) and returns a list of scores, in one call per batch (timeout_s is for that call)",
                       False),
        "workers": Key(Int(min=1, max=256), "processes that score a batch's rows at the same time, each row with "
                       "its own timeout_s (a batched function uses one; verl: reward_model.num_workers)", 4),
        "rows_per_request": Key(Int(min=1, max=MAX_BATCH), "a service's rows per request", 64),
        "concurrency": Key(Int(min=1, max=256), "a service's requests in flight at the same time", 8),
        "retries": Key(Int(min=0, max=100), "times a service's request is sent again after a connection error, a "
                       "timeout or a 5xx answer (never after a 4xx)", 3),
        "backoff_s": Key(Float(min=0.0, max=60.0), "seconds before a service request's first retry, doubled at "
                         "each next one (at most 30 s, drawn between half and all of it)", 0.5),
    }),
    "transform": BlockSchema("a user transform, called in the step like a built-in one (`scores -> NAME -> "
                             "advantages`) and run where the built-ins run; its keyword arguments and their defaults "
                             "go in `args { key = value ... }`, which a call may override: `NAME(key = value)` "
                             "(docs/algorithms.md)", keys={
        "fn": Key(Str(), "`module:function` or `file.py:function` (looked for as a reward's `fn` is), called as "
                  "fn(<inputs> by name, <args>, and response_mask, index, rollout if it names them), returning a "
                  "tensor (batch, response_len), or a tuple or dict of one per output", required=True),
        "inputs": Key(FieldNames(), "the per-token fields it takes, in the order a call names them; each is a "
                      "keyword argument of fn", required=True),
        "outputs": Key(FieldNames(), "the per-token fields it returns, in the order a call names them "
                       "(`advantages` first makes it an advantage estimator)", required=True),
    }, blocks={"args": BlockSchema("keyword arguments of fn and their defaults; a call may override them: "
                                   "`NAME(key = value)`", keys={}, named=False, open=True)}),
    "loss": BlockSchema("a user policy loss, used as `actor.update(policy_loss = NAME)`; its keyword arguments go "
                        "in `args { key = value ... }` (docs/algorithms.md)", keys={
        "fn": Key(Str(), "`module:function` or `file.py:function`, called in the actor's process as the built-in "
                  "losses are: fn(old_log_prob, log_prob, advantages, response_mask, clip_low=, clip_high=, agg=, "
                  "<args>) -> (loss, metrics)", required=True),
    }, blocks={"args": BlockSchema("keyword arguments of fn", keys={}, named=False, open=True)}),
    "env": BlockSchema("an environment the rollout talks with over several turns: a Python class `module:Class` or "
                       "`file.py:Class`, built once per episode (one sample) with the keyword arguments of `args { key = value "
                       "... }`, and used by "
                       "`prompts -> ROLLOUT.generate(env = NAME) -> responses`; the model's turns and the "
                       "environment's replies then share the rollout's max_new_tokens (docs/runtime.md)", keys={
        "class": Key(Str(), "`module:Class` or `file.py:Class` (looked for as a reward's `fn` is): an "
                     "rlgraph.workers.envs.Environment; `check` and `plan` never import it, `run` does before it "
                     "starts", required=True),
        "max_turns": Key(Int(min=1, max=1024), "the model's turns per episode (verl: "
                         "multi_turn.max_assistant_turns)", 4),
        "max_observation_tokens": Key(Int(min=1), "an environment reply longer than this many tokens is cut "
                                      "(verl: multi_turn.max_tool_response_length)", 256),
        "timeout_s": Key(Float(min=0.0, min_exclusive=True), "the most seconds one call of the environment (reset "
                         "or step) may take; a call past it fails the sample", 30.0),
        "workers": Key(Int(min=1, max=256), "processes that run the episodes of a batch at the same time, on the "
                       "host of the rollout's process", 4),
        "max_failed_fraction": Key(Float(0.0, 1.0), "share of a step's samples whose episode may fail (the "
                                   "environment raised, hung or died: zero reward, tokens out of the loss) before "
                                   "the run stops with the environment's traceback", 0.1),
        "tool_format": Key(Choice(("auto", "tag", "chat_template")), "how tool calls are read and replies written: "
                           "the tokenizer's chat template, `<tool_call>...</tool_call>` tags, or auto (the chat "
                           "template where the tokenizer has one)", "auto"),
    }, blocks={"args": BlockSchema("keyword arguments of the class's constructor", keys={}, named=False,
                                   open=True)}),
    "data": BlockSchema("the prompts", named=False, keys={
        "train": Key(Files(), "training prompts: a parquet/jsonl path or `builtin:arith/train`, or a list of "
                     "them, read one after the other (verl: data.train_files)", required=True),
        "val": Key(Files(), "validation prompts: a path or a list of paths (verl: data.val_files)"),
        "batch_size": Key(Int(min=1, max=MAX_BATCH), "prompts per step (samples per step = this x rollout n)",
                          required=True),
        "max_prompt_length": Key(Int(min=1), "longer prompts are filtered out (tokens)", 64),
        "max_response_length": Key(Int(min=1), "SFT (`demos -> actor.sft`): demonstrations whose response (with its "
                                   "end-of-sequence token) is longer are filtered out (tokens)", 32),
        "shuffle": Key(Bool(), "shuffle the training prompts each epoch", True),
        "val_batch_size": Key(Int(min=1, max=MAX_BATCH), "prompts per validation batch", 256),
    }),
    "train": BlockSchema("the training loop", named=False, keys={
        "steps": Key(Int(min=1), "training steps (wins over `epochs` when both are given, as verl's "
                     "total_training_steps does)", 100),
        "epochs": Key(Int(min=1, max=10**6), "train this many passes over data.train instead of `steps`: the steps are "
                      "counted when the data is loaded, (prompts // batch_size) per epoch, the last short batch "
                      "dropped as verl does (verl: trainer.total_epochs)"),
        "seed": Key(Int(min=0, max=2**63 - 1), "seed for data order, sampling and initialisation (torch's "
                    "generators take 64 bits; each role's is this plus 1000 per role)", 0),
        "validate_every": Key(Int(min=0), "validate every k steps (0 = only at the start and end)", 10),
        "val_samples": Key(Int(min=1), "samples per validation prompt (reports mean@N and best@N); the same as the "
                           "rollout's `val { n = N }`", 1),
        "checkpoint_every": Key(Int(min=0), "checkpoint every k steps (0 = only at the end)", 0),
        "keep_checkpoints": Key(Int(min=1), "how many recent checkpoints to keep", 2),
        "max_failures": Key(Int(min=0), "worker-process deaths (and environment or reward processes killed "
                            "from outside) the run recovers from by itself: it restarts the "
                            "processes and goes on from the latest checkpoint (0 = stop at the first)", 3),
        "deterministic": Key(Bool(), "GPU: deterministic kernels, so a resumed run repeats bit for bit "
                             "(slower; CPU runs always are)", False),
        "samples_every": Key(Int(min=0), "every k steps, write a few of the step's prompts, responses, scores and "
                             "advantages to samples.jsonl and show one on the console (0 = never)", 10),
        "staleness": Key(Int(min=0), "asynchronous training: how many policy versions a sample may lag behind the "
                         "update that trains on it; the rollout generates the next batches while the actor trains "
                         "(needs a rollout on devices of its own; verl: async_training.staleness_threshold, "
                         "one-step off-policy = 1). 0 = synchronous", 0),
        "loggers": Key(ListOf(Choice(LOGGERS)), "where each step's metrics go besides metrics.jsonl (always "
                       "written): console (the progress bar), tensorboard (run dir/tensorboard), wandb, mlflow "
                       "(verl: trainer.logger)", ["console"]),
    }),
}

# The names users of verl, TRL and OpenRLHF write for a key rlgraph spells otherwise: an unknown key that is one of
# these is offered its rlgraph name (difflib finds typos, not synonyms: `learning_rate` is not close to `lr`).
FOREIGN_NAMES = {
    "learning_rate": "lr", "max_grad_norm": "grad_clip", "clip_grad": "grad_clip", "grad_norm": "grad_clip",
    "adam_betas": "betas", "lr_warmup_steps": "warmup_steps", "lr_warmup_steps_ratio": "warmup_ratio",
    "lora_rank": "rank", "r": "rank", "lora_alpha": "alpha", "lora_dropout": "dropout",
    "num_generations": "n", "num_samples": "n", "n_samples_per_prompt": "n",
    "max_tokens": "max_new_tokens", "max_response_length": "max_new_tokens", "max_completion_length": "max_new_tokens",
    "response_length": "max_new_tokens", "generate_max_len": "max_new_tokens",
    "tensor_model_parallel_size": "tp", "tensor_parallel_size": "tp",
    "gpu_memory_utilization": "memory_fraction", "max_num_seqs": "max_sequences",
    "ppo_micro_batch_size_per_gpu": "micro_batch", "micro_batch_size": "micro_batch",
    "per_device_train_batch_size": "micro_batch", "ppo_max_token_len_per_gpu": "micro_batch_tokens",
    "enable_gradient_checkpointing": "gradient_checkpointing", "use_remove_padding": "remove_padding",
    "entropy_coef": "entropy_coeff", "train_batch_size": "batch_size", "rollout_batch_size": "batch_size",
    "train_files": "train", "val_files": "val", "eval_dataset": "val", "train_dataset": "train",
    "total_training_steps": "steps", "max_steps": "steps", "total_epochs": "epochs", "num_train_epochs": "epochs",
    "test_freq": "validate_every", "eval_steps": "validate_every", "save_freq": "checkpoint_every",
    "save_steps": "checkpoint_every", "max_actor_ckpt_to_keep": "keep_checkpoints", "save_total_limit": "keep_checkpoints",
    "logger": "loggers", "report_to": "loggers", "n_gpus_per_node": "devices_per_node", "nnodes": "nodes",
    "num_nodes": "nodes", "model_path": "path", "pretrain": "path", "model_name_or_path": "path",
    "reward_funcs": "fn", "compute_score": "fn", "num_workers": "workers",
}
