"""Spec values -> typed, fully resolved settings (rlgraph.contract.settings), once, at planning.

Every default comes from the spec's schema (the program's values already hold them) and every unit is
converted here: dtypes to torch names, a grad clip of 0 to None, mini-batches from prompts to samples per
replica, `clip` to its low/high sides, the log-prob temperature from the step's rollout. Nothing below
the Plan restates a default.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable

from rlgraph.compiler.graph import CallNode
from rlgraph.contract import settings as s
from rlgraph.contract.methods import call_settings_class
from rlgraph.lang.program import Decl, InvalidValue, Program
from rlgraph.lang.schema import BLOCKS

TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}  # spec name -> torch name


def role_settings(program: Program, role: Decl, root: Decl) -> Any:
    """The settings of `role` (root: the role whose processes it shares, itself if none)."""
    v = role.values
    dtype = TORCH_DTYPES[v["dtype"]]
    if role.kind == "actor":
        return s.ActorSettings(dtype, v["strategy"], v.get("micro_batch"), v.get("micro_batch_tokens"),
                               v["entropy_coeff"], _optim(program, v),
                               gradient_checkpointing=v["gradient_checkpointing"], lora=_lora(v),
                               param_offload=v["param_offload"], optimizer_offload=v["optimizer_offload"],
                               remove_padding=v["remove_padding"])
    if role.kind == "critic":
        return s.CriticSettings(dtype, v["strategy"], v.get("micro_batch"), v.get("micro_batch_tokens"), v["head"],
                                _optim(program, v), gradient_checkpointing=v["gradient_checkpointing"],
                                param_offload=v["param_offload"], optimizer_offload=v["optimizer_offload"],
                                remove_padding=v["remove_padding"])
    if role.kind == "ref":
        # a frozen role is sharded like the trained role it is colocated with (as the memory model counts it)
        trained_root = root is not role and root.kind in ("actor", "critic")
        strategy = root.values["strategy"] if trained_root else "ddp"  # ddp: whole, not sharded
        return s.RefSettings(dtype, strategy, v.get("micro_batch"), v.get("micro_batch_tokens"),
                             param_offload=v["param_offload"], remove_padding=v["remove_padding"])
    if role.kind == "reward_model":
        return s.RewardModelSettings(dtype, v.get("micro_batch"), v.get("micro_batch_tokens"),
                                     v["retokenize"], remove_padding=v["remove_padding"])
    if role.kind == "judge":  # the template's text itself, so plan.json holds what the judge is asked
        from rlgraph.contract.judge import template_text

        base_dir = os.path.dirname(os.path.abspath(program.path))
        return s.JudgeSettings(v["engine"], template_text(v["template"], base_dir), v["parser"], base_dir,
                               v["max_new_tokens"], v["temperature"], v.get("max_sequences"), v["memory_fraction"],
                               dtype, v["max_invalid_fraction"])
    if role.kind == "rollout":
        return s.RolloutSettings(v["engine"], v["n"], v["temperature"], v["top_p"], v["top_k"], v["max_new_tokens"],
                                 v["tp"], v["memory_fraction"], v.get("max_sequences"), dtype, _val(program, v))
    raise ValueError(f"no settings for role kind {role.kind!r}")


def model_settings(model: Decl) -> s.ModelSettings:
    """A model block's settings; InvalidValue where it wrote a value wrongly (reported as `wrong-type`)."""
    v = model.values
    return s.ModelSettings(model.name, **{f.name: v.get(f.name) for f in dataclasses.fields(s.ModelSettings)
                                          if f.name != "name"})


def models_settings(program: Program) -> dict[str, s.ModelSettings | None]:
    """Every model's settings, by name; None for a model with a wrongly written value (reported): a plan step
    that reads it is skipped (`model_of`), as a read of the value itself was."""
    out: dict[str, s.ModelSettings | None] = {}
    for name, decl in program.models.items():
        try:
            out[name] = model_settings(decl)
        except InvalidValue:
            out[name] = None
    return out


def model_of_settings(models: dict[str, s.ModelSettings | None], name: str | None) -> s.ModelSettings | None:
    """The settings of model `name`; None when it is not declared (or no name); InvalidValue when its block has
    a wrong value (reported): the step that needs the model is skipped, not computed without it."""
    if name is None or name not in models:
        return None
    if models[name] is None:
        raise InvalidValue(name)
    return models[name]


def pool_settings(pool: Decl) -> s.PoolSettings:
    """A pool block's settings; InvalidValue where it wrote a value wrongly (reported as `wrong-type`)."""
    v = pool.values
    return s.PoolSettings(pool.name, v.get("nodes"), v.get("devices_per_node"), v["device"], v.get("memory"))


