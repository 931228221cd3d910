"""Pre-flight: everything that can fail before a worker starts, checked before Ray starts (`check`) or
while it starts (`prepare`: the tokenizer and the tokenized prompts).

A model path that does not resolve, a data file that does not load (DataError names the file and
row), a reward function that does not import, a feature the runtime does not have yet: each is a
`PreflightError` with a one-paragraph message. What passes is handed to the run (`Prepared`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlgraph.plan.model import Plan
from rlgraph.runtime.errors import PreflightError
from rlgraph.runtime.import_probe import probe_user_code
from rlgraph.contract.methods import WORKERS
from rlgraph.contract.rollouts import reads_demonstrations, sft_call
from rlgraph.runtime.roles import ALIAS, generate_call, worker_specs

# Any one of these makes a folder's tokenizer loadable (tokenizer_config.json alone names a class whose
# vocabulary files are among the others); tiktoken files end in .tiktoken
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json", "vocab.json", "vocab.txt",
                   "spiece.model", "sentencepiece.bpe.model")
ROUND_TRIP_ROWS = 8  # the first rows of data.train whose prompt and ground truth must decode to what was encoded


@dataclass
class Prepared:
    model_paths: dict[str, str]  # role -> resolved local folder
    tokenizer: Any
    train: Any  # RLDataset
    val: Any | None  # RLDataset
    rewards: dict[str, Any]  # reward name -> RuleReward, or RewardService
    notes: list[str] = field(default_factory=list)  # things worth a line on the console
    warnings: list[str] = field(default_factory=list)  # likely mistakes: on the console and in history.jsonl


@dataclass
class Checked:
    """What pre-flight's first part found, before Ray starts; `prepare` goes on from it."""

    model_paths: dict[str, str]
    rows: dict[str, list[dict[str, Any]]]  # "train" / "val" -> every row, checked


def preflight(plan: Plan, *, starting_locally: bool) -> Prepared:
    return prepare(plan, check(plan, starting_locally=starting_locally))


def check(plan: Plan, *, starting_locally: bool) -> Checked:
    """What fails most often, and fast (neither torch nor transformers imported): the runtime supports the plan,
    loggers import, models resolve, every data row is well formed. `run_plan` does this before it starts Ray,
    so these errors come at once."""
    _check_supported(plan, starting_locally)
    _check_loggers(plan)
    model_paths = _resolve_models(plan)
    rows = {split: _rows(plan, split) for split in ("train", "val") if getattr(plan.data, split)}
    return Checked(model_paths, rows)


def prepare(plan: Plan, checked: Checked) -> Prepared:
    """The rest: rewards and user functions import (with torch), the tokenizer loads (transformers), the
    environments talk through it, the prompts are tokenized and filtered by length. `run_plan` does this in a
    thread while Ray starts."""
    probe_user_code(plan)  # first in a child with a deadline: a module that exits or hangs at import is named
    rewards = _load_rewards(plan)
    _check_user_functions(plan)
    _check_judge_parsers(plan)
    tokenizer = _tokenizer(plan, checked.model_paths)
    tools = _check_envs(plan, tokenizer)
    notes = _stage_notes(plan, checked.model_paths)
    train = _dataset(plan, "train", checked.rows["train"], tokenizer, notes, tools)
    val = _dataset(plan, "val", checked.rows["val"], tokenizer, notes, tools) if "val" in checked.rows else None
    batch_size = plan.data.batch_size
    if len(train) < batch_size:
        raise PreflightError(
            f"data.train has {len(train)} usable prompts, fewer than one batch of data.batch_size = {batch_size}; "
            "lower the batch size, raise data.max_prompt_length, or add prompts."
        )
    generate = generate_call(plan)  # a multi-turn reward reads the tags too
    multi_turn = generate is not None and getattr(generate.settings, "env", None) is not None
    warnings = round_trip_warnings(tokenizer, checked.rows["train"][:ROUND_TRIP_ROWS], "data.train",
                                   skip_special_tokens=not multi_turn)
    return Prepared(checked.model_paths, tokenizer, train, val, rewards, notes, warnings)


