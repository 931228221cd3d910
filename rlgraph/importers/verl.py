"""verl's settings -> an rlgraph spec (the text `rlgraph import verl` writes).

Every setting of the launch ends up in the spec: as a key or a call argument (with a `# verl: KEY`
comment naming where it came from), or as a comment at its place that says why it is not mapped (those
are also returned as warnings). Where verl's default differs from rlgraph's, the spec states verl's
(bf16, fsdp, mini-batches of 256, responses of 512 tokens, 30 epochs, ...), so the spec means what the
launch means. The mapping table is docs/import.md.

Units: verl's `train_batch_size` and `ppo_mini_batch_size` count prompts, as rlgraph's `batch_size` and
`minibatch` do; `*_micro_batch_size_per_gpu` counts samples per device per pass, as `micro_batch` does;
verl's global `*_micro_batch_size` (samples over all devices) is divided by the devices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rlgraph.contract.engines import ENGINES
from rlgraph.importers.launch import Launch, Setting
from rlgraph.importers.models import local_config, shape_of

_MISSING = object()
_SPEC_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_MEMORY = re.compile(r"(\d+(\.\d+)?)(KiB|MiB|GiB|TiB|KB|MB|GB|TB)")
_KL_KINDS = ("k1", "kl", "abs", "k2", "mse", "k3", "low_var_kl", "k1+", "k2+", "k3+", "low_var_kl+")
_LOSS_AGG = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
_LOGGERS = ("console", "tensorboard", "wandb", "mlflow")
_OTHER_STRATEGIES = {"megatron": "tensor/pipeline-parallel training with Megatron-LM",
                     "veomni": "ByteDance's VeOmni training backend", "torchtitan": "the TorchTitan training backend",
                     "automodel": "NVIDIA NeMo AutoModel", "mlite": "Megatron Lite"}
AR = "actor_rollout_ref"

# Settings that rlgraph has no counterpart for, and why (first match wins).
_REASONS: tuple[tuple[str, str], ...] = (
    (r".*\.megatron\..*", "a Megatron option (this launch is imported with the fsdp strategy it was given with -s)"),
    (rf"{AR}\.actor\.engine\..*|hydra\.searchpath", "a training-backend option (Megatron Lite's mesh, offloads, "
                                                    "kernels; this launch is imported with the fsdp strategy it was "
                                                    "given with -s)"),
    (r"async_training\..*", "verl's fully-async trainer; rlgraph's asynchronous training is `train { staleness }` "
                            "(docs/async.md), which the importer does not derive from these"),
    (r"rollout\.(nnodes|n_gpus_per_node|total_rollout_steps|total_epochs|test_freq)",
     "a setting of verl's separate rollout (fully-async / one-step-off): of these, the one-step-off and fully-async "
     "mains' rollout devices are mapped (a pool of its own), the rest is not"),
    (r"reward\.reward_model\..*", "verl's reward model served by a rollout engine (reward.reward_model); rlgraph's "
                                  "reward models are a `role rm { kind = reward_model }` (docs/spec.md)"),
    (r"reward\.num_workers", "rlgraph scores in its reward workers (reward { workers })"),
    (r".*\.multi_turn\..*|data\.tool_config_path", "verl's tools and interactions are verl classes named in config "
                                                  "files; rlgraph's multi-turn rollouts take an `env` block "
                                                  "(docs/environments.md): declare one and call "
                                                  "rollout.generate(env = NAME)"),
    (r".*\.use_remove_padding", "rlgraph reads padding removal from the models' use_remove_padding "
                                "(actor_rollout_ref.model, critic.model, reward_model.model): `remove_padding`"),
    (r".*\.ulysses_sequence_parallel_size", "rlgraph's reward model has no sequence parallelism"),
    (rf"{AR}\.rollout\.mode", "rlgraph generates each batch synchronously (train.staleness is its asynchronous "
                              "training)"),
    (rf"{AR}\.rollout\.max_num_batched_tokens", "vLLM's token budget per scheduler step (verl passes it to vLLM "
                                                "only); rlgraph bounds the sequences generated at once "
                                                "(max_sequences), not the tokens"),
    (rf"{AR}\.rollout\..*", "an engine option rlgraph does not set"),
    (r".*\.(use_fused_kernels|use_shm|trust_remote_code|external_lib|override_config\..*|use_liger|"
     r"custom_chat_template|tokenizer_path|enable_activation_offload|exclude_modules|lora_adapter_path)",
     "a model-loading option rlgraph does not have"),
    (r".*\.fsdp_config\..*|.*\.fsdp_size", "an FSDP option rlgraph does not have"),
    (r".*\.(use_torch_compile|entropy_checkpointing|entropy_from_logits_with_chunking)", "a kernel option rlgraph "
                                                                                        "does not have"),
    (r".*\.checkpoint\..*|trainer\.(default_local_dir|default_hdfs_dir|resume_mode|resume_from_path|"
     r"del_local_ckpt_after_load)", "rlgraph keeps checkpoints in the run directory (rlgraph run --output) and "
                                    "resumes from them unless --no-resume"),
    (r"trainer\.(project_name|experiment_name)", "rlgraph names a run by its output directory"),
    (r"trainer\.val_before_train", "rlgraph always validates before the first step"),
    (r"trainer\.critic_warmup", "rlgraph updates the critic and the actor from the first step"),
    (r"trainer\.balance_batch", "rlgraph does not reorder a batch to balance tokens across devices"),
    (r"data\.filter_overlong_prompts", "rlgraph always filters out prompts longer than max_prompt_length"),
    (r"data\.gen_batch_size", "filter_groups draws more prompts as it needs them (max_rounds)"),
    (r"data\.(image_key|video_key|image_patch_size)", "rlgraph has no image or video inputs"),
    (r"data\..*", "a dataset option rlgraph does not have (it reads verl's parquet rows: prompt, data_source, "
                  "reward_model.ground_truth)"),
    (r"reward_model\.reward_manager|reward_manager\..*", "rlgraph scores every row with its reward function (a "
                                                        "reward block) or its reward model"),
    (r"reward_model\.(reward_kwargs|overlong_buffer)\..*", "a reward-manager option rlgraph does not have"),
    (r"reward\..*", "a reward option rlgraph does not have"),
    (r"algorithm\.filter_groups\.metric", "the metric filter_groups reads"),
    (r"global_profiler\..*|.*\.profiler\..*|trainer\.(nsys|profile).*", "rlgraph has no profiler settings"),
)
# Settings whose value is what rlgraph does anyway.
_SAME: dict[str, tuple] = {
    "trainer.critic_warmup": (0,), "trainer.val_before_train": (True,), "data.filter_overlong_prompts": (True,),
    "reward_model.ulysses_sequence_parallel_size": (1,), "reward_model.reward_manager": ("naive",),
    f"{AR}.hybrid_engine": (True,), "data.truncation": ("error",), "trainer.device": ("cuda",),
    "trainer.resume_mode": ("auto",), f"{AR}.rollout.mode": ("sync",), "model_engine": ("dp", "fsdp"),
}


class ImportProblem(Exception):
    """The launch's values cannot be imported; `errors` lists each, with its line."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


@dataclass
class Result:
    text: str  # the spec (not yet formatted)
    warnings: list[str]


# ---- reading typed values ----------------------------------------------------------------------------------


def where(setting: Setting) -> str:
    """`line 12`, or `-s` for an override given to `rlgraph import verl -s KEY=VALUE`."""
    return f"line {setting.line}" if setting.line else "-s"


# verl's current names -> the names the importer reads (verl moved the reward settings under `reward.`);
# comments and warnings name the key as the launch wrote it
_RENAMED: tuple[tuple[str, str], ...] = (
    ("reward.custom_reward_function.", "custom_reward_function."),
    ("reward.reward_manager.name", "reward_model.reward_manager"),
    ("reward.reward_kwargs.", "reward_model.reward_kwargs."),
    ("critic.fsdp.", "critic.model.fsdp_config."),
)