def _optim(program: Program, values: dict[str, Any]) -> s.OptimSettings:
    o = values["optim"]
    ratio = o["warmup_ratio"]
    steps = planned_steps(program)
    # verl: int(lr_warmup_steps_ratio x total_training_steps); with train.epochs the run fills it in
    warmup = int(ratio * steps) if ratio is not None and steps is not None else o["warmup_steps"]
    return s.OptimSettings(o["lr"], tuple(o["betas"]), o["weight_decay"], warmup, ratio, o["grad_clip"] or None,
                           o["schedule"], o["min_lr_ratio"], steps if o["schedule"] == "cosine" else None)


def planned_steps(program: Program) -> int | None:
    """train.steps, or None when train.epochs stands instead (the run counts the steps from the data)."""
    train = program.train
    if train is None:
        return BLOCKS["train"].keys["steps"].default
    if train.get("epochs") is not None and not train.is_set("steps"):
        return None
    return train["steps"]


def _val(program: Program, v: dict[str, Any]) -> s.ValSettings:
    """The rollout's `val { ... }` with train.val_samples folded in (the compiler rejects both at once)."""
    val = v["val"]
    samples = program.train["val_samples"] if program.train is not None else \
        BLOCKS["train"].keys["val_samples"].default
    n = val["n"] if val.get("n") is not None else samples
    temperature = val["temperature"] if val.get("temperature") is not None else 0.0 if n == 1 else v["temperature"]
    return s.ValSettings(n, temperature, val["top_p"] if val.get("top_p") is not None else v["top_p"],
                         val["top_k"] if val.get("top_k") is not None else v["top_k"])


def _lora(values: dict[str, Any]) -> s.LoraSettings | None:
    lora = values["lora"]
    if not lora["rank"]:  # rank 0: full fine-tuning
        return None
    targets = lora["target_modules"]
    return s.LoraSettings(lora["rank"], float(lora["alpha"]), lora["dropout"],
                          targets if isinstance(targets, str) else tuple(targets))