def _check_supported(plan: Plan, starting_locally: bool) -> None:
    if not plan.ok:
        raise PreflightError("the plan has errors; run `rlgraph check` on the spec to see them")
    for role in plan.roles:
        if role.kind not in WORKERS:
            raise PreflightError(f"role `{role.name}` is a {role.kind}; this runtime runs {', '.join(WORKERS)} roles.")
    generates = [c for c in plan.calls if c.kind == "role" and c.method == "generate"]
    if not generates and sft_call(plan.calls) is None:
        raise PreflightError("the step never generates: it has no `generate` call (nor trains on demonstrations, "
                             "`demos -> actor.sft`)")
    # A plan.json is run without the compiler's checks: the engine's own capabilities decide.
    from rlgraph.contract.engines import ENGINES, max_tp_on

    device_of = {p.name: p.device for p in plan.pools}
    for role in plan.roles:
        if role.kind not in ("rollout", "judge"):  # the roles that generate, each with an engine
            continue
        facts = ENGINES.get(role.settings.engine)
        if facts is None:
            raise PreflightError(f"role `{role.name}` uses engine = {role.settings.engine}; this runtime implements "
                                 f"{', '.join(sorted(ENGINES))} (code engine-not-implemented)")
        if facts.package is not None:  # an engine with nothing of its own to install is not imported here
            from rlgraph.workers.engines import engine_class

            try:
                engine_class(role.settings.engine).check_installed()
            except ImportError as err:
                raise PreflightError(f"role `{role.name}`: {err}") from None
        device = next((device_of[p.pool] for p in plan.placements_of(role.name)), "cpu")
        max_tp = max_tp_on(facts, device)
        if role.tp > max_tp:
            raise PreflightError(f"role `{role.name}` has tp = {role.tp}; the {role.settings.engine} engine runs at "
                                 f"most {max_tp} device(s) per replica on {device} pools (code tp-not-implemented)")
    if starting_locally:
        gpus = sum(p.nodes * p.devices_per_node for p in plan.pools if p.device == "gpu"
                   and any(pl.pool == p.name for pl in plan.placements))
        if gpus:
            import torch

            have = torch.cuda.device_count()
            if have < gpus:
                raise PreflightError(
                    f"the spec's gpu pools need {gpus} GPU(s) and this machine has {have}; point --address "
                    "(or RAY_ADDRESS) at a cluster that has them, or use `device = cpu` pools."
                )
            if len({p.nodes for p in plan.pools if p.device == "gpu"} - {1}):
                raise PreflightError("a local run has one node: give every pool `nodes = 1`, or use --address")


def _check_loggers(plan: Plan) -> None:
    from rlgraph.runtime.loggers import missing_packages

    problems = missing_packages(plan.train.loggers)
    if problems:
        raise PreflightError("; ".join(problems))


def _stage_notes(plan: Plan, model_paths: dict[str, str]) -> list[str]:
    """Which checkpoint each stage path (`run:...`) resolved to: the newest when the run started, so a resume
    after the earlier stage trained on starts its frozen roles from that newer one."""
    from rlgraph.contract.stages import is_stage

    stages = {(path, model_paths[role.name]) for role in plan.roles
              if role.name in model_paths and is_stage(path := _model_path_of(plan, role.name) or "")}
    return [f"{path} is {folder} (the newest checkpoint of that run)" for path, folder in sorted(stages)]


def _model_path_of(plan: Plan, role_name: str) -> str | None:
    role = plan.role(role_name)
    if role.model_path:
        return role.model_path
    if role.colocate:
        return _model_path_of(plan, role.colocate)
    return None


def _resolve_models(plan: Plan) -> dict[str, str]:
    from rlgraph.models import resolve_model_path

    resolved: dict[str, str] = {}
    by_path: dict[str, str] = {}
    for role in plan.roles:
        path = _model_path_of(plan, role.name)
        if path is None:
            continue
        if path not in by_path:
            model = f"model `{role.model}`" if role.model else f"the model of role `{role.name}`"
            try:
                by_path[path] = str(resolve_model_path(path))
            except Exception as err:  # ModelNotFoundError, or a built-in whose build failed
                raise PreflightError(f"{model} (path = {path!r}): {err}") from None
            _check_tokenizer_files(model, path, by_path[path])
        resolved[role.name] = by_path[path]
    specs = worker_specs(plan, resolved)
    for name, spec in specs.items():
        if spec.worker != ALIAS and name not in resolved:
            raise PreflightError(f"role `{name}` has no model to load; give it `model = NAME`")
    return resolved


def _check_tokenizer_files(model: str, path: str, folder: str) -> None:
    names = os.listdir(folder)
    if any(name in TOKENIZER_FILES or name.endswith(".tiktoken") for name in names):
        return
    raise PreflightError(
        f"{model} (path = {path!r}): the folder {folder} has no tokenizer files. Add the tokenizer the model "
        "was trained with: tokenizer.json (a fast tokenizer) or tokenizer.model (sentencepiece), with its "
        f"tokenizer_config.json; `tokenizer.save_pretrained({folder!r})` writes them."
    )