class _Config:
    def __init__(self, settings: list[Setting]):
        self.values: dict[str, Setting] = {}
        self.written: dict[str, str] = {}  # the importer's name -> the launch's, where they differ
        self.warnings: list[str] = []
        for setting in settings:
            key = setting.key
            for new, old in _RENAMED:
                if key.startswith(new):
                    key = old + key[len(new):]
                    self.written[key] = setting.key
            if key in self.values:
                earlier = self.values[key]
                again = "is set twice" if earlier.key == setting.key else f"is set again as {setting.key}"
                self.warnings.append(f"{where(setting)}: {earlier.key}={earlier.text} {again}; the later value "
                                     f"({setting.text}) wins")
            self.values[key] = setting
        self.used: set[str] = set()
        self.errors: list[str] = []

    def has(self, key: str) -> bool:
        return key in self.values and self.values[key].value is not None

    def raw(self, key: str, default=None):
        setting = self.values.get(key)
        if setting is None:
            return default
        self.used.add(key)
        return default if setting.value is None else setting.value

    def _typed(self, key, default, check, expected):
        value = self.raw(key, _MISSING)
        if value is _MISSING:
            return default
        if check(value):
            return value
        setting = self.values[key]
        hint = " (it uses a variable or command the importer does not expand)" if "$" in setting.text else ""
        self.errors.append(f"{where(setting)}: {self.name(key)}={setting.text}: expected {expected}{hint}")
        return default

    def int(self, key, default=None, minimum=None):
        value = self._typed(key, default, lambda v: isinstance(v, int) and not isinstance(v, bool),
                            "an integer" if minimum is None else f"an integer >= {minimum}")
        if value is not None and minimum is not None and value < minimum and key in self.values:
            self.errors.append(f"{where(self.values[key])}: {self.name(key)}={value}: expected an integer >= "
                               f"{minimum}")
            return default
        return value

    def float(self, key, default=None):
        value = self._typed(key, default, lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
                            "a number")
        setting = self.values.get(key)
        if setting is not None and value == setting.value and _SPEC_NUMBER.fullmatch(setting.text):
            return _Written(value, setting.text)  # `1e-6` stays `1e-6` in the spec
        return value

    def bool(self, key, default=False):
        return self._typed(key, default, lambda v: isinstance(v, bool), "True or False")

    def str(self, key, default=None):
        value = self._typed(key, default, lambda v: isinstance(v, (str, int, float)) and not isinstance(v, bool),
                            "a string")
        return None if value is None else str(value)

    def strs(self, key, default=None):
        value = self._typed(key, default, lambda v: isinstance(v, str) or (isinstance(v, list) and v and all(
            isinstance(i, str) for i in v)), "a path or a list of paths")
        return home_path(value) if isinstance(value, str) else value if value is None else [home_path(v) for v in value]

    def path(self, key, default=None):
        value = self.str(key, default)
        return None if value is None else home_path(value)

    def text(self, key) -> str:
        return self.values[key].text

    def name(self, key: str) -> str:
        """The key as the launch wrote it."""
        return self.written.get(key, key)

    def given(self, *keys: str) -> list[str]:
        return [k for k in keys if k in self.values]


# ---- the spec as it is written -------------------------------------------------------------------------------


class _Written(float):
    """A number as the launch wrote it."""

    def __new__(cls, value: float, text: str):
        number = super().__new__(cls, value)
        number.text = text
        return number


def _value(value) -> str:
    if isinstance(value, _Written):
        return value.text.lstrip("+")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = repr(value)
        return text if _SPEC_NUMBER.fullmatch(text) else f"{value:.10g}"
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, _Name):
        return value.name
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t") + '"'


@dataclass(frozen=True)
class _Name:
    """A bare name in the spec (`fsdp`, `policy`), not a string."""

    name: str


@dataclass
class _Block:
    head: str
    entries: list[tuple[str, object, str]] = field(default_factory=list)  # key, value, verl keys
    nested: list["_Block"] = field(default_factory=list)
    comments: list[str] = field(default_factory=list)
    one_line: bool = False

    def set(self, key: str, value, source: str = "") -> None:
        if value is not None:
            self.entries.append((key, value, source))

    def render(self, indent: str = "") -> list[str]:
        if self.one_line and not self.comments and not self.nested and not any(s for _, _, s in self.entries):
            body = "  ".join(f"{k} = {_value(v)}" for k, v, _ in self.entries)
            return [f"{indent}{self.head} {{ {body} }}"]
        lines = [f"{indent}{self.head} {{"]
        lines += [f"{indent}  # {c}" for c in self.comments]
        for key, value, source in self.entries:
            lines.append(f"{indent}  {key} = {_value(value)}" + (f"  # verl: {source}" if source else ""))
        for nested in self.nested:
            lines += nested.render(indent + "  ")
        return lines + [f"{indent}}}"]


def _short(key: str) -> str:
    return key.removeprefix(f"{AR}.")


def _source(cfg: _Config, *keys: str, default: str = "default") -> str:
    given = cfg.given(*keys)
    return ", ".join(_short(cfg.name(k)) for k in given) if given else default


def _call(name: str, args: list[tuple[str, object]]) -> str:
    args = [(k, v) for k, v in args if v is not None]
    return name + ("(" + ", ".join(f"{k} = {_value(v)}" for k, v in args) + ")" if args else "")


# On a CPU pool (trainer.device=cpu): what each GPU-only setting becomes (None: left out), and why.
_GPU_ONLY: dict[str, tuple[object, str]] = {
    "dtype": (_Name("fp32"), "bf16 matrix multiplies are slow on most CPUs"),
    "gradient_checkpointing": (False, "recomputing activations saves device memory, at a third more compute"),
    "remove_padding": (False, "padding-free passes need flash-attention's variable-length kernels (GPU)"),
    "param_offload": (None, "offload moves state from the device to the host, which on a CPU are the same memory"),
    "optimizer_offload": (None, "offload moves state from the device to the host, which on a CPU are the same memory"),
    "engine": (_Name("hf"), "vLLM and SGLang generate on GPUs"),
    "tp": (1, "tensor parallelism splits a model over GPUs"),
    "max_sequences": (None, "the hf engine generates the whole batch at once"),
    "memory_fraction": (None, "the hf engine reserves no KV pool"),
}

# ---- the import ----------------------------------------------------------------------------------------------


def import_verl(launch: Launch, source: str, device_memory: str | None) -> Result:
    """The spec for `launch` (read from the file named `source`). Raises ImportProblem for bad values."""
    if device_memory is not None and not _MEMORY.fullmatch(device_memory):
        raise ImportProblem([f"--device-memory {device_memory}: expected a size with its unit, such as 80GiB or "
                             "141GB"])
    if not launch.settings:
        raise ImportProblem(["the launch sets nothing: no key=value overrides were found"])
    cfg = _Config(launch.settings)
    spec = _Importer(cfg, launch, source, device_memory).build()
    if cfg.errors:
        raise ImportProblem(cfg.errors)
    return spec


