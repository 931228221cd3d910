"""Model folders and data files exist, read as plain files: nothing is imported, nothing downloaded.

A relative path is looked for in the working directory (where `rlgraph run` reads it) and in the spec's
folder. An absolute (or `~`) path that is not on this machine is left to `run`'s pre-flight: a spec for a
cluster is often checked away from the cluster's shared disks. A model path of the form `org/name` that
is no folder here is read as a Hugging Face hub id: accepted (the memory estimate takes the model block's
`params`, `layers`, ...) with a note that rlgraph downloads nothing, so the weights must be in a folder
of that name where the run happens.

A path found unusable is marked invalid in its declaration: the memory estimate does not go on to
suggest `params = 7B` for a folder that is not there.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from rlgraph.compiler.graph import StepGraph
from rlgraph.compiler.passes._common import written_inputs
from rlgraph.contract.stages import is_stage, stage_spec
from rlgraph.diagnostics import Diagnostic, error
from rlgraph.lang.program import Decl, Program
from rlgraph.lang.stages import stage_actor_model, stage_program
from rlgraph.lang.validate import did_you_mean

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # `Qwen/Qwen2-7B-Instruct`
DATA_SUFFIXES = (".parquet", ".jsonl")  # rlgraph.data.paths.SUPPORTED_SUFFIXES (not imported: it is the runtime's)


def paths(program: Program, graph: StepGraph) -> list[Diagnostic]:
    base = Path(program.path).parent
    out: list[Diagnostic] = []
    for model in program.models.values():
        if model.is_set("path"):
            out += _model(model, base)
    if program.data is not None:
        demos = "demos" in written_inputs(program)  # SFT: the rows need responses (a built-in split says so)
        for key in ("train", "val"):
            if program.data.is_set(key):
                for index, name in enumerate(program.data[key]):
                    out += _data(program.data, key, index, name, base, demos)
    return out


def _candidates(path: str, base: Path) -> list[Path]:
    expanded = Path(path).expanduser()
    return [expanded] if expanded.is_absolute() else [Path.cwd() / expanded, base / expanded]


def _local(path: str) -> bool:
    """A path that names a place on the machine the run happens on, not a relative one."""
    return Path(path).expanduser().is_absolute()


def _model(model: Decl, base: Path) -> list[Diagnostic]:
    path = model["path"]
    span = model.span_of("path")
    if path.startswith("builtin:"):
        return []  # the built-in models are the memory estimate's check (`unknown-model`, with did-you-mean)
    if is_stage(path):
        return _stage(model, path, base)
    candidates = _candidates(path, base)
    folder = next((c for c in candidates if c.is_dir()), None)
    if folder is None:
        if any(c.exists() for c in candidates):
            model.mark_invalid("path")
            return [error("model-path", f"model `{model.name}`: `{path}` is a file, not a model folder", span,
                          "give the folder that holds config.json and the weights (saved with save_pretrained)",
                          label="a file")]
        if _local(path):
            return []  # on the cluster's disks, perhaps: `run` checks it before it starts
        if _HUB_ID.match(path):
            return [error("remote-model", f"model `{model.name}`: `{path}` is no folder here, so it is read as a "
                            "Hugging Face hub id", span,
                            "rlgraph downloads nothing: the weights must be in a folder of this name where the run "
                            f"happens, e.g. `huggingface-cli download {path} --local-dir {path}`",
                            "the memory estimate uses the model block's `params`, `layers`, `hidden`, `heads`, "
                            "`kv_heads` and `vocab`", label="hub id")]
        model.mark_invalid("path")
        return [error("model-path", f"model `{model.name}`: there is no folder `{path}`", span,
                      f"looked in {_where(candidates)}; point `path` at a folder saved with save_pretrained "
                      "(config.json and the weights), or a built-in model such as `builtin:arith-gpt`",
                      label="no such folder")]
    config = folder / "config.json"
    problem = _unreadable_json(config)
    if problem:
        model.mark_invalid("path")
        return [error("model-path", f"model `{model.name}`: the folder `{path}` has no readable config.json "
                      f"({problem})", span,
                      "give the folder a model was saved to with save_pretrained: its config.json names the "
                      "architecture and the sizes the memory estimate reads", label="no config.json")]
    return []


def _stage(model: Decl, path: str, base: Path) -> list[Diagnostic]:
    """`run:SPEC.rl`: the spec of the stage before exists beside this one and trains an actor (its run need not
    exist yet: `run` resolves it). `run:DIR`: a run directory, left to `run` like any absolute path. A path
    found here stays valid, and rlgraph.compiler.compile_spec then checks that spec in turn."""
    spec = stage_spec(path)
    if spec is None:
        return []
    span = model.span_of("path")
    found = stage_program(path, base)
    if found is None:
        model.mark_invalid("path")
        return [error("model-path", f"model `{model.name}`: there is no spec `{spec}` to start from", span,
                      f"looked in {_where(_candidates(spec, base))}; `run:FILE.rl` names the spec of the stage before "
                      "this one (its run's trained actor is this model)", label="no such spec")]
    if stage_actor_model(found) is None:
        model.mark_invalid("path")
        return [error("model-path", f"model `{model.name}`: `{spec}` trains no actor to start from", span,
                      "name a spec with one `actor` role (e.g. an SFT spec, `demos -> actor.sft`)",
                      label="no actor")]
    return []  # whether that spec checks clean is compile_spec's to say: a pass compiles nothing


def _unreadable_json(file: Path) -> str | None:
    if not file.is_file():
        return "it is not there"
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read it: {getattr(exc, 'strerror', None) or exc}"
    except ValueError as exc:
        return f"not valid JSON: {exc}"
    return None if isinstance(data, dict) else "not a JSON object"


def _data(data: Decl, key: str, index: int, name: str, base: Path, demos: bool) -> list[Diagnostic]:
    span = data.spans.get(f"{key}[{index}]", data.span_of(key))
    where = f"data.{key}"
    if name.startswith("builtin:"):
        return _builtin_data(data, key, name, span, demos)
    suffix = Path(name).suffix
    if suffix not in DATA_SUFFIXES:
        data.mark_invalid(key)
        return [error("data-path", f"{where}: `{name}` is not a .parquet or .jsonl file", span,
                      "give a .parquet or .jsonl file in verl's row schema (prompt, reward_model.ground_truth, "
                      "...), or a built-in data set such as `builtin:arith/train`",
                      label=f"{suffix or 'no suffix'}")]
    candidates = _candidates(name, base)
    if any(c.is_file() for c in candidates) or _local(name) and not candidates[0].exists():
        return []  # found, or an absolute path left to `run` (see the module's doc)
    data.mark_invalid(key)
    if any(c.exists() for c in candidates):
        return [error("data-path", f"{where}: `{name}` is not a file", span, "give a .parquet or .jsonl file",
                      label="not a file")]
    return [error("data-path", f"{where}: there is no file `{name}`", span,
                  f"looked in {_where(candidates)}; a relative path is read from the directory `rlgraph run` "
                  "starts in", label="no such file")]


def _builtin_data(data: Decl, key: str, name: str, span, demos: bool) -> list[Diagnostic]:
    from rlgraph.tasks import BUILTIN_TASKS, get_task

    task, _, split = name[len("builtin:"):].partition("/")
    if task not in BUILTIN_TASKS:
        data.mark_invalid(key)
        known = [f"builtin:{t}/{s}" for t in BUILTIN_TASKS for s in get_task(t).SPLITS]
        return [error("data-path", f"data.{key}: `{name}` is not a built-in data set", span,
                      did_you_mean(name, known), "the built-in data sets: " + ", ".join(f"`{k}`" for k in known),
                      label="no such built-in task")]
    splits = get_task(task).SPLITS
    if split not in splits:
        data.mark_invalid(key)
        return [error("data-path", f"data.{key}: built-in task `{task}` has no split `{split}`", span,
                      "use " + " or ".join(f"`builtin:{task}/{s}`" for s in splits), label="no such split")]
    with_responses = getattr(get_task(task), "DEMONSTRATION_SPLITS", {})
    if demos and split not in with_responses:
        data.mark_invalid(key)
        fix = (" or ".join(f"`builtin:{task}/{s}`" for s in with_responses) if with_responses
               else f"a .parquet or .jsonl file of demonstrations (built-in task `{task}` has none)")
        return [error("data-path", f"data.{key}: `{name}` holds prompts without responses, and the step trains on "
                      "demonstrations (`demos`)", span,
                      f"use {fix}: rows with the answer to imitate as `response` (or a `messages` conversation)",
                      label="no responses to imitate")]
    return []


def _where(candidates: list[Path]) -> str:
    shown = list(dict.fromkeys(os.path.normpath(str(c)) for c in candidates))
    return " and ".join(f"`{c}`" for c in shown)
