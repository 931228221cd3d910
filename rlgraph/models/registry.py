"""Model names -> local folders. No downloads: a model is a built-in, shipped inside the package, or a
folder already on this machine.

`builtin:<name>` models are listed in BUILTIN_MODELS: their folder under rlgraph/models/weights, the
sha256 of every file in it, and the recipe that made those bytes. Every machine runs the same bytes
(a model trained on first use came out differently on different CPUs). Resolving a built-in checks
the hashes first, so a damaged install fails with a message instead of loading a different model.

The recipes stay runnable (`python -m rlgraph.models.build_arith_gpt --out DIR`); the shipped bytes
are what they produced on the project's build machine, and another CPU may produce other bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path

BUILTIN_PREFIX = "builtin:"
WEIGHTS_DIR = Path(__file__).resolve().parent / "weights"


class ModelNotFoundError(Exception):
    """A model name that is neither a built-in model nor a local folder."""


class CorruptModelError(Exception):
    """A built-in model whose shipped files are missing or do not match their pinned hashes."""


@dataclasses.dataclass(frozen=True)
class BuiltinModel:
    folder: str  # under WEIGHTS_DIR
    sha256: Mapping[str, str]  # every shipped file -> the sha256 of its bytes
    recipe: str  # the module that made them: `python -m RECIPE --out DIR`
    about: str


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "arith-gpt": BuiltinModel(
        folder="arith-gpt",
        sha256={
            "model.safetensors": "bb0b93242bb53ec294315939e7cbcf3a60fa186f0c43e28254d7d6c71cee0f2c",
            "config.json": "3c2b6628203e1462e720cc7cfb04e8dba5f13ac5c7d45fc433696686c3d7114e",
            "generation_config.json": "e9c42bd8c4e08af12d7090aa6d4ad66489ade8373cd9b7d49f651c60103ce14c",
            "tokenizer.json": "7dee99112ca753cbe50b6dcb950bd7cd42249468df5b4369b9ed36581f9765b0",
            "tokenizer_config.json": "49c829a5e2b3ce7d1dd15d898d4c382f5ba6f073cb71ebf19c93c8c5907ef49d",
            "rlgraph_build.json": "94b519a5ecc12bfd39d48714916c36425bf3c4bea92359f3eaca106dfcb273f2",
        },
        recipe="rlgraph.models.build_arith_gpt",
        about="tiny rotary GPT that adds two-digit numbers 43.8% of the time, greedy (policy for builtin:arith)",
    ),
    "arith-gpt-teacher": BuiltinModel(
        folder="arith-gpt-teacher",
        sha256={
            "model.safetensors": "13fe5c4022d89822431fd35c9e676135c2ee2052916168ca7e72eb7a92d7b771",
            "config.json": "e5c5523b182b4862ee1dd26d805f3294e9f533298fb238099a9064f5d037cf44",
            "generation_config.json": "bd3721374491f500cc0d53b8e3728587179a196728dd88b9160eb49aa3601125",
            "tokenizer.json": "7dee99112ca753cbe50b6dcb950bd7cd42249468df5b4369b9ed36581f9765b0",
            "tokenizer_config.json": "49c829a5e2b3ce7d1dd15d898d4c382f5ba6f073cb71ebf19c93c8c5907ef49d",
            "rlgraph_build.json": "10d1c4d0f8f22058c2b5749c7521a1acffc9e783cf9b44cb39c461e86be2c694",
        },
        recipe="rlgraph.models.build_arith_teacher",
        about="builtin:arith-gpt's recipe trained on: adds two-digit numbers 86.2% of the time, greedy (the "
              "teacher of specs/distill_arith.rl; the same tokenizer as builtin:arith-gpt)",
    ),
    "arith-gpt-init": BuiltinModel(
        folder="arith-gpt-init",
        sha256={
            "model.safetensors": "5215ab66b5034ea175056d640019dc660a122f72400fad55559f1601c965e8f6",
            "config.json": "e5c5523b182b4862ee1dd26d805f3294e9f533298fb238099a9064f5d037cf44",
            "generation_config.json": "bd3721374491f500cc0d53b8e3728587179a196728dd88b9160eb49aa3601125",
            "tokenizer.json": "7dee99112ca753cbe50b6dcb950bd7cd42249468df5b4369b9ed36581f9765b0",
            "tokenizer_config.json": "49c829a5e2b3ce7d1dd15d898d4c382f5ba6f073cb71ebf19c93c8c5907ef49d",
            "rlgraph_build.json": "5ee0d52e7f60c9947ac1084f43af6af7e1eea43ea61b94ce504e04db67258ca0",
        },
        recipe="rlgraph.models.build_arith_init",
        about="builtin:arith-gpt untrained (random init, seed 0): 0% greedy on builtin:arith; the start of "
              "specs/sft_arith.rl, supervised fine-tuning before RL",
    ),
    "arith-tool-gpt": BuiltinModel(
        folder="arith-tool-gpt",
        sha256={
            "model.safetensors": "28c299fe11bc36a8155acc71b073efe97b6753f10e73a847a95e5dbfbee7ef90",
            "config.json": "63b6ab140e06a8795a97e772bcf0edb54430557dd4992083f096f6f7348c7b10",
            "generation_config.json": "e9c42bd8c4e08af12d7090aa6d4ad66489ade8373cd9b7d49f651c60103ce14c",
            "tokenizer.json": "d4e4f66a86e37f349ef064f6f0ab0f9aead005762a39e1d6beea757f56250634",
            "tokenizer_config.json": "49c829a5e2b3ce7d1dd15d898d4c382f5ba6f073cb71ebf19c93c8c5907ef49d",
            "rlgraph_build.json": "79ea92e27a742844455819b5380fcc28ea78ce897fc43c7d39d3dd2d5a5ca215",
        },
        recipe="rlgraph.models.build_arith_tool_gpt",
        about="tiny rotary GPT that multiplies two-digit numbers by calling a calculator, sometimes: 16.2% right "
              "greedy with the tool in the loop (policy for builtin:arith-tool)",
    ),
    "arith-rm": BuiltinModel(
        folder="arith-rm",
        sha256={
            "model.safetensors": "474e4749f152a61a61f36c78bfcf1299c6ad25ade7fbe2343b7b2d7fc38eed85",
            "config.json": "47abdc834af68860cf00cb942eaa6399d1d35c4dc81f47032ac84aa961ea05d7",
            "tokenizer.json": "7dee99112ca753cbe50b6dcb950bd7cd42249468df5b4369b9ed36581f9765b0",
            "tokenizer_config.json": "b3b96f2301118c9022725b822795f2550c8ed2c9f6b60463073ef3435c3c2c24",
            "rlgraph_build.json": "77ed9f4fe54868a95d7256fb064158a77b585616ed951cd90a3713dd9000dbfa",
        },
        recipe="rlgraph.models.build_arith_rm",
        about="reward model for builtin:arith: a sequence classifier scoring 1 for a right sum, 0 for a wrong one "
              "(0.956 accuracy on answers to held-out prompts; made from builtin:arith-gpt)",
    ),
}


def resolve_model_path(name: str) -> str:
    """The absolute local folder of model `name`; a built-in's shipped files are checked first; a stage
    (`run:SPEC.rl` or `run:RUN_DIR`, rlgraph/contract/stages.py) is its run's newest trained actor."""
    from rlgraph.contract.stages import StageError, is_stage, stage_model_folder

    if name.startswith(BUILTIN_PREFIX):
        return str(verified_builtin_folder(name[len(BUILTIN_PREFIX) :]))
    if is_stage(name):
        try:
            return str(stage_model_folder(name).resolve())
        except StageError as err:
            raise ModelNotFoundError(str(err)) from None
    path = Path(name).expanduser()
    if path.is_dir():
        return str(path.resolve())
    raise ModelNotFoundError(
        f"model {name!r} is not a local folder"
        + (" (it is a file; give the folder that holds config.json)" if path.exists() else "")
        + f"; rlgraph never downloads models. Give the path of a folder saved with save_pretrained, "
        f"or a built-in model: {_builtin_names()}"
    )