def _check_envs(plan: Plan, tokenizer: Any) -> list[dict[str, Any]]:
    """Every environment a generate call uses imports, keeps the interface and can talk through the policy's
    tokenizer in its tool format (a `tag` format needs its tags as single tokens). Returns the tool schemas the
    chat template renders into the prompts: the trained generate's environment's, in the chat_template format
    (the prompts are tokenized once, for the step's generate; the tag format's tools are the data's to describe)."""
    from rlgraph.workers.envs.loading import EnvError, load_env_class
    from rlgraph.workers.envs.tools import ToolFormatError, make_tool_format

    rendered: list[dict[str, Any]] = []
    trained = generate_call(plan)
    for call in plan.calls:
        env = getattr(call.settings, "env", None)
        if env is None:
            continue
        try:
            tools = list(getattr(load_env_class(env), "tools", []) or [])
            tool_format = make_tool_format(env.tool_format, tokenizer, tools)
        except EnvError as err:
            raise PreflightError(str(err)) from None
        except ToolFormatError as err:
            raise PreflightError(f"env `{env.name}` ({env.declared_at}): {err}") from None
        if call is trained and tool_format.name == "chat_template":
            rendered = tools
    return rendered


def _load_rewards(plan: Plan) -> dict[str, Any]:
    from rlgraph.workers import RewardFunctionError, RuleReward

    # the spec's folder: a relative file path in `fn` is read from there, and a module is looked for there
    base_dir = os.path.dirname(os.path.abspath(plan.spec)) if plan.spec and os.path.isfile(plan.spec) else None
    rewards = {}
    for name, fn in plan.rewards.items():
        guards = plan.reward_settings.get(name)
        if guards is None:  # a Plan built by hand without them
            raise PreflightError(f"reward `{name}` has no settings in the plan (max_invalid_fraction, timeout_s)")
        if guards.url is not None:  # a service: nothing to import, and it is first called in the first step
            from rlgraph.workers.reward_service import RewardService

            rewards[name] = RewardService(guards.url, max_invalid_fraction=guards.max_invalid_fraction,
                                          timeout_s=guards.timeout_s, rows_per_request=guards.rows_per_request,
                                          concurrency=guards.concurrency, retries=guards.retries,
                                          backoff_s=guards.backoff_s)
            continue
        try:
            rewards[name] = RuleReward(fn, max_invalid_fraction=guards.max_invalid_fraction, timeout_s=guards.timeout_s,
                                       base_dir=base_dir, batched=guards.batched, workers=guards.workers)
        except RewardFunctionError as err:
            raise PreflightError(f"reward `{name}`: {err}") from None
    return rewards


def _check_user_functions(plan: Plan) -> None:
    """Each transform and loss the spec declares imports, and takes what it is declared to take."""
    from rlgraph.contract.settings import UserFunctionSettings
    from rlgraph.workers.user_functions import UserFunctionError, check_loss, check_transform, load_user_function

    for call in plan.calls:
        try:
            if isinstance(call.settings, UserFunctionSettings):
                check_transform(load_user_function(call.settings, "transform"), call.settings)
            elif getattr(call.settings, "user_loss", None) is not None:
                loss = call.settings.user_loss
                check_loss(load_user_function(loss, "loss"), loss, rollout_is=call.settings.tis != "off")
        except UserFunctionError as err:
            raise PreflightError(str(err)) from None


def _check_judge_parsers(plan: Plan) -> None:
    """A judge's parser function imports and takes a verdict's four arguments, as a reward's function is checked."""
    from rlgraph.contract.judge import JudgeVerdictError
    from rlgraph.contract.settings import JudgeSettings
    from rlgraph.workers.judge import load_parser
    from rlgraph.workers.reward_process import RewardFunctionError

    for role in plan.roles:
        if isinstance(role.settings, JudgeSettings):
            try:
                load_parser(role.settings.parser, role.settings.base_dir)
            except (JudgeVerdictError, RewardFunctionError) as err:
                raise PreflightError(f"judge `{role.name}`: {err}") from None


def _tokenizer(plan: Plan, model_paths: dict[str, str]) -> Any:
    from rlgraph.models.char_tokenizer import load_tokenizer

    generate = generate_call(plan)
    role = generate.target if generate and generate.target in model_paths else next(iter(model_paths))
    path = model_paths[role]
    try:
        return load_tokenizer(path)  # AutoTokenizer's, imported only where needed
    except Exception as err:
        hint = ""
        if "sentencepiece" in str(err) or "tiktoken" in str(err):
            hint = " Install the run extra, which has both: pip install 'rlgraph[run]'"
        raise PreflightError(f"the tokenizer of role `{role}` does not load from {path}: {type(err).__name__}: "
                             f"{err}{hint}") from None


