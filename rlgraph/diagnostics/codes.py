"""Every diagnostic code rlgraph can print, in one registry.

Codes are part of the interface: users grep for them and silence them in CI, so
a code is never renamed or reused. Add new ones at the end of their group.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Code:
    name: str
    severity: str  # "error" | "warning" | "note" (a fact about the plan, not a problem)
    summary: str


_ALL = [
    # --- the text -------------------------------------------------------------
    Code("syntax", "error", "the text does not follow the spec grammar"),
    Code("encoding", "error", "the file is not valid UTF-8 text"),
    Code("missing-header", "error", "the file does not start with `rlgraph <version>`"),
    Code("unsupported-version", "error", "the spec language version is not supported"),
    Code("bad-include", "error", "an included file cannot be read"),
    Code("include-cycle", "error", "files include each other in a cycle"),
    Code("bad-override", "error", "a `-s key=value` override is malformed or names nothing"),
    Code("io", "error", "a spec file cannot be read"),
    # --- declarations -----------------------------------------------------------
    Code("unknown-block", "error", "a top-level block of an unknown kind"),
    Code("missing-name", "error", "a declaration that needs a name has none"),
    Code("unexpected-name", "error", "a block that takes no name was given one"),
    Code("duplicate-name", "error", "two declarations or keys share a name"),
    Code("unknown-key", "error", "a key that the block does not accept"),
    Code("wrong-type", "error", "a value of the wrong type or out of range"),
    Code("missing-key", "error", "a required key is absent"),
    Code("unknown-role", "error", "a reference to a role that is not declared"),
    Code("unknown-model", "error", "a reference to a model that is not declared"),
    Code("unknown-pool", "error", "a reference to a pool that is not declared"),
    Code("unknown-kind", "error", "a role of an unknown kind"),
    Code("missing-block", "error", "a block the spec needs is absent"),
    Code("unknown-env", "error", "a generate call names an environment that is not declared"),
    Code("reward-kind", "error", "a reward function's key on a reward service, or the other way round"),
    Code("judge-template", "error", "a judge's template that does not parse or reads a field a sample lacks"),
    Code("judge-parser", "error", "a judge's parser that is neither a built-in nor a function name"),
    # --- dataflow (graph passes) -------------------------------------------------
    Code("unknown-call", "error", "a call that neither a role nor a built-in provides"),
    Code("bad-arguments", "error", "wrong inputs, outputs or keyword arguments for a call"),
    Code("undefined-field", "error", "a field is consumed but nothing produces it"),
    Code("duplicate-field", "error", "a field is produced twice in one step"),
    Code("unused-field", "warning", "a field is produced but never consumed"),
    Code("cycle", "error", "the step's dataflow has a cycle"),
    Code("field-type", "error", "a field of the wrong kind flows into a call"),
    Code("not-updated", "error", "a trained role is never updated"),
    Code("bad-sync", "error", "a weight-sync edge that cannot work"),
    Code("missing-sync", "warning", "a trained policy is never synced to its rollout"),
    Code("algorithm", "error", "the step's algorithm is inconsistent"),
    Code("unused-role", "warning", "a declared role that the step never calls"),
    Code("duplicate-update", "error", "a trained role is updated more than once in one step"),
    Code("ignored-input", "warning", "an input that the call's arguments make it ignore"),
    Code("greedy-group", "warning", "a group estimator over greedy samples: every advantage is zero"),
    Code("single-sample-group", "warning", "a group estimator over one sample per prompt: raw scores, no baseline"),
    Code("async-colocated", "error", "asynchronous training with a rollout that shares its devices with training"),
    Code("async-no-sync", "error", "asynchronous training with a rollout that never gets the policy's weights"),
    Code("async-no-rollout", "error", "asynchronous training of a step that generates nothing (SFT)"),
    Code("no-effect", "warning", "a call argument that the step's inputs make a no-op"),
    Code("several-rollouts", "error", "role calls read the outputs of more than one generate call"),
    Code("dynamic-sampling", "error", "a `filter_groups` call the step cannot refill around"),
    Code("unused-function", "warning", "a declared transform or loss that the step never uses"),
    Code("unused-env", "warning", "a declared environment that no generate call uses"),
    Code("env-budget", "warning", "an environment's reply may take a rollout's whole response budget"),
    # --- numbers and resources ---------------------------------------------------
    Code("batch-divisibility", "error", "batch sizes do not divide as the step needs"),
    Code("token-budget", "error", "a micro-batch token budget below one whole sequence, or beside micro_batch"),
    Code("placement", "error", "replicas do not fit on the pool's devices"),
    Code("oversubscribed", "error", "a device holds more than it can"),
    Code("out-of-memory", "error", "the estimated memory exceeds a device's capacity"),
    Code("memory-at-full-length", "warning", "only micro-batches of rows at full length exceed a device's capacity"),
    Code("memory-within-error", "warning", "the estimate fits a device by less than its working memory's error"),
    Code("memory-unknown", "warning", "the memory of a role cannot be estimated"),
    Code("tokenizer-mismatch", "error", "a reward model reads token ids of another tokenizer"),
    Code("untrainable-dtype", "error", "a trained role in a dtype it cannot train in (fp16: no loss scaling)"),
    Code("offload-unsharded", "error", "a trained role's param_offload without sharded parameters (fsdp, 2+ replicas)"),
    Code("micro-batch-unset", "warning", "a role on GPUs runs each pass on its whole share of the batch at once"),
    Code("tp-heads", "error", "a tp that does not divide the model's attention heads or key/value heads"),
    Code("context-length", "error", "a rollout's max_new_tokens beyond what its model's context can hold"),
    Code("idle-devices", "warning", "devices of a pool that no role uses"),
    Code("engine-memory", "error", "a rollout engine's memory_fraction cannot hold its weights and one sequence"),
    Code("engine-batch", "note", "how many sequences a paged engine runs at once, and in how many waves"),
    Code("model-path", "error", "a model path that is no local folder with a readable config.json"),
    Code("data-path", "error", "a data file that is not there, or a built-in data set that does not exist"),
    Code("remote-model", "note", "a model named by a Hugging Face hub id: its weights must be where the run happens"),
    Code("conflicting-keys", "error", "two settings that say the same thing in different ways"),
    # --- what rlgraph's runtime implements (`run` refuses all but setting-ignored) -----
    Code("kind-not-implemented", "warning", "a role of a kind the runtime does not run"),
    Code("engine-not-implemented", "warning", "a rollout engine the runtime does not implement"),
    Code("tp-not-implemented", "warning", "a rollout's tp is more than its engine can span"),
    Code("log-probs-not-implemented", "warning", "generate keeps log-probs its engine cannot return"),
    Code("several-generate-calls", "warning", "more generate calls in one step than the runtime runs"),
    Code("lora-not-implemented", "warning", "LoRA adapters on a model the runtime shards (fsdp)"),
    Code("sequence-parallel-not-implemented", "warning", "Ulysses sequence parallelism (`sequence_parallel` > 1), "
         "planned but not run"),
    Code("setting-ignored", "warning", "a setting the runtime would ignore"),
]

CODES: dict[str, Code] = {code.name: code for code in _ALL}
