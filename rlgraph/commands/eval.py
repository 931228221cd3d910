"""`rlgraph eval MODEL`: score a model on prompts with a rule reward, greedy and sampled, without Ray.

MODEL is a Hugging Face model folder (one `rlgraph export` wrote), a run directory (the actor of its newest
checkpoint), a checkpoint or a role's folder in one, or a built-in model (`builtin:arith-gpt`). LoRA adapters
are merged into their base first, as `rlgraph export` merges them.

The prompts, the reward and how to generate come from a spec (`--spec FILE.rl`, or a saved plan.json): its
`data.val`, the reward its validation scores with, its data.max_prompt_length and val_batch_size, and the
rollout's engine, max_new_tokens, max_sequences and `val { ... }` sampling. A checkpoint brings the plan it was
trained with, so `rlgraph eval runs/NAME` needs nothing else. Without either, give `--data` and `--reward`; the
rest takes the spec language's defaults. Flags override what the spec says.

The engine runs in this process (rlgraph/runtime/evaluate.py), so there is no cluster to start.

Exit codes: 0 scored, 1 the input is wrong or a step failed (the message says why), 2 usage error.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2


class EvalInputError(Exception):
    """What is wrong with the command's input, said for the user."""


def eval_command(source: str, *, spec: str | None = None, overrides: list[str] = (), data: list[str] = (),
                 reward: str | None = None, role: str | None = None, n: int | None = None,
                 temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                 max_new_tokens: int | None = None, max_prompt_length: int | None = None,
                 batch_size: int | None = None, engine: str | None = None, device: str | None = None,
                 seed: int | None = None, ks: list[int] = (), pass_score: float = 1.0,
                 output: str | None = None) -> int:
    from rlgraph.runtime.errors import RunError

    console, errors = Console(), Console(stderr=True)
    try:
        _check_flags(n=n, temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens,
                     max_prompt_length=max_prompt_length, batch_size=batch_size, ks=ks, output=output)
        with tempfile.TemporaryDirectory(prefix="rlgraph-eval-") as scratch:
            folder, trained_with, what = model_source(source, role, Path(scratch))
            plan = load_plan(spec, overrides, trained_with)
            settings = eval_settings(plan, data=data, reward=reward, n=n, temperature=temperature, top_p=top_p,
                                     top_k=top_k, max_new_tokens=max_new_tokens,
                                     max_prompt_length=max_prompt_length, batch_size=batch_size, engine=engine,
                                     device=device, seed=seed, ks=ks, pass_score=pass_score)
            from rlgraph.runtime.evaluate import evaluate

            if settings.engine == "vllm":  # its INFO lines (and warnings of its own) are not the user's table
                os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            console.print(f"[bold]rlgraph eval[/] {escape(what)}", highlight=False)
            result = evaluate(folder, settings, log=lambda line: console.print(escape(line), highlight=False))
    except (EvalInputError, RunError) as err:
        errors.print(f"[bold red]error[/]: {escape(str(err))}", highlight=False, soft_wrap=True)
        return EXIT_ERRORS
    report = {"model": what, "folder": folder if not folder.startswith(scratch) else None,
              "spec": plan.spec if plan is not None else None, "data": list(settings.data),
              "reward": settings.reward_fn, "engine": settings.engine, "prompts": result.prompts,
              "filtered": result.filtered, "metrics": result.metrics, "settings": _settings_json(settings),
              "seconds": result.seconds, "rows": result.rows}
    console.print(_table(report))
    if output:
        Path(output).write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n")
        console.print(f"result: {escape(output)}", highlight=False)
    return EXIT_OK


