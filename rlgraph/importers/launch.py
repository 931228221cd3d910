"""A verl launch -> its Hydra overrides, in order: `[Setting(key, value, line)]`.

Three forms are read:

- a shell script that runs verl's trainer (`python3 -m verl.trainer.main_ppo k=v ...`, fully_async_main, the
  one-step-off main, a recipe's `main_*` module or a `main_*.py` file, directly or through torchrun, `ray job
  submit -- ...`, `uv run`, a function): read as bash reads it by rlgraph/importers/shell.py, which runs
  nothing and reads no environment, so the same file always gives the same settings;
- a file of `key=value` lines (`#` comments, blank lines);
- a YAML config, whose nested keys are flattened (`actor_rollout_ref: {actor: {...}}` ->
  `actor_rollout_ref.actor....`).

Values are read as Hydra reads an override: `True`, `1e-6`, `null`, `[a, b]`, `'quoted'`.
Malformed input raises LaunchError with a message that names the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from rlgraph.importers import shell

_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_OVERRIDE = re.compile(r"(\+\+|\+|~)?([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-@]+)*)=(.*)", re.S)
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
# python3 -m verl.trainer.main_ppo / verl.experimental.fully_async_policy.fully_async_main /
# verl.experimental.one_step_off_policy.main_ppo / recipe.dapo.main_dapo / verl.trainer.sft_trainer (refused);
# python3 main_ppo_split.py
_MODULE = re.compile(r"(verl|recipe)(\.[A-Za-z0-9_]+)*\.([A-Za-z0-9]+_)*(main|trainer)(_[A-Za-z0-9]+)*")
_SCRIPT = re.compile(r"(.*/)?([A-Za-z0-9]+_)*main(_[A-Za-z0-9]+)*\.py")  # main_ppo_split.py, fully_async_main.py
_NOT_RL = ("main_generation", "main_eval", "sft", "main_distill")


class LaunchError(Exception):
    """The launch cannot be read; the message says where and why."""


@dataclass(frozen=True)
class Setting:
    key: str  # dotted, without Hydra's +/++ prefix
    value: object  # str | int | float | bool | None | list
    text: str  # the value as written after shell expansion, for messages and comments
    line: int


@dataclass
class Launch:
    form: str  # "shell" | "overrides" | "yaml"
    entry: str  # the command that runs verl, e.g. "python3 -m verl.trainer.main_ppo"; "" for the other forms
    config_name: str = ""  # the Hydra config the command names (--config-name), e.g. ppo_megatron_trainer
    settings: list[Setting] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # about the launch itself (unset variables, ...)


def read_launch(data: bytes, name: str) -> Launch:
    """Parse the bytes of a launch file; `name` picks YAML by its extension."""
    if not data.strip():
        raise LaunchError("the file is empty")
    if b"\x00" in data:
        raise LaunchError("the file is binary, not a shell script, a key=value file or YAML")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise LaunchError(f"line {line}: byte 0x{data[exc.start]:02x} is not UTF-8 text") from None
    if name.endswith((".yaml", ".yml")):
        return _read_yaml(text)
    if _looks_like_overrides(text):
        return _read_overrides(text)
    return _read_shell(text)


def add_overrides(launch: Launch, overrides: list[str]) -> None:
    """`rlgraph import verl FILE -s KEY=VALUE`: overrides after the launch's own, as `bash run.sh KEY=VALUE` passes
    them through verl's scripts' `"$@"`; their line is 0 (messages say `-s`)."""
    for override in overrides:
        setting = _setting(override, 0)
        if setting is None:
            raise LaunchError(f"-s {override}: expected a verl override KEY=VALUE, such as "
                              "actor_rollout_ref.actor.strategy=fsdp or trainer.device=cpu")
        launch.settings.append(setting)


# ---- values -------------------------------------------------------------------------------------


def hydra_value(text: str) -> object:
    """An override's value as Hydra reads it."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text.startswith("[") and text.endswith("]"):
        return [hydra_value(item) for item in _split_list(text[1:-1])]
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered in ("null", "~", "none"):
        return None
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def _split_list(body: str) -> list[str]:
    items, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(body):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(body[start:i])
            start = i + 1
    last = body[start:]
    if last.strip() or items:
        items.append(last)
    return [item for item in items if item.strip()]


def _setting(word: str, line: int) -> Setting | None:
    found = _OVERRIDE.fullmatch(word)
    if not found:
        return None
    prefix, key, text = found.groups()
    if prefix == "~":
        return Setting(key, None, "~ (deleted)", line)
    return Setting(key, hydra_value(text), text.strip(), line)


# ---- key=value files ------------------------------------------------------------------------------