def call_settings(call: CallNode, roles: dict[str, Any], replicas: dict[str, int], rollout: Any | None,
                  envs: dict[str, s.EnvSettings], producer: Callable[[str], CallNode | None] = lambda _: None) -> Any:
    """The settings of one call of the step. `roles`: role name -> its settings; `rollout`: the settings of
    the step's trained generate call (`generate_settings`; None in a spec without one, which has errors anyway);
    `envs`: the declared environments (`env_settings`); `producer`: the call that writes a field (the graph's)."""
    kw = call.kwargs
    cls = call_settings_class(call.kind, call.target, call.role_kind, call.method)
    if cls is s.OverlongPenaltySettings:  # the length it penalises towards is the trained generate's
        if rollout is None:  # no trained generate call, or its settings did not resolve: errors reported
            return None
        return s.OverlongPenaltySettings(kw["buffer"], kw["penalty_factor"], rollout.max_new_tokens)
    if cls is s.UserFunctionSettings:  # a declared transform; its args with the call's overrides
        return user_function_settings(call.user, kw)
    if call.kind != "role" or cls is s.NoSettings:
        return cls(**{name: kw[name] for name in cls.__dataclass_fields__})
    n = rollout.n if rollout is not None else 1
    # log pi of what was sampled: at the sampling temperature; a greedy rollout's tokens are scored at T = 1
    temperature = rollout.temperature if rollout is not None and rollout.temperature > 0 else 1.0
    role = roles.get(call.target)
    micro_batch = getattr(role, "micro_batch", None)
    micro_batch_tokens = getattr(role, "micro_batch_tokens", None)
    if kw.get("micro_batch") is not None or kw.get("micro_batch_tokens") is not None:
        # a forward call's own micro-batch (`ref.log_prob(micro_batch = 8)`) replaces the role's, of either kind
        micro_batch, micro_batch_tokens = kw.get("micro_batch"), kw.get("micro_batch_tokens")
    if cls is s.GenerateSettings:
        return generate_settings(call, role, envs)
    if cls is s.LogProbSettings:
        return s.LogProbSettings(temperature, micro_batch, micro_batch_tokens)
    if cls is s.ForwardSettings:
        return s.ForwardSettings(micro_batch, micro_batch_tokens)
    if cls is s.TopKSettings:
        return s.TopKSettings(kw.get("k"), kw["temperature"], micro_batch, micro_batch_tokens)
    # mini-batches are written in prompts (verl's ppo_mini_batch_size): samples = prompts x n, per replica
    minibatch = kw.get("minibatch")
    mini_batch_size = max(minibatch * n // replicas.get(call.target, 1), 1) if minibatch else None
    if cls is s.ActorUpdateSettings:
        clip = kw["clip"]
        return s.ActorUpdateSettings(
            epochs=kw["epochs"], minibatch=minibatch, mini_batch_size=mini_batch_size, micro_batch=micro_batch,
            micro_batch_tokens=micro_batch_tokens, loss_agg=kw["loss_agg"],
            clip_low=kw["clip_low"] if kw.get("clip_low") is not None else clip,
            clip_high=kw["clip_high"] if kw.get("clip_high") is not None else clip,
            clip_c=kw["clip_c"], kl_coef=kw["kl_coef"] or 0.0, kl_kind=kw["kl_kind"], policy_loss=kw["policy_loss"],
            entropy_coeff=getattr(role, "entropy_coeff", 0.0), temperature=temperature, tis=kw["tis"],
            tis_cap=kw["tis_cap"],
            user_loss=user_function_settings(call.user, call.user.args) if call.user is not None else None)
    if cls is s.ActorDistillSettings:  # the student's distribution at the temperature of the teacher's
        teacher = producer(call.input("teacher_top_k") or "")
        return s.ActorDistillSettings(kw["epochs"], minibatch, mini_batch_size, micro_batch, micro_batch_tokens,
                                      kw["loss_agg"], kw["beta"], teacher.kwargs["temperature"] if teacher else 1.0)
    if cls is s.SftSettings:  # a demonstration is one sample: minibatch counts rows, not prompts x n
        sft_mini = max(minibatch // replicas.get(call.target, 1), 1) if minibatch else None
        return s.SftSettings(kw["epochs"], minibatch, sft_mini, micro_batch, micro_batch_tokens, kw["loss_agg"])
    if cls is s.CriticUpdateSettings:
        return s.CriticUpdateSettings(kw["epochs"], minibatch, mini_batch_size, micro_batch, micro_batch_tokens,
                                      kw["loss_agg"], kw["clip"])
    raise ValueError(f"no settings resolution for {call.label}")


def user_function_settings(function: Any, args: dict[str, Any]) -> s.UserFunctionSettings:
    """A declared transform or loss (rlgraph.compiler.builtins.UserFunction), called with `args`."""
    return s.UserFunctionSettings(function.name, function.fn, function.base_dir,
                                  f"{function.span.file}:{function.span.line}", tuple(function.inputs),
                                  tuple(function.outputs), dict(args))


def generate_settings(call: CallNode, role: s.RolloutSettings | None,
                      envs: dict[str, s.EnvSettings]) -> s.GenerateSettings | None:
    """A generate call's sampling: its own `n` and `temperature` where it gives them, else its rollout's; and the
    environment it runs episodes with (`env = NAME`), if any. None when its rollout's settings or its
    environment's did not resolve, or it names no declared environment: each an error the compiler reported."""
    kw = call.kwargs
    if role is None or (kw.get("env") is not None and kw["env"] not in envs):
        return None
    n = kw["n"] if kw.get("n") is not None else role.n
    temperature = kw["temperature"] if kw.get("temperature") is not None else role.temperature
    env = envs[kw["env"]] if kw.get("env") is not None else None
    return s.GenerateSettings(n, temperature, role.top_p, role.top_k, role.max_new_tokens,
                              keep_log_probs=len(call.outputs) > 1, env=env)


def env_settings(program: Program, env: Decl) -> s.EnvSettings:
    """An `env NAME { ... }` block; its class is looked for in the spec's folder too, as a reward's function is."""
    v = env.values
    return s.EnvSettings(env.name, v["class"], os.path.dirname(os.path.abspath(program.path)),
                         f"{env.span.file}:{env.span.line}", dict(v.get("args") or {}), v["max_turns"],
                         v["max_observation_tokens"], float(v["timeout_s"]), v["workers"], v["max_failed_fraction"],
                         v["tool_format"])


def data_settings(program: Program) -> s.DataSettings | None:
    if program.data is None:
        return None
    v = program.data.values
    return s.DataSettings(tuple(v["train"]), tuple(v["val"]) if v.get("val") else None, v["batch_size"],
                          v["max_prompt_length"], v["shuffle"], v["val_batch_size"], v["max_response_length"])


def reward_settings(values: dict[str, Any]) -> s.RewardSettings:
    return s.RewardSettings(values["max_invalid_fraction"], values["timeout_s"], values["batched"], values["workers"],
                            values.get("url"), values["rows_per_request"], values["concurrency"], values["retries"],
                            values["backoff_s"])


def train_settings(program: Program) -> s.TrainSettings:
    values = program.train.values if program.train is not None else \
        {name: key.default for name, key in BLOCKS["train"].keys.items()}
    steps = planned_steps(program)
    return s.TrainSettings(steps, values["epochs"] if steps is None else None, values["seed"],
                           values["validate_every"],
                           values["checkpoint_every"], values["keep_checkpoints"], values["deterministic"],
                           values["max_failures"], values["samples_every"], values["staleness"],
                           tuple(values["loggers"]))