def _check_flags(*, n, temperature, top_p, top_k, max_new_tokens, max_prompt_length, batch_size, ks, output) -> None:
    """The flags' own limits, before anything loads (the spec's values were checked by its compiler)."""
    at_least_one = {"--n": n, "--max-new-tokens": max_new_tokens, "--max-prompt-length": max_prompt_length,
                    "--batch-size": batch_size, **{"--k": k for k in ks}}
    for flag, value in at_least_one.items():
        if value is not None and value < 1:
            raise EvalInputError(f"{flag} must be at least 1, got {value}")
    if temperature is not None and temperature < 0:
        raise EvalInputError(f"--temperature must be 0 (greedy) or more, got {temperature}")
    if top_p is not None and not 0 < top_p <= 1:
        raise EvalInputError(f"--top-p must be in (0, 1], got {top_p}")
    if top_k is not None and top_k < 0:
        raise EvalInputError(f"--top-k must be 0 (all tokens) or more, got {top_k}")
    if output is not None and not Path(output).resolve().parent.is_dir():
        raise EvalInputError(f"-o {output}: the folder {Path(output).resolve().parent} does not exist")


# --- what to evaluate ---


def model_source(source: str, role: str | None, scratch: Path) -> tuple[str, Path | None, str]:
    """(the model folder to load, the plan.json of the checkpoint it comes from or None, how to name it)."""
    from rlgraph.runtime.export import ExportError, export, role_folder
    from rlgraph.models import resolve_model_path
    from rlgraph.workers import lora

    if source.startswith("builtin:"):
        try:
            return resolve_model_path(source), None, source
        except Exception as err:  # an unknown built-in, or one whose build failed
            raise EvalInputError(str(err)) from None
    try:
        folder, what = role_folder(Path(source), role)  # a run directory, a checkpoint or a model folder
    except ExportError as err:
        raise EvalInputError(str(err).replace("to export", "to evaluate")) from None
    checkpoint = folder.parent
    trained_with = checkpoint / "plan.json" if (checkpoint / "trainer_state.pt").is_file() else None
    if lora.is_adapter_folder(folder):  # adapters: merged into their base, as `rlgraph export` merges them
        merged = scratch / "merged"
        try:
            export(folder, merged)
        except ExportError as err:
            raise EvalInputError(f"{err} (`rlgraph export --base` merges adapters whose base has moved; "
                                 "evaluate its output)") from None
        return str(merged), trained_with, what
    return str(folder), trained_with, what


def load_plan(spec: str | None, overrides: list[str], trained_with: Path | None):
    """The Plan to take data, reward and generation settings from: `spec` (a .rl file or a plan.json), else
    the plan the checkpoint was trained with; None without either."""
    if spec is None:
        if overrides:
            raise EvalInputError("-s overrides change a spec: give it with --spec FILE")
        if trained_with is None or not trained_with.is_file():
            return None
        spec = str(trained_with)
    if not Path(spec).is_file():
        raise EvalInputError(f"--spec {spec} is not a file")
    from rlgraph.plan.model import Plan

    if spec.endswith(".json"):
        if overrides:
            raise EvalInputError(f"{spec} is a saved plan: it is used as it is, without -s overrides")
        from rlgraph.contract.settings import SettingsError

        try:
            return Plan.from_json(Path(spec).read_text())
        except (ValueError, KeyError, TypeError, SettingsError) as err:
            raise EvalInputError(f"{spec} is not a plan this rlgraph can read: {err}") from None
    from rlgraph.compiler import compile_spec
    from rlgraph.diagnostics import has_errors, render_full
    from rlgraph.plan.build import plan_spec

    compilation = compile_spec(spec, list(overrides))
    plan, diagnostics = plan_spec(compilation)
    if has_errors(diagnostics) or not compilation.ok:
        sys.stderr.write(render_full(diagnostics, compilation.sources))
        raise EvalInputError(f"{spec} has errors (above); `rlgraph check {spec}` shows them too")
    return plan