def _looks_like_overrides(text: str) -> bool:
    lines = [line.strip().rstrip("\\").strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    return bool(lines) and all(_OVERRIDE.fullmatch(line) and "$" not in line.split("=", 1)[0] for line in lines) \
        and not any(_ASSIGNMENT.fullmatch(line) and "." not in line.split("=", 1)[0] for line in lines)


def _read_overrides(text: str) -> Launch:
    launch = Launch("overrides", "")
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip().rstrip("\\").strip()
        if line and not line.startswith("#"):
            _check_quotes(line, number)
            launch.settings.append(_setting(line, number))
    return launch


def _check_quotes(text: str, line: int) -> None:
    quote = ""
    for char in text:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
    if quote:
        raise LaunchError(f"line {line}: unbalanced {quote} quote")


# ---- YAML ------------------------------------------------------------------------------------------


def _read_yaml(text: str) -> Launch:
    try:
        import yaml
    except ImportError:
        raise LaunchError("reading a YAML config needs the pyyaml package (pip install pyyaml); "
                          "a shell launch or a key=value file needs nothing") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise LaunchError(f"{where}not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(loaded, dict):
        raise LaunchError("the YAML file is not a mapping of verl's config sections (data, actor_rollout_ref, ...)")
    launch = Launch("yaml", "")
    flat: dict[str, object] = {}
    _flatten(loaded, "", flat)
    lines = _yaml_lines(text)
    for key, value in flat.items():
        if isinstance(value, str) and value.startswith("${"):
            target = re.fullmatch(r"\$\{([A-Za-z0-9_.]+)\}", value)
            if target and target.group(1) in flat:
                value = flat[target.group(1)]  # the reference Hydra would resolve
            else:
                continue  # an OmegaConf resolver (oc.select, ...): verl's default, which the importer knows
        if key.endswith("._target_") or key == "defaults":
            continue
        launch.settings.append(Setting(key, value, _yaml_text(value), lines.get(key.rsplit(".", 1)[-1], 0)))
    return launch


def _flatten(node: dict, prefix: str, out: dict) -> None:
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            _flatten(value, dotted + ".", out)
        elif not isinstance(value, dict):
            out[dotted] = value


def _yaml_lines(text: str) -> dict[str, int]:
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        found = re.match(r"\s*([A-Za-z0-9_]+)\s*:", line)
        if found:
            lines.setdefault(found.group(1), number)
    return lines


def _yaml_text(value: object) -> str:
    if isinstance(value, bool):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_text(v) for v in value) + "]"
    return str(value)


# ---- shell scripts ----------------------------------------------------------------------------------


def _read_shell(text: str) -> Launch:
    try:
        command, warnings = shell.find_command(text, lambda words: _entry(words) is not None)
    except shell.ShellError as exc:
        raise LaunchError(str(exc)) from None
    if command is None:
        raise LaunchError("no verl command found: expected a line that runs `python3 -m verl.trainer.main_ppo` "
                          "(or fully_async_main, the one-step-off main, a recipe's main module), directly or "
                          "through torchrun, `ray job submit -- ...` or a function the script calls, with "
                          "key=value overrides; or a file of key=value lines")
    words = command.words
    entry = _entry(words)
    module = words[entry]
    launch = Launch("shell", " ".join(words[: entry + 1]))
    if _not_rl(module):
        raise LaunchError(f"line {module.line}: `{module}` is not an RL training launch (rlgraph imports "
                          "verl.trainer.main_ppo, fully_async_main, the one-step-off main and recipe mains)")
    _arguments(words[entry + 1:], launch)
    launch.warnings = warnings + launch.warnings
    return launch


def _entry(words: list[str]) -> int | None:
    """Index of the word naming verl's entry point (the module after `-m`, or a main_*.py script)."""
    for i, word in enumerate(words):
        if i and words[i - 1] == "-m" and _MODULE.fullmatch(word):
            return i
        if i and _SCRIPT.fullmatch(word) and "python" in words[i - 1]:
            return i
    return None


def _not_rl(module: str) -> bool:
    last = module.rsplit(".", 1)[-1].removesuffix(".py").rsplit("/", 1)[-1]
    return "sft" in last or any(marker in last for marker in _NOT_RL)


def _arguments(words: list[shell.Field], launch: Launch) -> None:
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word.startswith("--config-"):
            option, has_value, value = word.partition("=")
            if not has_value and i < len(words):
                value, i = words[i], i + 1
            if option == "--config-name":
                launch.config_name = value.removesuffix(".yaml")
                launch.warnings.append(f"line {word.line}: the launch names a Hydra config ({value}); its "
                                       "settings are not read, only the overrides on the command line")
            continue
        setting = _setting(word, word.line)
        if setting is None:
            launch.warnings.append(f"line {word.line}: argument `{word}` is not a key=value override; ignored")
            continue
        launch.settings.append(setting)