def round_trip_warnings(tokenizer: Any, rows: list[dict[str, Any]], split: str,
                        skip_special_tokens: bool = True) -> list[str]:
    """A warning when the tokenizer does not give back what it encodes: a prompt or ground truth of `rows` that,
    encoded without special tokens and decoded, is not the same text (a ground truth decoded as the reward reads a
    response: with `skip_special_tokens`, True but in a multi-turn run; a prompt with its special tokens, which
    the model reads). Then no response can be scored as the ground truth is written, and every reward is
    alike. The seen case: transformers 5 loads a tokenizer by the model's config.json `model_type` (a WordLevel
    tokenizer saved beside a qwen2 config loads as Qwen2Tokenizer, which decodes without the spaces)."""
    differing = []  # (row, what, text, decoded, whether only its special tokens were dropped)
    for row_number, row in enumerate(rows, start=1):
        prompt = row["prompt"]
        texts = [("prompt", prompt)] if isinstance(prompt, str) else [
            (f"prompt message {i}", message["content"]) for i, message in enumerate(prompt)]  # 0-based, as data errors
        truth = (row.get("reward_model") or {}).get("ground_truth")  # a demonstration may have none
        if isinstance(truth, (str, int, float)) and not isinstance(truth, bool):
            texts.append(("ground truth", str(truth)))
        if isinstance(row.get("response"), str):  # SFT's answer to imitate, decoded as a response is
            texts.append(("ground truth", row["response"]))
        for what, text in texts:
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            decoded = tokenizer.decode(ids, skip_special_tokens=skip_special_tokens and what == "ground truth")
            if decoded != text:
                differing.append((row_number, what, text, decoded,
                                  tokenizer.decode(ids, skip_special_tokens=False) == text))
    if not differing:
        return []
    # the first prompt (or prompt message) and the first ground truth that differ
    shown = [next(d for d in differing if d[1].startswith(kind)) for kind in ("prompt", "ground truth")
             if any(d[1].startswith(kind) for d in differing)]
    cases = "; ".join(f"the {what} of {split} row {row_number}, {text!r}, decodes as {decoded!r}"
                      for row_number, what, text, decoded, _ in shown)
    kind = type(tokenizer).__name__
    model_type = _model_type(getattr(tokenizer, "name_or_path", ""))
    if all(special for *_, special in shown):
        return [f"a ground truth holds special tokens, which a response loses before the reward reads it "
                f"(decoded with skip_special_tokens=True): {cases}, so no response can match it. Leave them out of "
                "the ground truths."]
    built = f"transformers builds the tokenizer class of config.json's `model_type` ({model_type!r} here) " \
        "over the saved vocabulary, so a tokenizer trained on its own (a tokenizers WordLevel or BPE one) can come " \
        "back changed; " if model_type else ""
    return [f"the tokenizer ({kind}) does not decode what it encodes: {cases} ({len(differing)} of the texts of the "
            f"first {len(rows)} rows differ). Responses are decoded the same way before the reward reads them, so "
            f"one may never match the ground truth as written and every reward comes out alike. {built}save the "
            "tokenizer so that `AutoTokenizer.from_pretrained(folder)` decodes what it encodes (for a model_type, "
            "one of that family's tokenizer kind), or give the model the config of its tokenizer's family."]


def _model_type(folder: str) -> str | None:
    import json

    try:
        return json.loads((Path(folder) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def _rows(plan: Plan, split: str) -> list[dict[str, Any]]:
    from rlgraph.data import DataError, load_files

    try:
        # every file, one after the other; an error names its file and row (SFT: a row without its response too)
        return load_files(getattr(plan.data, split), demonstrations=reads_demonstrations(plan.calls))
    except DataError as err:
        raise PreflightError(f"data.{split}: {err}") from None


def _dataset(plan: Plan, split: str, rows: list[dict[str, Any]], tokenizer: Any, notes: list[str],
             tools: list[dict[str, Any]]) -> Any:
    from rlgraph.data import RLDataset

    name = ", ".join(getattr(plan.data, split))
    max_len = plan.data.max_prompt_length
    demos = reads_demonstrations(plan.calls)
    try:
        dataset = RLDataset(rows, tokenizer, max_prompt_length=max_len, tools=tools, demonstrations=demos,
                            max_response_length=plan.data.max_response_length if demos else None)
    except ValueError as err:  # a tokenizer without the EOS that ends each demonstration
        raise PreflightError(f"data.{split}: {err}") from None
    limits = f"max_prompt_length = {max_len}" + (
        f" or whose response (with EOS) is longer than max_response_length = {plan.data.max_response_length}"
        if demos else "")
    noun = "demonstrations" if demos else "prompts"
    if dataset.num_filtered:
        notes.append(f"data.{split}: {dataset.num_filtered} of {len(rows)} {noun} are longer than {limits} tokens "
                     "and were left out")
    if len(dataset) == 0:
        raise PreflightError(f"data.{split} ({name}): every {noun[:-1]} is longer than {limits} tokens")
    return dataset