def eval_settings(plan, *, data: list[str], reward: str | None, n: int | None, temperature: float | None,
                  top_p: float | None, top_k: int | None, max_new_tokens: int | None,
                  max_prompt_length: int | None, batch_size: int | None, engine: str | None, device: str | None,
                  seed: int | None, ks: list[int], pass_score: float):
    """EvalSettings read off `plan` as the run's validation reads them (or the spec language's defaults without
    one), with the flags given over them."""
    from rlgraph.contract import settings as s
    from rlgraph.lang.schema import BLOCKS, ROLE_KEYS
    from rlgraph.runtime.evaluate import EvalSettings

    def default(keys: dict, name: str) -> Any:
        return keys[name].default

    rollout_keys, data_keys = ROLE_KEYS["rollout"], BLOCKS["data"].keys
    from rlgraph.plan.resolve import TORCH_DTYPES, reward_settings

    # a reward given as --reward has the guards a spec's reward block has when it sets none
    reward_defaults = reward_settings({name: key.default for name, key in BLOCKS["reward"].keys.items()})
    if plan is None:
        if not data or not reward:
            raise EvalInputError("say what to evaluate on: --data FILE and --reward module:function, or --spec "
                                 "FILE.rl to take them (and how to generate) from a spec")
        val = s.ValSettings(1, 0.0, default(rollout_keys, "top_p"), default(rollout_keys, "top_k"))
        sampled_temperature = default(rollout_keys, "temperature")
        generate = s.GenerateSettings(1, 0.0, val.top_p, val.top_k, default(rollout_keys, "max_new_tokens"),
                                      keep_log_probs=False, env=None)
        base = EvalSettings(data=(), reward_name=reward, reward_fn=reward, reward=reward_defaults, plan=None,
                            max_prompt_length=default(data_keys, "max_prompt_length"),
                            batch_size=default(data_keys, "val_batch_size"), generate=generate, val=val,
                            engine=default(rollout_keys, "engine"),
                            dtype=TORCH_DTYPES[default(rollout_keys, "dtype")], device=None,
                            memory_fraction=default(rollout_keys, "memory_fraction"),
                            max_sequences=default(rollout_keys, "max_sequences"),
                            seed=default(BLOCKS["train"].keys, "seed"))
    else:
        base, sampled_temperature = _from_plan(plan, reward_defaults)
        if not data and not base.data:
            raise EvalInputError(f"{plan.spec} has no data.val: give the prompts with --data FILE")
        if reward is None and not base.reward_name:
            raise EvalInputError(f"{plan.spec} has no rule reward that validation scores with: give --reward "
                                 "module:function")
    if reward is not None and reward != base.reward_fn:
        base = replace(base, reward_name=reward, reward_fn=reward, reward=reward_defaults)
    n = base.val.n if n is None else n
    if temperature is None:
        temperature = base.val.temperature if n == base.val.n else 0.0 if n == 1 else sampled_temperature
    val = s.ValSettings(n, temperature, base.val.top_p if top_p is None else top_p,
                        base.val.top_k if top_k is None else top_k)
    generate = base.generate if max_new_tokens is None else replace(base.generate, max_new_tokens=max_new_tokens)
    return replace(base, data=tuple(data) or base.data, val=val, generate=generate,
                   max_prompt_length=base.max_prompt_length if max_prompt_length is None else max_prompt_length,
                   batch_size=batch_size or base.batch_size, engine=engine or base.engine,
                   device=device or base.device, seed=base.seed if seed is None else seed, ks=tuple(ks),
                   pass_score=pass_score)


def _from_plan(plan, reward_defaults) -> tuple[Any, float]:
    """(EvalSettings of the plan's validation, the temperature of sampled answers when --n asks for some)."""
    from rlgraph.contract.rollouts import sft_call
    from rlgraph.runtime.evaluate import EvalSettings, validation_reward
    from rlgraph.runtime.roles import ALIAS, generate_call, worker_specs

    call = generate_call(plan)
    if call is None and sft_call(plan.calls) is not None:
        return _from_supervised_plan(plan, reward_defaults)
    if call is None:
        raise EvalInputError(f"{plan.spec}: the step never generates, so there is no rollout to evaluate like")
    rollout = plan.role(call.target)
    # the role whose weights generate: a rollout colocated with its policy samples with that module in place
    spec = worker_specs(plan, {})[rollout.name]
    generating = plan.role(spec.alias_of) if spec.worker == ALIAS else rollout
    pools = {p.name: p.device for p in plan.pools}
    device = next((pools[p.pool] for p in plan.placements_of(generating.name)), "cpu")
    name = validation_reward(plan)
    settings = EvalSettings(
        data=tuple(plan.data.val or ()), reward_name=name or "", reward_fn=plan.rewards.get(name) if name else None,
        reward=plan.reward_settings.get(name, reward_defaults) if name else reward_defaults,
        plan=plan, max_prompt_length=plan.data.max_prompt_length,
        batch_size=plan.data.val_batch_size, generate=call.settings, val=rollout.settings.val,
        engine=rollout.settings.engine, dtype=generating.settings.dtype, device="cuda" if device == "gpu" else "cpu",
        memory_fraction=rollout.settings.memory_fraction, max_sequences=rollout.settings.max_sequences,
        seed=plan.train.seed)
    val = rollout.settings.val
    return settings, val.temperature if val.n > 1 else rollout.settings.temperature