def builtin_model_folder(name: str) -> Path:
    """Where built-in model `name` is shipped (not checked: see `verified_builtin_folder`)."""
    return WEIGHTS_DIR / _builtin(name).folder


def verified_builtin_folder(name: str) -> Path:
    """The shipped folder of built-in model `name`, once every file in it matches its pinned sha256."""
    model = _builtin(name)
    folder = WEIGHTS_DIR / model.folder
    for file, expected in model.sha256.items():
        path = folder / file
        if not path.is_file():
            problem = "is missing"
        elif (actual := hashlib.sha256(path.read_bytes()).hexdigest()) != expected:
            problem = f"has sha256 {actual}, not the pinned {expected}"
        else:
            continue
        raise CorruptModelError(
            f"built-in model {BUILTIN_PREFIX}{name} is damaged: {path} {problem}. Reinstall rlgraph, or in "
            f"a checkout of its repository: `git checkout -- {path.relative_to(WEIGHTS_DIR.parents[2])}`."
        )
    return folder


def _builtin(name: str) -> BuiltinModel:
    try:
        return BUILTIN_MODELS[name]
    except KeyError:
        message = f"no built-in model {BUILTIN_PREFIX}{name}; the built-in models are: {_builtin_names()}"
        raise ModelNotFoundError(message) from None


def _builtin_names() -> str:
    return ", ".join(f"{BUILTIN_PREFIX}{n}" for n in sorted(BUILTIN_MODELS))