class _Importer:
    def __init__(self, cfg: _Config, launch: Launch, source: str, device_memory: str | None):
        self.cfg, self.launch, self.source, self.memory = cfg, launch, source, device_memory
        self.blocks: dict[str, _Block] = {}
        self.top_comments: list[str] = []
        self.step: list[tuple[str, str]] = []  # statement, verl keys
        self.warnings: list[str] = list(launch.warnings) + cfg.warnings
        self.notes: dict[str, list[str]] = {}
        self.refused: set[str] = set()
        self.cpu = cfg.str("trainer.device", "cuda") == "cpu"

    # -- the whole spec --

    def build(self) -> Result:
        cfg = self.cfg
        estimator = cfg.str("algorithm.adv_estimator", "gae")
        estimators = ("gae", "grpo", "rloo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax")
        if estimator not in estimators:
            setting = cfg.values["algorithm.adv_estimator"]
            cfg.errors.append(f"{where(setting)}: algorithm.adv_estimator={estimator}: rlgraph has no step for "
                              f"this estimator (it imports {', '.join(estimators)})")
            estimator = "grpo"
        self.estimator = estimator
        self.kl_loss = cfg.bool(f"{AR}.actor.use_kl_loss", False)
        self.kl_in_reward = cfg.bool("algorithm.use_kl_in_reward", False)
        self.has_ref = self.kl_loss or self.kl_in_reward
        self.has_critic = estimator == "gae"
        if self.has_critic and cfg.has("critic.enable") and cfg.bool("critic.enable", True) is False:
            cfg.errors.append(f"{where(cfg.values['critic.enable'])}: critic.enable=False with adv_estimator=gae: GAE "
                              "needs a critic's values, and verl builds no critic with critic.enable=False "
                              "(verl/trainer/ppo/utils.py need_critic)")
        if cfg.bool("critic.enable", False) and not self.has_critic:
            self._note("top", "critic.enable", f"verl builds and trains this critic, but adv_estimator={estimator} "
                       "does not read its values; the spec has no critic, so its memory and time are not in the plan",
                       warn=True)
        self.has_rm = cfg.bool("reward_model.enable", False)
        self.split = "main_ppo_split" in self.launch.entry
        self._pools()
        self._models()
        self._actor()
        self._rollout()
        if self.has_ref:
            self._ref()
        if self.has_critic:
            self._critic()
        self._reward()
        self._data()
        self._train()
        self._step()
        if self.cpu:
            self._on_cpu()
        self._leftovers()
        return Result(self._render(), self.warnings)

    def _render(self) -> str:
        memory_line = (f"# Device memory: {self.memory}, from --device-memory (verl's launches do not state it)."
                       if self.memory else
                       "# Device memory: not set (verl's launches do not state it): the memory estimate is not "
                       "checked; import with --device-memory 80GiB, or add `memory = 80GiB` to the pool.")
        lines = ["rlgraph 1", f"# Imported from {self.source} by `rlgraph import verl`.",
                 f"# verl entry point: {self.launch.entry or 'a ' + self.launch.form + ' file'}.", memory_line,
                 "# Comments `# verl: KEY` name the verl settings each value comes from; `not mapped` lists the "
                 "ones rlgraph has no counterpart for."]
        if self.top_comments:
            lines += [""] + [f"# {c}" for c in self.top_comments]
        for block in self.blocks.values():
            lines += [""] + block.render()
        lines += ["", "step {"]
        for comment in self.notes.get("step", []):
            lines.append(f"  # {comment}")
        for statement, source in self.step:
            if source:
                lines.append(f"  # verl: {source}")
            lines.append(f"  {statement}")
        lines.append("}")
        return "\n".join(lines) + "\n"

    # -- pools and models --

    def _pools(self) -> None:
        cfg = self.cfg
        per_node = cfg.int("trainer.n_gpus_per_node", 8, minimum=1) or 8
        nodes = cfg.int("trainer.nnodes", 1, minimum=1) or 1
        source = _source(cfg, "trainer.n_gpus_per_node", "trainer.nnodes")
        if self.split:
            # verl's examples/split_placement/main_ppo_split.py halves the devices of a node (one node), or the
            # nodes (several): one half for actor, rollout and ref, the other for the critic
            if nodes // 2 == 0 and per_node // 2 > 0:
                shape = (nodes, per_node // 2)
            else:
                shape = (nodes // 2, per_node)
            self.actor_pool, self.critic_pool = "actor_gpus", "critic_gpus"
            self._pool("actor_gpus", *shape, source + "; main_ppo_split.py gives half to actor, rollout and ref")
            self._pool("critic_gpus", *shape, source + "; main_ppo_split.py gives the other half to the critic")
        else:
            self.actor_pool = self.critic_pool = "gpus"
            self._pool("gpus", nodes, per_node, source)
        self.devices = self.blocks[f"pool:{self.actor_pool}"].devices
        if self.has_rm and cfg.bool("reward_model.enable_resource_pool", False):
            rm_nodes = cfg.int("reward_model.nnodes", 0, minimum=0) or 0
            rm_per_node = cfg.int("reward_model.n_gpus_per_node", 8, minimum=1) or 8
            if rm_nodes:
                self._pool("reward_gpus", rm_nodes, rm_per_node,
                           _source(cfg, "reward_model.enable_resource_pool", "reward_model.n_gpus_per_node",
                                   "reward_model.nnodes"))
        self.rollout_pool = None
        if "one_step_off" in self.launch.entry or "fully_async" in self.launch.entry:
            # these mains give the rollout devices of its own (rollout.*) beside the trainer's (trainer.*)
            rollout_per_node = cfg.int("rollout.n_gpus_per_node", None, minimum=1)
            if rollout_per_node is not None:
                self.rollout_pool = "rollout_gpus"
                self._pool("rollout_gpus", cfg.int("rollout.nnodes", 1, minimum=1) or 1, rollout_per_node,
                           _source(cfg, "rollout.n_gpus_per_node", "rollout.nnodes")
                           + "; the rollout's own devices, beside the trainer's")
        device = cfg.str("trainer.device", "cuda")
        if device not in ("cuda", "cpu"):
            self._note("top", "trainer.device", "rlgraph's pools are cpu or gpu; imported as gpu", warn=True)

    def _pool(self, name: str, nodes: int, per_node: int, source: str) -> None:
        block = _Block(f"pool {name}", one_line=False)
        block.comments.append(f"verl: {source}")
        block.set("nodes", nodes)
        block.set("devices_per_node", per_node)
        block.set("device", _Name("cpu" if self.cpu else "gpu"), "trainer.device" if self.cpu else "")
        if self.memory:
            block.set("memory", _Name(self.memory), "not in verl's launches: --device-memory")
        block.devices = nodes * per_node
        self.blocks[f"pool:{name}"] = block

    def _models(self) -> None:
        cfg = self.cfg
        self.policy_path = cfg.path(f"{AR}.model.path", "~/models/deepseek-llm-7b-chat")
        self._model("policy", self.policy_path, _source(cfg, f"{AR}.model.path"))
        self.critic_model = "policy"
        if self.has_critic:
            path = cfg.path("critic.model.path", "~/models/deepseek-llm-7b-chat")
            if path != self.policy_path:
                self.critic_model = "critic_model"
                self._model("critic_model", path, _source(cfg, "critic.model.path"))
        if self.has_rm:
            self.rm_path = cfg.path("reward_model.model.path", "~/models/FsfairX-LLaMA3-RM-v0.1")
            self._model("reward", self.rm_path, _source(cfg, "reward_model.model.path"))

    def _model(self, name: str, path: str, source: str) -> None:
        block = _Block(f"model {name}")
        block.set("path", path, source)
        local = path.startswith(("/", "~", ".", "$"))
        shape = shape_of(path)
        if shape:
            where = "a local path" if local else "a Hugging Face hub id"
            block.comments.append(f"{where}: the weights must exist where the run happens; the shape below is "
                                  f"{path.rsplit('/', 1)[-1]}'s published config.json, for the memory estimate")
            if shape.note:
                block.comments.append(shape.note)
            block.set("params", _Name(shape.params))
            for key in ("layers", "hidden", "heads", "kv_heads", "vocab", "intermediate", "head_dim", "experts",
                        "experts_per_token", "expert_intermediate"):
                block.set(key, getattr(shape, key))  # None (a dense model, head_dim = hidden / heads): not written
        elif local_config(path):
            block.comments.append("a model folder on this machine: the memory estimate reads its shape from "
                                  "config.json there")
        else:
            block.comments.append("a model the importer does not know: add params, layers, hidden, heads, "
                                  "kv_heads, vocab and intermediate for the memory estimate, or have config.json "
                                  "at the path")
            self.warnings.append(f"model {name}: the shape of `{path}` is unknown to the importer; the memory "
                                 "estimate needs params/layers/hidden/heads/kv_heads/vocab/intermediate or a "
                                 "config.json")
        self.blocks[f"model:{name}"] = block

    # -- roles --

    def _placement(self, block: _Block, pool: str, colocate: str | None) -> None:
        if colocate:
            block.set("colocate", _Name(colocate))
        else:
            block.set("pool", _Name(pool))
            block.set("replicas", self.blocks[f"pool:{pool}"].devices)

    def _micro(self, block: _Block | None, per_gpu: str, total: str, devices: int) -> int | None:
        cfg = self.cfg
        micro = cfg.int(per_gpu, None, minimum=1)
        if micro is not None:
            return micro
        whole = cfg.int(total, None, minimum=1)
        if whole is not None:
            return max(1, whole // devices)
        return None

    def _actor(self) -> None:
        cfg, a = self.cfg, f"{AR}.actor"
        block = _Block("role actor")
        block.set("model", _Name("policy"))
        self._placement(block, self.actor_pool, None)
        self._strategy(block, f"{a}.strategy")
        self.actor_dynamic = cfg.bool(f"{a}.use_dynamic_bsz", False)
        self.actor_tokens = cfg.int(f"{a}.ppo_max_token_len_per_gpu", 16384, minimum=1)
        self.actor_sp = self._sequence_parallel(block, f"{a}.ulysses_sequence_parallel_size",
                                                f"{a}.fsdp_config.ulysses_sequence_parallel_size")
        micro = self._micro(block, f"{a}.ppo_micro_batch_size_per_gpu", f"{a}.ppo_micro_batch_size",
                            max(self.devices // self.actor_sp, 1))
        self.actor_micro = micro
        if self.actor_dynamic:
            block.set("micro_batch_tokens", self.actor_tokens,
                      _source(cfg, f"{a}.use_dynamic_bsz", f"{a}.ppo_max_token_len_per_gpu"))
            self.actor_micro = None
            for key in cfg.given(f"{a}.ppo_micro_batch_size_per_gpu", f"{a}.ppo_micro_batch_size"):
                self._note("actor", key, "no effect with use_dynamic_bsz", kind="no effect")
        elif micro is not None:
            block.set("micro_batch", micro, _source(cfg, f"{a}.ppo_micro_batch_size_per_gpu",
                                                    f"{a}.ppo_micro_batch_size"))
        self._token_budget_without_dynamic(f"{a}.use_dynamic_bsz", f"{a}.ppo_max_token_len_per_gpu",
                                           dynamic=self.actor_dynamic)
        block.set("gradient_checkpointing", cfg.bool(f"{AR}.model.enable_gradient_checkpointing", True),
                  _source(cfg, f"{AR}.model.enable_gradient_checkpointing"))
        self._remove_padding(block, f"{AR}.model.use_remove_padding", True)
        self._offload(block, "actor", f"{a}.fsdp_config", self.devices)
        entropy = cfg.float(f"{a}.entropy_coeff", 0)
        block.set("entropy_coeff", entropy, _source(cfg, f"{a}.entropy_coeff"))
        block.nested.append(self._optim(f"{a}.optim", 1e-6, f"{a}.grad_clip"))
        rank = cfg.int(f"{AR}.model.lora_rank", 0, minimum=0)
        if rank:
            lora = _Block("lora")
            lora.set("rank", rank, _source(cfg, f"{AR}.model.lora_rank"))
            lora.set("alpha", cfg.float(f"{AR}.model.lora_alpha", 16), _source(cfg, f"{AR}.model.lora_alpha"))
            targets = cfg.strs(f"{AR}.model.target_modules", "all-linear")
            lora.set("target_modules", targets, _source(cfg, f"{AR}.model.target_modules"))
            block.nested.append(lora)
        else:
            for key in cfg.given(f"{AR}.model.lora_alpha", f"{AR}.model.target_modules"):
                cfg.raw(key)
                self._note("model:policy", key, "no effect without lora_rank", kind="no effect")
        self.blocks["role:actor"] = block

    def _sequence_parallel(self, block: _Block, legacy: str, engine: str, legacy_default: int = 1) -> int:
        """verl's Ulysses size: the role's legacy key where it is above 1 (verl copies it into the engine's),
        else its engine's (`fsdp_config.ulysses_sequence_parallel_size`)."""
        cfg = self.cfg
        sp = cfg.int(legacy, legacy_default, minimum=1) or 1
        source = _source(cfg, legacy, default="actor.ulysses_sequence_parallel_size (the default)") if sp > 1 else ""
        engine_sp = cfg.int(engine, 1, minimum=1) or 1
        if sp <= 1:
            sp, source = engine_sp, _source(cfg, engine)
        if sp > 1:
            block.set("sequence_parallel", sp, source)
        return sp

    def _strategy(self, block: _Block, key: str) -> None:
        """fsdp/fsdp2 (and verl's fsdp_turbo) as rlgraph's fsdp; a backend rlgraph does not run (Megatron, VeOmni,
        TorchTitan, AutoModel: by the key, `model_engine=` or the Hydra config) refused, with the override that
        imports the launch as fsdp."""
        cfg = self.cfg
        engine_key = next((k for k in ("model_engine", f"{AR}.actor.model_engine") if cfg.has(k)), None)
        named = next((s for s in _OTHER_STRATEGIES if s in self.launch.config_name), None)
        searchpath = str(cfg.raw("hydra.searchpath", ""))
        if "mlite" in searchpath or any(k.startswith(f"{AR}.actor.engine.") for k in cfg.values):
            # Megatron Lite's launches load its backend's config (hydra.searchpath=[pkg://verl_mlite.config])
            # and set its mesh under actor.engine.*; no strategy key names it
            named = "mlite"
            if engine_key is None and cfg.has("hydra.searchpath"):
                engine_key = "hydra.searchpath"
        strategy = cfg.str(key, None) if cfg.has(key) else None
        if strategy is None and engine_key == "hydra.searchpath":
            strategy = "mlite"
        elif strategy is None and engine_key:
            key, strategy = engine_key, cfg.str(engine_key, "dp")
        strategy = strategy or named or "fsdp"
        if strategy in ("fsdp", "fsdp2", "fsdp_turbo", "dp"):
            block.set("strategy", _Name("fsdp"), _source(cfg, key, default="default (fsdp)"))
            block.set("dtype", _Name("bf16"), "default (bf16 compute, fp32 master weights)")
            if strategy == "fsdp_turbo" and key not in self.refused:
                self.refused.add(key)
                self.warnings.append(f"{where(cfg.values[key])}: {key}=fsdp_turbo is imported as fsdp: rlgraph's "
                                     "FSDP does not have verl's fsdp_turbo engine (its fused kernels)")
            return
        if cfg.has(key):
            at = f"{where(cfg.values[key])}: {cfg.name(key)}={cfg.text(key)}"
        elif engine_key == "hydra.searchpath":
            at = f"{where(cfg.values[engine_key])}: hydra.searchpath={cfg.text(engine_key)}"
        else:
            at = f"--config-name={self.launch.config_name}"
        if at not in self.refused:
            self.refused.add(at)
            what = _OTHER_STRATEGIES.get(strategy, "a training backend rlgraph does not run")
            fix = " ".join(f"-s {k}=fsdp" for k in (key,) + ((engine_key,) if engine_key and engine_key != key
                                                              and engine_key != "hydra.searchpath" else ()))
            cfg.errors.append(f"{at}: rlgraph has no {strategy} strategy ({what}); rlgraph trains with fsdp or ddp. "
                              f"To import this launch as fsdp anyway: rlgraph import verl FILE {fix}")

    def _token_budget_without_dynamic(self, dynamic_key: str, *budget_keys: str, dynamic: bool) -> None:
        """verl reads a token budget only with dynamic batching: set without it, it does nothing (say so)."""
        if dynamic:
            return
        for key in self.cfg.given(*budget_keys):
            self._note(key, key, f"no effect without {_short(dynamic_key)}=True (verl then splits by "
                       "*_micro_batch_size_per_gpu)", warn=True, kind="no effect")

    def _remove_padding(self, block: _Block, key: str, verl_default: bool) -> None:
        """verl's use_remove_padding; unset, verl's default where it differs from rlgraph's (false)."""
        value = self.cfg.bool(key, verl_default)
        if value or self.cfg.has(key):
            block.set("remove_padding", value, _source(self.cfg, key))

    def _offload(self, block: _Block, home: str, prefix: str, devices: int) -> None:
        cfg = self.cfg
        # verl's fsdp_config.param_offload keeps a trained role's state on the host between calls and loads it
        # onto the device for each update (load_fsdp_model_to_gpu, load_fsdp_optimizer): the update's peak holds
        # it all, as a role without offload does, so it maps to nothing. rlgraph's param_offload (FSDP2's
        # CPUOffloadPolicy: the state stays on the host, the optimizer steps there) is verl's offload_policy.
        if cfg.bool(f"{prefix}.param_offload", False) or cfg.has(f"{prefix}.param_offload"):
            self._note(home, f"{prefix}.param_offload", "verl moves the state back to the device for each update, "
                       "so the update's peak is a role's without offload, which is what rlgraph plans",
                       kind="as rlgraph")
        policy = cfg.bool(f"{prefix}.offload_policy", False)
        if policy and devices < 2:
            self._note(home, f"{prefix}.offload_policy", "rlgraph offloads only sharded parameters (fsdp over 2 or "
                       "more replicas); this role has one device", warn=True)
        elif policy or cfg.has(f"{prefix}.offload_policy"):
            block.set("param_offload", policy, _short(cfg.name(f"{prefix}.offload_policy")))
        optimizer = cfg.bool(f"{prefix}.optimizer_offload", False)
        if optimizer or cfg.has(f"{prefix}.optimizer_offload"):
            block.set("optimizer_offload", optimizer, _short(cfg.name(f"{prefix}.optimizer_offload")))

    def _optim(self, prefix: str, lr: float, grad_clip_key: str) -> _Block:
        cfg = self.cfg
        optim = _Block("optim", one_line=False)
        optim.set("lr", cfg.float(f"{prefix}.lr", lr), _source(cfg, f"{prefix}.lr"))
        betas = cfg.raw(f"{prefix}.betas")
        if betas is not None:
            if isinstance(betas, list) and len(betas) == 2 and all(isinstance(b, (int, float)) for b in betas):
                optim.set("betas", [float(b) for b in betas], _short(f"{prefix}.betas"))
            else:
                cfg.errors.append(f"{where(cfg.values[f'{prefix}.betas'])}: {prefix}.betas="
                                  f"{cfg.text(f'{prefix}.betas')}: expected a list of two numbers")
        optim.set("weight_decay", cfg.float(f"{prefix}.weight_decay", 0.01), _source(cfg, f"{prefix}.weight_decay"))
        steps = cfg.int(f"{prefix}.lr_warmup_steps", -1)
        ratio = cfg.float(f"{prefix}.lr_warmup_steps_ratio", 0.0)
        if steps is not None and steps > 0:
            optim.set("warmup_steps", steps, _short(f"{prefix}.lr_warmup_steps"))
            if ratio:
                self._note(prefix, f"{prefix}.lr_warmup_steps_ratio", "no effect beside lr_warmup_steps",
                           kind="no effect")
        elif ratio:
            optim.set("warmup_ratio", ratio, _short(f"{prefix}.lr_warmup_steps_ratio"))
        style = cfg.str(f"{prefix}.warmup_style", None) or cfg.str(f"{prefix}.lr_scheduler_type", None)
        key = f"{prefix}.warmup_style" if cfg.has(f"{prefix}.warmup_style") else f"{prefix}.lr_scheduler_type"
        if style == "cosine":
            optim.set("schedule", _Name("cosine"), _short(key))
            floor = cfg.float(f"{prefix}.min_lr_ratio", 0.0)
            if floor:
                optim.set("min_lr_ratio", floor, _short(f"{prefix}.min_lr_ratio"))
        elif style not in (None, "constant"):
            self._note(prefix, key, "rlgraph's schedules are a linear warm-up, then constant or cosine", warn=True)
        clip = cfg.float(grad_clip_key, 1.0)
        optim.set("grad_clip", clip, _source(cfg, grad_clip_key))
        return optim

    def _rollout(self) -> None:
        cfg, r = self.cfg, f"{AR}.rollout"
        block = _Block("role rollout")
        if self.rollout_pool:  # generates on its own devices from synced weights
            block.set("model", _Name("policy"))
            block.set("pool", _Name(self.rollout_pool))
        else:
            block.set("colocate", _Name("actor"))
        engine = cfg.str(f"{r}.name", "vllm")
        if engine not in ENGINES:
            self._note("rollout", f"{r}.name", f"rlgraph's engines are {', '.join(sorted(ENGINES))}; imported as vllm",
                       warn=True)
            engine = "vllm"
        block.set("engine", _Name(engine), _source(cfg, f"{r}.name", default="vllm, the engine of most launches"))
        tp = cfg.int(f"{r}.tensor_model_parallel_size", 2, minimum=1)
        block.set("tp", tp, _source(cfg, f"{r}.tensor_model_parallel_size"))
        if self.rollout_pool:  # a replica of tp devices each (one that does not divide them: `check` says so)
            block.set("replicas", max(self.blocks[f"pool:{self.rollout_pool}"].devices // (tp or 1), 1),
                      "rollout.n_gpus_per_node, rollout.nnodes / tensor_model_parallel_size")
        self.n = cfg.int(f"{r}.n", 1, minimum=1)
        block.set("n", self.n, _source(cfg, f"{r}.n"))
        self.temperature = cfg.float(f"{r}.temperature", 1.0)
        block.set("temperature", self.temperature, _source(cfg, f"{r}.temperature"))
        top_p = cfg.float(f"{r}.top_p", 1.0)
        block.set("top_p", top_p, _source(cfg, f"{r}.top_p"))
        top_k = cfg.int(f"{r}.top_k", -1)
        block.set("top_k", 0 if top_k is not None and top_k < 0 else top_k,
                  _source(cfg, f"{r}.top_k") + (" (-1: all tokens)" if top_k is not None and top_k < 0 else ""))
        length_key = f"{r}.response_length" if cfg.has(f"{r}.response_length") else "data.max_response_length"
        self.response_length = cfg.int(length_key, 512, minimum=1)
        block.set("max_new_tokens", self.response_length, _source(cfg, length_key))
        block.set("memory_fraction", cfg.float(f"{r}.gpu_memory_utilization", 0.5),
                  _source(cfg, f"{r}.gpu_memory_utilization"))
        self._max_sequences(block, engine)
        block.set("dtype", _Name("bf16"), _source(cfg, f"{r}.dtype", default="default"))
        if cfg.str(f"{r}.dtype", "bfloat16") not in ("bfloat16", "bf16"):
            self._note("rollout", f"{r}.dtype", "imported as bf16", warn=True)
        v = f"{r}.val_kwargs"
        if cfg.given(f"{v}.temperature", f"{v}.top_p", f"{v}.top_k", f"{v}.n", f"{v}.do_sample"):
            val = _Block("val", one_line=False)
            sample = cfg.bool(f"{v}.do_sample", False)
            temperature = cfg.float(f"{v}.temperature", 0.0)
            val.set("temperature", temperature if sample else 0,
                    _source(cfg, f"{v}.temperature", f"{v}.do_sample") + ("" if sample else " (greedy)"))
            val.set("top_p", cfg.float(f"{v}.top_p", 1.0), _source(cfg, f"{v}.top_p"))
            val_k = cfg.int(f"{v}.top_k", -1)
            val.set("top_k", 0 if val_k is not None and val_k < 0 else val_k, _source(cfg, f"{v}.top_k"))
            val.set("n", cfg.int(f"{v}.n", 1, minimum=1), _source(cfg, f"{v}.n"))
            block.nested.append(val)
        self.blocks["role:rollout"] = block

    def _max_sequences(self, block: _Block, engine: str) -> None:
        """verl hands rollout.max_num_seqs (256) to vLLM as max_num_seqs and to SGLang as max_running_requests;
        the engine's own engine_kwargs entry wins (verl spreads engine_kwargs last). Its hf rollout reads neither."""
        cfg, r = self.cfg, f"{AR}.rollout"
        keys = {"vllm": f"{r}.engine_kwargs.vllm.max_num_seqs",
                "sglang": f"{r}.engine_kwargs.sglang.max_running_requests"}
        if engine not in keys:
            if cfg.has(f"{r}.max_num_seqs"):
                self._note("rollout", f"{r}.max_num_seqs", "verl's hf rollout does not read it", kind="no effect")
            return
        limit = cfg.int(f"{r}.max_num_seqs", 256, minimum=1)
        if cfg.has(keys[engine]):
            limit = cfg.int(keys[engine], limit, minimum=1)
        block.set("max_sequences", limit, _source(cfg, keys[engine], f"{r}.max_num_seqs"))

    def _ref(self) -> None:
        cfg, p = self.cfg, f"{AR}.ref"
        block = _Block("role ref")
        block.set("model", _Name("policy"))
        block.set("colocate", _Name("actor"))
        block.set("dtype", _Name("bf16"), "default")
        # verl's ref.ulysses_sequence_parallel_size defaults to the actor's (oc.select)
        actor_legacy = cfg.int(f"{AR}.actor.ulysses_sequence_parallel_size", 1, minimum=1) or 1
        sp = self._sequence_parallel(block, f"{p}.ulysses_sequence_parallel_size",
                                     f"{p}.fsdp_config.ulysses_sequence_parallel_size", legacy_default=actor_legacy)
        dynamic = cfg.bool(f"{p}.log_prob_use_dynamic_bsz", self.actor_dynamic)
        self._token_budget_without_dynamic(f"{p}.log_prob_use_dynamic_bsz", f"{p}.log_prob_max_token_len_per_gpu",
                                           dynamic=dynamic)
        if dynamic:
            block.set("micro_batch_tokens", cfg.int(f"{p}.log_prob_max_token_len_per_gpu", self.actor_tokens, 1),
                      _source(cfg, f"{p}.log_prob_use_dynamic_bsz", f"{p}.log_prob_max_token_len_per_gpu",
                              f"{AR}.actor.use_dynamic_bsz"))
        else:
            micro = self._micro(block, f"{p}.log_prob_micro_batch_size_per_gpu", f"{p}.log_prob_micro_batch_size",
                                max(self.devices // sp, 1))
            block.set("micro_batch", micro, _source(cfg, f"{p}.log_prob_micro_batch_size_per_gpu",
                                                    f"{p}.log_prob_micro_batch_size"))
        self._remove_padding(block, f"{AR}.model.use_remove_padding", True)  # the ref runs the actor's model
        params = cfg.bool(f"{p}.fsdp_config.param_offload", False)
        if params or cfg.has(f"{p}.fsdp_config.param_offload"):
            block.set("param_offload", params, _short(f"{p}.fsdp_config.param_offload"))
        self.blocks["role:ref"] = block

    def _critic(self) -> None:
        cfg = self.cfg
        block = _Block("role critic")
        block.set("model", _Name(self.critic_model))
        self._placement(block, self.critic_pool, None if self.split else "actor")
        devices = self.blocks[f"pool:{self.critic_pool}"].devices
        self._strategy(block, "critic.strategy")
        self.critic_dynamic = cfg.bool("critic.use_dynamic_bsz", self.actor_dynamic)
        self.critic_tokens = cfg.int("critic.ppo_max_token_len_per_gpu", 32768, minimum=1)
        sp = self._sequence_parallel(block, "critic.ulysses_sequence_parallel_size",
                                     "critic.model.fsdp_config.ulysses_sequence_parallel_size")
        self.critic_micro = self._micro(block, "critic.ppo_micro_batch_size_per_gpu", "critic.ppo_micro_batch_size",
                                        max(devices // sp, 1))
        self._token_budget_without_dynamic("critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu",
                                           "critic.forward_max_token_len_per_gpu", dynamic=self.critic_dynamic)
        if self.critic_dynamic:
            block.set("micro_batch_tokens", self.critic_tokens,
                      _source(cfg, "critic.use_dynamic_bsz", "critic.ppo_max_token_len_per_gpu",
                              f"{AR}.actor.use_dynamic_bsz"))
        else:
            block.set("micro_batch", self.critic_micro, _source(cfg, "critic.ppo_micro_batch_size_per_gpu",
                                                                "critic.ppo_micro_batch_size"))
        block.set("gradient_checkpointing", cfg.bool("critic.model.enable_gradient_checkpointing", True),
                  _source(cfg, "critic.model.enable_gradient_checkpointing"))
        self._remove_padding(block, "critic.model.use_remove_padding", True)  # verl's critic.yaml: true
        self._offload(block, "critic", "critic.model.fsdp_config", devices)
        block.nested.append(self._optim("critic.optim", 1e-5, "critic.grad_clip"))
        self.critic_devices = devices
        self.blocks["role:critic"] = block

    def _reward(self) -> None:
        cfg = self.cfg
        if self.has_rm:
            block = _Block("role rm")
            block.set("kind", _Name("reward_model"))
            block.set("model", _Name("reward"))
            own = "pool:reward_gpus" in self.blocks
            self._placement(block, "reward_gpus", None if own else "actor")
            devices = self.blocks["pool:reward_gpus"].devices if own else self.devices
            block.set("dtype", _Name("bf16"), "default")
            if self.rm_path != self.policy_path:
                block.set("retokenize", True, "reward_model.model.input_tokenizer (another model's tokenizer)")
            if cfg.bool("reward_model.use_dynamic_bsz", getattr(self, "critic_dynamic", self.actor_dynamic)):
                block.set("micro_batch_tokens", cfg.int("reward_model.forward_max_token_len_per_gpu", 32768, 1),
                          _source(cfg, "reward_model.use_dynamic_bsz", "reward_model.forward_max_token_len_per_gpu"))
            else:
                block.set("micro_batch", self._micro(block, "reward_model.micro_batch_size_per_gpu",
                                                     "reward_model.micro_batch_size", devices),
                          _source(cfg, "reward_model.micro_batch_size_per_gpu", "reward_model.micro_batch_size"))
            self._remove_padding(block, "reward_model.model.use_remove_padding", False)
            self.blocks["role:rm"] = block
            for key in cfg.given("custom_reward_function.path", "custom_reward_function.name"):
                cfg.raw(key)
                self._note("role:rm", key, "verl scores with the reward model when it is enabled", kind="no effect")
            return
        block = _Block("reward score")
        path = cfg.str("custom_reward_function.path", None)
        name = cfg.str("custom_reward_function.name", "compute_score")
        if path:
            block.set("fn", f"{path}:{name}", _source(cfg, "custom_reward_function.path",
                                                      "custom_reward_function.name"))
        else:
            block.set("fn", "rlgraph.tasks:default_compute_score",
                      "verl's default_compute_score (a rule per data_source)")
            if cfg.has("custom_reward_function.name"):
                self._note("reward:score", "custom_reward_function.name", "no effect without "
                           "custom_reward_function.path", kind="no effect")
        self.blocks["reward:score"] = block

    def _data(self) -> None:
        cfg = self.cfg
        block = _Block("data")
        train = cfg.strs("data.train_files", "~/data/rlhf/gsm8k/train.parquet")
        block.set("train", train[0] if isinstance(train, list) and len(train) == 1 else train,
                  _source(cfg, "data.train_files"))
        val = cfg.strs("data.val_files", "~/data/rlhf/gsm8k/test.parquet")
        block.set("val", val[0] if isinstance(val, list) and len(val) == 1 else val, _source(cfg, "data.val_files"))
        if "fully_async" in self.launch.entry:
            # verl's fully-async trainer does not read train_batch_size (0 in its examples): a step trains on
            # require_batches mini-batches (fully_async_trainer.py: required_samples)
            if cfg.has("data.train_batch_size"):
                self._note("data", "data.train_batch_size", "verl's fully-async trainer does not read it",
                           kind="no effect")
            batches = cfg.int("async_training.require_batches", 1, minimum=1)
            self.batch_size = self.actor_minibatch() * batches
            block.set("batch_size", self.batch_size, _source(cfg, f"{AR}.actor.ppo_mini_batch_size",
                                                             "async_training.require_batches", default="default")
                      + " (fully-async: mini-batch x require_batches)")
        else:
            self.batch_size = cfg.int("data.train_batch_size", 1024, minimum=1)
            block.set("batch_size", self.batch_size, _source(cfg, "data.train_batch_size"))
        block.set("max_prompt_length", cfg.int("data.max_prompt_length", 512, minimum=1),
                  _source(cfg, "data.max_prompt_length"))
        if cfg.has("data.shuffle"):
            block.set("shuffle", cfg.bool("data.shuffle", True), "data.shuffle")
        if cfg.has("data.val_batch_size"):
            block.set("val_batch_size", cfg.int("data.val_batch_size", None, minimum=1), "data.val_batch_size")
        self.blocks["data"] = block

    def _train(self) -> None:
        cfg = self.cfg
        block = _Block("train")
        steps = cfg.int("trainer.total_training_steps", None, minimum=1)
        block.set("steps", steps, _source(cfg, "trainer.total_training_steps"))
        block.set("epochs", cfg.int("trainer.total_epochs", 30, minimum=1), _source(cfg, "trainer.total_epochs"))
        if cfg.has("data.seed"):
            block.set("seed", cfg.int("data.seed", None, minimum=0), "data.seed")
        test = cfg.int("trainer.test_freq", -1)
        block.set("validate_every", max(test, 0) if test is not None else None,
                  _source(cfg, "trainer.test_freq") + (" (-1: 0, at the start and the end)" if test is not None and
                                                       test < 0 else ""))
        save = cfg.int("trainer.save_freq", -1)
        block.set("checkpoint_every", max(save, 0) if save is not None else None,
                  _source(cfg, "trainer.save_freq") + (" (-1: 0, only at the end)" if save is not None and save < 0
                                                       else ""))
        if self.rollout_pool and "one_step_off" in self.launch.entry:
            # one-step-off: the rollout generates step k + 1's batch while the trainer trains step k
            block.set("staleness", 1, "one-step-off main (generation one step ahead of training)")
        keep = cfg.int("trainer.max_actor_ckpt_to_keep", None)
        if keep is not None and keep > 0:
            block.set("keep_checkpoints", keep, "trainer.max_actor_ckpt_to_keep")
        loggers = cfg.raw("trainer.logger", None)
        if loggers is not None:
            names = loggers if isinstance(loggers, list) else [loggers]
            known = [_Name(str(n)) for n in names if str(n) in _LOGGERS]
            if known:
                block.set("loggers", known, "trainer.logger")
            unknown = [str(n) for n in names if str(n) not in _LOGGERS]
            if unknown:
                self._note("train", "trainer.logger", f"rlgraph's loggers are {', '.join(_LOGGERS)}; "
                           f"{', '.join(unknown)} left out", warn=True)
        self.blocks["train"] = block

    # -- the step --

    def _step(self) -> None:
        cfg, a, r = self.cfg, f"{AR}.actor", f"{AR}.rollout"
        s = self.step
        s.append(("sync actor -> rollout", ""))
        s.append(("prompts -> rollout.generate -> responses", ""))
        score = "rm.score" if self.has_rm else "score"
        if self.estimator == "remax":
            s.append(("prompts -> rollout.generate(n = 1, temperature = 0) -> greedy",
                      "algorithm.adv_estimator=remax (the greedy baseline answer)"))
        s.append((f"responses -> {score} -> scores", ""))
        if self.estimator == "remax":
            s.append((f"greedy -> {score} -> greedy_scores", ""))
        s.append((f"responses -> {_call('actor.log_prob', self._log_prob_args())} -> old_log_prob",
                  _source(cfg, f"{r}.log_prob_micro_batch_size_per_gpu", f"{r}.log_prob_micro_batch_size",
                          f"{r}.log_prob_use_dynamic_bsz", f"{r}.log_prob_max_token_len_per_gpu", default="")))
        if self.has_ref:
            s.append(("responses -> ref.log_prob -> ref_log_prob", ""))
        if self.has_critic:
            s.append((f"responses -> {_call('critic.values', self._values_args())} -> values",
                      _source(cfg, "critic.forward_micro_batch_size_per_gpu", "critic.forward_micro_batch_size",
                              "critic.forward_max_token_len_per_gpu", default="")))
        field = "scores"
        shaped = self._overlong()
        if shaped:
            s.append((f"scores -> {_call('overlong_penalty', shaped[0])} -> shaped_scores", shaped[1]))
            field = "shaped_scores"
        if self.kl_in_reward:
            args, source = self._kl_penalty()
            s.append((f"{field}, old_log_prob, ref_log_prob -> {_call('kl_penalty', args)} -> rewards", source))
            field = "rewards"
        else:
            for key in cfg.given("algorithm.kl_penalty", "algorithm.kl_ctrl.kl_coef", "algorithm.kl_ctrl.type",
                                 "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon"):
                cfg.raw(key)
                self._note("step", key, "no effect without algorithm.use_kl_in_reward", kind="no effect")
        self._filter_groups(field)
        s.append(self._estimator(field))
        if self.has_critic:
            s.append((f"values, returns -> {_call('critic.update', self._critic_update_args())}",
                      _source(cfg, "critic.ppo_epochs", "critic.ppo_mini_batch_size", "critic.cliprange_value",
                              "critic.loss_agg_mode", default="")))
        inputs = "old_log_prob, advantages" + (", ref_log_prob" if self.kl_loss else "")
        args = self._actor_update_args()
        s.append((f"{inputs} -> {_call('actor.update', args)}",
                  _source(cfg, f"{a}.clip_ratio", f"{a}.clip_ratio_low", f"{a}.clip_ratio_high", f"{a}.clip_ratio_c",
                          f"{a}.ppo_epochs", f"{a}.ppo_mini_batch_size", f"{a}.loss_agg_mode", f"{a}.use_kl_loss",
                          f"{a}.kl_loss_coef", f"{a}.kl_loss_type", f"{a}.policy_loss.loss_mode", default="")))

    def _log_prob_args(self) -> list[tuple[str, object]]:
        cfg, r = self.cfg, f"{AR}.rollout"
        dynamic = cfg.bool(f"{r}.log_prob_use_dynamic_bsz", self.actor_dynamic)
        self._token_budget_without_dynamic(f"{r}.log_prob_use_dynamic_bsz", f"{r}.log_prob_max_token_len_per_gpu",
                                           dynamic=dynamic)
        if dynamic:
            tokens = cfg.int(f"{r}.log_prob_max_token_len_per_gpu", self.actor_tokens, minimum=1)
            same = self.actor_dynamic and tokens == self.actor_tokens
            return [] if same else [("micro_batch_tokens", tokens)]
        micro = self._micro(None, f"{r}.log_prob_micro_batch_size_per_gpu", f"{r}.log_prob_micro_batch_size",
                            max(self.devices // self.actor_sp, 1))
        return [] if micro is None or micro == self.actor_micro else [("micro_batch", micro)]

    def _values_args(self) -> list[tuple[str, object]]:
        cfg = self.cfg
        if self.critic_dynamic:
            tokens = cfg.int("critic.forward_max_token_len_per_gpu", self.critic_tokens, minimum=1)
            return [] if tokens == self.critic_tokens else [("micro_batch_tokens", tokens)]
        micro = self._micro(None, "critic.forward_micro_batch_size_per_gpu", "critic.forward_micro_batch_size",
                            self.critic_devices)
        return [] if micro is None or micro == self.critic_micro else [("micro_batch", micro)]

    def _overlong(self) -> tuple[list, str] | None:
        cfg = self.cfg
        for prefix in ("reward_model.overlong_buffer", "reward_model.reward_kwargs.overlong_buffer_cfg"):
            if not cfg.has(f"{prefix}.enable") and not cfg.has(f"{prefix}.len"):
                continue
            if not cfg.bool(f"{prefix}.enable", False):
                for key in cfg.given(f"{prefix}.len", f"{prefix}.penalty_factor", f"{prefix}.log"):
                    cfg.raw(key)
                    self._note("step", key, f"{prefix}.enable is False", kind="no effect")
                return None
            buffer = cfg.int(f"{prefix}.len", 1, minimum=1)
            factor = cfg.float(f"{prefix}.penalty_factor", 1.0)
            return [("buffer", buffer), ("penalty_factor", factor)], _source(
                cfg, f"{prefix}.enable", f"{prefix}.len", f"{prefix}.penalty_factor")
        return None

    def _kl_penalty(self) -> tuple[list, str]:
        cfg = self.cfg
        kind = cfg.str("algorithm.kl_penalty", "kl")
        if kind not in _KL_KINDS:
            self._note("step", "algorithm.kl_penalty", "rlgraph's KL estimators are " + ", ".join(_KL_KINDS) +
                       "; imported as kl", warn=True)
            kind = "kl"
        args = [("kind", _Name(kind)), ("coef", cfg.float("algorithm.kl_ctrl.kl_coef", 0.001))]
        if cfg.str("algorithm.kl_ctrl.type", "fixed") == "adaptive":
            args += [("target", cfg.float("algorithm.kl_ctrl.target_kl", 0.1)),
                     ("horizon", cfg.int("algorithm.kl_ctrl.horizon", 10000, minimum=1))]
        else:
            for key in cfg.given("algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon"):
                cfg.raw(key)
                self._note("step", key, "no effect with a fixed KL coefficient", kind="no effect")
        return args, _source(cfg, "algorithm.use_kl_in_reward", "algorithm.kl_penalty", "algorithm.kl_ctrl.type",
                             "algorithm.kl_ctrl.kl_coef", "algorithm.kl_ctrl.target_kl", "algorithm.kl_ctrl.horizon")

    def _filter_groups(self, shaped: str) -> None:
        cfg, f = self.cfg, "algorithm.filter_groups"
        if not cfg.bool(f"{f}.enable", False):
            for key in cfg.given(f"{f}.metric", f"{f}.max_num_gen_batches"):
                cfg.raw(key)
                self._note("step", key, "filter_groups.enable is False", kind="no effect")
            return
        metric = cfg.str(f"{f}.metric", "acc")
        field = "scores" if metric in ("acc", "score") else shaped  # seq_reward: the shaped reward, summed
        rounds = cfg.int(f"{f}.max_num_gen_batches", 0, minimum=0)
        self.step.append((f"{field} -> {_call('filter_groups', [('max_rounds', rounds)])}",
                          _source(cfg, f"{f}.enable", f"{f}.metric", f"{f}.max_num_gen_batches")))

    def _estimator(self, field: str) -> tuple[str, str]:
        cfg, e = self.cfg, self.estimator
        source = _source(cfg, "algorithm.adv_estimator", default="algorithm.adv_estimator=gae (verl's default)")
        if e == "gae":
            args = [("gamma", cfg.float("algorithm.gamma", 1.0)), ("lam", cfg.float("algorithm.lam", 1.0))]
            return (f"{field}, values -> {_call('gae', args)} -> advantages, returns",
                    _source(cfg, "algorithm.adv_estimator", "algorithm.gamma", "algorithm.lam"))
        self._no_effect_for_estimator(("algorithm.lam",) + (() if e == "reinforce_plus_plus" else ("algorithm.gamma",)))
        if e == "grpo":
            norm = cfg.bool("algorithm.norm_adv_by_std_in_grpo", True)
            args = [] if norm else [("norm_by_std", False)]
            return (f"{field} -> {_call('grpo_advantage', args)} -> advantages",
                    _source(cfg, "algorithm.adv_estimator", "algorithm.norm_adv_by_std_in_grpo"))
        if e == "rloo":
            return f"{field} -> rloo_advantage -> advantages", source
        if e == "reinforce_plus_plus":
            args = [("gamma", cfg.float("algorithm.gamma", 1.0))]
            return (f"{field} -> {_call('reinforce_pp_advantage', args)} -> advantages",
                    _source(cfg, "algorithm.adv_estimator", "algorithm.gamma"))
        if e == "reinforce_plus_plus_baseline":
            return f"{field} -> reinforce_pp_baseline_advantage -> advantages", source
        return f"{field}, greedy_scores -> remax_advantage -> advantages", source

    def _no_effect_for_estimator(self, keys: tuple[str, ...]) -> None:
        for key in self.cfg.given(*keys):
            self.cfg.raw(key)
            self._note("step", key, f"no effect with adv_estimator={self.estimator}", kind="no effect")

    def _critic_update_args(self) -> list[tuple[str, object]]:
        cfg, a = self.cfg, f"{AR}.actor"
        epochs = cfg.int("critic.ppo_epochs", self.actor_epochs(), minimum=1)
        minibatch = cfg.int("critic.ppo_mini_batch_size", self.actor_minibatch(), minimum=1)
        agg = cfg.str("critic.loss_agg_mode", self.loss_agg())
        return [("epochs", epochs), ("minibatch", minibatch), ("clip", cfg.float("critic.cliprange_value", 0.5)),
                ("loss_agg", _Name(agg if agg in _LOSS_AGG else "token-mean"))]

    def actor_epochs(self) -> int:
        return self.cfg.int(f"{AR}.actor.ppo_epochs", 1, minimum=1)

    def actor_minibatch(self) -> int:
        return self.cfg.int(f"{AR}.actor.ppo_mini_batch_size", 256, minimum=1)

    def loss_agg(self) -> str:
        agg = self.cfg.str(f"{AR}.actor.loss_agg_mode", "token-mean")
        if agg not in _LOSS_AGG:
            self._note("actor", f"{AR}.actor.loss_agg_mode", "rlgraph's modes are " + ", ".join(_LOSS_AGG) +
                       "; imported as token-mean", warn=True)
            return "token-mean"
        return agg

    def _actor_update_args(self) -> list[tuple[str, object]]:
        cfg, a = self.cfg, f"{AR}.actor"
        clip = cfg.float(f"{a}.clip_ratio", 0.2)
        low = cfg.float(f"{a}.clip_ratio_low", clip)
        high = cfg.float(f"{a}.clip_ratio_high", clip)
        args: list[tuple[str, object]] = [("clip", low)] if low == high else [("clip_low", low), ("clip_high", high)]
        if cfg.has(f"{a}.clip_ratio_c"):
            args.append(("clip_c", cfg.float(f"{a}.clip_ratio_c", 3.0)))
        args += [("epochs", self.actor_epochs()), ("minibatch", self.actor_minibatch()),
                 ("loss_agg", _Name(self.loss_agg()))]
        if self.kl_loss:
            kind = cfg.str(f"{a}.kl_loss_type", "low_var_kl")
            if kind not in _KL_KINDS:
                self._note("actor", f"{a}.kl_loss_type", "rlgraph's KL estimators are " + ", ".join(_KL_KINDS) +
                           "; imported as low_var_kl", warn=True)
                kind = "low_var_kl"
            args += [("kl_coef", cfg.float(f"{a}.kl_loss_coef", 0.001)), ("kl_kind", _Name(kind))]
        else:
            for key in cfg.given(f"{a}.kl_loss_coef", f"{a}.kl_loss_type"):
                cfg.raw(key)
                self._note("actor", key, "use_kl_loss is False", kind="no effect")
        mode = cfg.str(f"{a}.policy_loss.loss_mode", "vanilla")
        if mode in ("gspo", "cispo"):
            args.append(("policy_loss", _Name(mode)))
        elif mode != "vanilla":
            self._note("actor", f"{a}.policy_loss.loss_mode", "rlgraph's built-in policy losses are vanilla, gspo "
                       "and cispo (a `loss` block can add one); imported as vanilla", warn=True)
        return args

    def _on_cpu(self) -> None:
        """trainer.device=cpu: the settings that only help on a GPU, written as a CPU run wants them, each said."""
        for name, block in self.blocks.items():
            if not name.startswith("role:"):
                continue
            kept = []
            for key, value, source in block.entries:
                if key in _GPU_ONLY and _value(value) != _value(_GPU_ONLY[key][0]):
                    cpu_value, why = _GPU_ONLY[key]
                    written = "unset" if cpu_value is None else _value(cpu_value)
                    self.warnings.append(f"trainer.device=cpu: {block.head} {key} = {written}, not {_value(value)} "
                                         f"({source or 'verl'}): {why}")
                    if cpu_value is None:
                        continue
                    value, source = cpu_value, f"trainer.device=cpu (verl: {_value(value)})"
                kept.append((key, value, source))
            block.entries = kept

    # -- what is left --

    def _home(self, key: str) -> str:
        if key.startswith(f"{AR}.model."):
            return "model:policy"
        if key.startswith(f"{AR}.ref."):
            return "role:ref" if self.has_ref else "top"
        if key.startswith(f"{AR}.rollout."):
            return "role:rollout"
        if key.startswith(f"{AR}."):
            return "role:actor"
        if key.startswith("critic."):
            return "role:critic" if self.has_critic else "top"
        if key.startswith(("reward_model.", "custom_reward_function.", "reward_manager.")):
            return "role:rm" if self.has_rm else "reward:score"
        if key.startswith("data."):
            return "data"
        if key.startswith("trainer."):
            return "train"
        if key.startswith("algorithm."):
            return "step"
        return "top"

    def _note(self, home: str, key: str, reason: str, warn: bool = False, kind: str = "not mapped",
              value: str | None = None) -> None:
        self.cfg.used.add(key)
        if home in ("actor", "rollout", "ref", "critic"):
            home = f"role:{home}"
        elif "." in home:
            home = self._home(home + ".x")
        text = value if value is not None else (self.cfg.text(key) if key in self.cfg.values else "")
        line = f"verl: {_short(self.cfg.name(key))}={text} ({kind}: {reason})"
        self.notes.setdefault(home, []).append(line)
        if warn:
            at = f"{where(self.cfg.values[key])}: " if key in self.cfg.values else ""
            verdict = "is not mapped" if kind == "not mapped" else f"has {kind}" if kind == "no effect" else kind
            self.warnings.append(f"{at}{self.cfg.name(key)}={text} {verdict}: {reason}")

    def _named(self) -> str:
        """Every `# verl:` source and note written so far, to find a key that was read but is named nowhere."""
        sources = [source for block in self.blocks.values() for block in [block] + block.nested
                   for _, _, source in block.entries] + [source for _, source in self.step]
        return "\n".join(sources + [line for lines in self.notes.values() for line in lines])

    def _leftovers(self) -> None:
        cfg = self.cfg
        named = self._named()
        for key, setting in cfg.values.items():
            if key in cfg.used:
                short = _short(cfg.name(key))
                if not re.search(rf"(?<![\w.]){re.escape(short)}(?![\w.])", named):
                    # read, and its value is what the spec says by leaving the setting out (lora_rank=0, no
                    # warm-up, filter_groups off, ...): said, so that no key of the launch is silent
                    self._note(self._home(key), key, "read; the spec means the same by leaving it out",
                               kind="as rlgraph")
                continue
            home = self._home(key)
            if key in _SAME and setting.value in _SAME[key]:
                self._note(home, key, "what rlgraph does", kind="as rlgraph")
                continue
            if home == "top" and key.startswith((f"{AR}.ref.", "critic.")):
                self._note(home, key, "this launch has no " + ("reference policy (no KL)" if key.startswith(
                    f"{AR}.ref.") else "critic (adv_estimator is not gae)"), kind="no effect")
                continue
            reason = next((why for pattern, why in _REASONS if re.fullmatch(pattern, key)), "no rlgraph setting")
            self._note(home, key, reason, warn=True)
        for home, lines in self.notes.items():
            if home == "step":
                continue
            block = self.blocks.get(home)
            if block is None:
                self.top_comments += lines
            else:
                block.comments += lines


def home_path(path: str) -> str:
    """`$HOME/...` or `${HOME}/...` (as a key=value file or YAML config leaves it) as `~/...`: the home of
    whoever runs the spec, which rlgraph expands where the run happens."""
    return re.sub(r"^\$(HOME|\{HOME\})(?=/|$)", "~", path)