def _from_supervised_plan(plan, reward_defaults) -> tuple[Any, float]:
    """An SFT run's validation (loop.Trainer.validate_demonstrations): the actor's greedy answers through its HF
    engine, at most data.max_response_length tokens. Sampled answers (--n) at temperature 1."""
    from rlgraph.contract import settings as s
    from rlgraph.contract.rollouts import sft_call
    from rlgraph.lang.schema import ROLE_KEYS
    from rlgraph.runtime.evaluate import EvalSettings, demonstration_answers, validation_reward

    actor = plan.role(sft_call(plan.calls).target)
    pools = {p.name: p.device for p in plan.pools}
    device = next((pools[p.pool] for p in plan.placements_of(actor.name)), "cpu")
    name = validation_reward(plan)
    answers = demonstration_answers(plan.data.max_response_length)
    settings = EvalSettings(
        data=tuple(plan.data.val or ()), reward_name=name or "", reward_fn=plan.rewards.get(name) if name else None,
        reward=plan.reward_settings.get(name, reward_defaults) if name else reward_defaults,
        plan=plan, max_prompt_length=plan.data.max_prompt_length, batch_size=plan.data.val_batch_size,
        generate=answers, val=s.ValSettings(1, 0.0, answers.top_p, answers.top_k), engine="hf",
        dtype=actor.settings.dtype, device="cuda" if device == "gpu" else "cpu",
        memory_fraction=ROLE_KEYS["rollout"]["memory_fraction"].default,
        max_sequences=ROLE_KEYS["rollout"]["max_sequences"].default, seed=plan.train.seed)
    return settings, 1.0


# --- the report ---


def _settings_json(settings) -> dict[str, Any]:
    generate = settings.generate
    return {"n": settings.val.n, "temperature": settings.val.temperature, "top_p": settings.val.top_p,
            "top_k": settings.val.top_k, "max_new_tokens": generate.max_new_tokens,
            "max_sequences": settings.max_sequences, "env": generate.env.name if generate.env else None,
            "max_prompt_length": settings.max_prompt_length, "batch_size": settings.batch_size,
            "dtype": settings.dtype, "device": settings.device, "seed": settings.seed,
            "pass_score": settings.pass_score, "reward_guards": asdict(settings.reward)}


def _table(report: dict[str, Any]) -> Table:
    settings = report["settings"]
    sampling = "greedy" if settings["n"] == 1 and settings["temperature"] == 0 else \
        f"n = {settings['n']}, temperature = {settings['temperature']}"
    table = Table(title=f"rlgraph eval: {report['model']}", title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in report["metrics"].items():
        table.add_row(key, f"{value:.4f}")
    table.add_section()
    for key, value in (("prompts", f"{report['prompts']} of {', '.join(report['data'])}"),
                       ("reward", str(report["reward"] or report["settings"]["reward_guards"].get("url"))),
                       ("generation", f"{report['engine']} engine on {settings['device'] or 'the default device'}, "
                                      f"{settings['dtype']}, {sampling}, max_new_tokens = {settings['max_new_tokens']}"),
                       ("time", f"{report['seconds']['total']:.1f} s")):
        table.add_row(key, value)
    return table
