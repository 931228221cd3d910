"""A verl launch -> its Hydra overrides, in order: `[Setting(key, value, line)]`.

Three forms are read:

- a shell script that runs verl's trainer (`python3 -m verl.trainer.main_ppo k=v ...`, a recipe's
  `main_*` module or a `main_*.py` file): line continuations, comments, quotes, and the variables the
  script assigns before the command (`$VAR`, `${VAR}`, `${VAR:-default}`, `$((arithmetic))`). Nothing is
  run: a variable the script does not assign (`$HOME`) or a command substitution (`$(date)`) is left as
  written and reported, so the same file always gives the same settings;
- a file of `key=value` lines (`#` comments, blank lines);
- a YAML config, whose nested keys are flattened (`actor_rollout_ref: {actor: {...}}` ->
  `actor_rollout_ref.actor....`).

Values are read as Hydra reads an override: `True`, `1e-6`, `null`, `[a, b]`, `'quoted'`.
Malformed input raises LaunchError with a message that names the line.
"""

from __future__ import annotations

import ast as pyast
import re
from dataclasses import dataclass, field

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.S)
_OVERRIDE = re.compile(r"(\+\+|\+|~)?([A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-@]+)*)=(.*)", re.S)
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
# python3 -m verl.trainer.main_ppo / recipe.dapo.main_dapo; python3 main_ppo_split.py
_MODULE = re.compile(r"(verl|recipe)(\.[A-Za-z0-9_]+)*\.main[A-Za-z0-9_]*")
_SCRIPT = re.compile(r"(.*/)?main[A-Za-z0-9_]*\.py")
_NOT_RL = ("main_generation", "main_eval", "sft_trainer", "main_sft")


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


@dataclass
class _Word:
    raw: str
    line: int


def _read_shell(text: str) -> Launch:
    commands = _commands(text)
    shell = _Shell()
    for words in commands:
        entry = _entry(words)
        if entry is None:
            shell.run(words)
            continue
        launch = Launch("shell", " ".join(w.raw for w in words[: entry + 1]))
        if any(marker in words[entry].raw for marker in _NOT_RL):
            raise LaunchError(f"line {words[entry].line}: `{words[entry].raw}` is not an RL training launch "
                              "(rlgraph imports verl.trainer.main_ppo and its recipe variants)")
        _arguments(words[entry + 1:], shell, launch)
        launch.warnings = shell.warnings + launch.warnings
        return launch
    raise LaunchError("no verl command found: expected a line that runs `python3 -m verl.trainer.main_ppo` "
                      "(or a recipe's main module) with key=value overrides, or a file of key=value lines")


def _entry(words: list[_Word]) -> int | None:
    """Index of the word naming verl's entry point (the module after `-m`, or a main_*.py script)."""
    for i, word in enumerate(words):
        raw = word.raw.strip("'\"")
        if i and words[i - 1].raw == "-m" and _MODULE.fullmatch(raw):
            return i
        if i and _SCRIPT.fullmatch(raw) and "python" in words[i - 1].raw:
            return i
    return None


def _arguments(words: list[_Word], shell: "_Shell", launch: Launch) -> None:
    skip_next, previous = False, ""
    for word in words:
        if skip_next:
            if previous.startswith("--config-name"):
                launch.config_name = shell.expand(word) or ""
            launch.warnings.append(f"line {word.line}: the launch names a Hydra config ({shell.expand(word)}); "
                                   "its settings are not read, only the overrides on the command line")
            skip_next = False
            continue
        if word.raw in ("|", ">", ">>") or re.fullmatch(r"\d*>.*|<.*", word.raw):
            break  # a pipe or redirection: the rest is not verl's
        if word.raw.startswith("--config-"):
            previous = word.raw
            if word.raw.startswith("--config-name="):
                launch.config_name = (shell.expand(word) or "").split("=", 1)[1]
            if "=" in word.raw:
                launch.warnings.append(f"line {word.line}: the launch names a Hydra config "
                                       f"({shell.expand(word)}); its settings are not read, only the overrides "
                                       "on the command line")
            else:
                skip_next = True
            continue
        expanded = shell.expand(word)
        if expanded is None:
            continue  # `$@` with no arguments
        setting = _setting(expanded, word.line)
        if setting is None:
            launch.warnings.append(f"line {word.line}: argument `{expanded}` is not a key=value override; ignored")
            continue
        launch.settings.append(setting)


def _commands(text: str) -> list[list[_Word]]:
    """Split a script into simple commands of raw words (quotes kept), each word with its line."""
    commands: list[list[_Word]] = []
    words: list[_Word] = []
    i, line, n = 0, 1, len(text)

    def end_command():
        nonlocal words
        if words:
            commands.append(words)
        words = []

    while i < n:
        char = text[i]
        if char == "\\" and text[i + 1: i + 2] == "\n":
            i, line = i + 2, line + 1
        elif char in " \t\r":
            i += 1
        elif char == "\n":
            end_command()
            i, line = i + 1, line + 1
        elif char == "#":
            while i < n and text[i] != "\n":
                i += 1
        elif char in ";&|":
            end_command()
            while i < n and text[i] in ";&|":
                i += 1
        else:
            start, start_line = i, line
            i, line = _word_end(text, i, line)
            words.append(_Word(text[start:i].replace("\\\n", ""), start_line))
    end_command()
    return commands


def _word_end(text: str, i: int, line: int) -> tuple[int, int]:
    n = len(text)
    while i < n:
        char = text[i]
        if char in " \t\r\n;|" or (char == "&" and text[i - 1: i] != ">"):
            return i, line
        if char == "\\":
            if text[i + 1: i + 2] == "\n":
                line += 1
            i += 2
        elif char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise LaunchError(f"line {line}: unbalanced ' quote")
            line += text.count("\n", i, end)
            i = end + 1
        elif char == '"':
            i, line = _double_quoted_end(text, i + 1, line)
        elif char == "$" and text[i + 1: i + 2] in ("(", "{"):
            i, line = _balanced_end(text, i + 1, line)
        elif char == "`":
            end = text.find("`", i + 1)
            if end < 0:
                raise LaunchError(f"line {line}: unbalanced ` quote")
            line += text.count("\n", i, end)
            i = end + 1
        else:
            i += 1
    return i, line


def _double_quoted_end(text: str, i: int, line: int) -> tuple[int, int]:
    start_line = line
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
        elif char == '"':
            return i + 1, line
        elif char == "$" and text[i + 1: i + 2] in ("(", "{"):
            i, line = _balanced_end(text, i + 1, line)
        else:
            line += char == "\n"
            i += 1
    raise LaunchError(f"line {start_line}: unbalanced \" quote")


def _balanced_end(text: str, i: int, line: int) -> tuple[int, int]:
    """`text[i]` opens ( or {; the index after its match (quotes inside are skipped)."""
    opener = text[i]
    closer = ")" if opener == "(" else "}"
    depth, start_line = 0, line
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char in "'\"":
            if char == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise LaunchError(f"line {line}: unbalanced ' quote")
                line += text.count("\n", i, end)
                i = end + 1
            else:
                i, line = _double_quoted_end(text, i + 1, line)
            continue
        if char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return i + 1, line
        line += char == "\n"
        i += 1
    raise LaunchError(f"line {start_line}: unbalanced `{opener}`")


class _Shell:
    """Variables assigned so far, and the expansion of a word with them."""

    def __init__(self):
        # $HOME is the home of whoever runs the spec: `~`, which rlgraph expands where the run happens (check
        # then leaves such a path to the run's pre-flight, as it does an absolute one)
        self.vars: dict[str, str] = {"HOME": "~"}
        self.warnings: list[str] = []
        self._warned: set[str] = set()

    def warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warnings.append(message)

    def run(self, words: list[_Word]) -> None:
        """Record the assignments of a command (`A=1`, `export A=1`, `A=1 cmd`); nothing is executed."""
        start = 1 if words and words[0].raw in ("export", "local", "readonly", "declare") else 0
        for word in words[start:]:
            found = _ASSIGNMENT.fullmatch(word.raw)
            if not found:
                if start:
                    continue  # `export NAME` without a value
                break
            value = self.expand(_Word(found.group(2), word.line))
            self.vars[found.group(1)] = value or ""

    def expand(self, word: _Word) -> str | None:
        """The word after quote removal and expansion; None when it vanishes (an unquoted empty `$@`)."""
        out, quoted = _Expansion(self, word.line).word(word.raw)
        return out if out or quoted else None


class _Expansion:
    def __init__(self, shell: _Shell, line: int):
        self.shell, self.line = shell, line

    def word(self, raw: str) -> tuple[str, bool]:
        out, i, quoted = [], 0, False
        while i < len(raw):
            char = raw[i]
            if char == "'":
                end = raw.index("'", i + 1)
                out.append(raw[i + 1: end])
                i, quoted = end + 1, True
            elif char == '"':
                end = _double_quoted_end(raw, i + 1, self.line)[0]
                out.append(self.double(raw[i + 1: end - 1]))
                i, quoted = end, True
            elif char == "\\":
                out.append(raw[i + 1: i + 2])
                i += 2
            elif char == "$":
                text, i = self.dollar(raw, i)
                out.append(text)
            else:
                out.append(char)
                i += 1
        return "".join(out), quoted

    def double(self, body: str) -> str:
        out, i = [], 0
        while i < len(body):
            char = body[i]
            if char == "\\" and body[i + 1: i + 2] in ('"', "\\", "$", "`"):
                out.append(body[i + 1])
                i += 2
            elif char == "$":
                text, i = self.dollar(body, i)
                out.append(text)
            else:
                out.append(char)
                i += 1
        return "".join(out)

    def dollar(self, raw: str, i: int) -> tuple[str, int]:
        """Expand the `$...` at raw[i]; returns the text and the index after it."""
        nxt = raw[i + 1: i + 2]
        if raw.startswith("$((", i):
            end = _balanced_end(raw, i + 1, self.line)[0]
            return self.arithmetic(raw[i + 3: end - 2], raw[i:end]), end
        if nxt == "(":
            end = _balanced_end(raw, i + 1, self.line)[0]
            self.shell.warn(raw[i:end], f"line {self.line}: command substitution `{raw[i:end]}` is not run; "
                                        "left as written")
            return raw[i:end], end
        if nxt == "{":
            end = _balanced_end(raw, i + 1, self.line)[0]
            return self.braced(raw[i + 2: end - 1], raw[i:end]), end
        if nxt in ("@", "*", "#") or nxt.isdigit():
            return "", i + 2  # the script's own arguments: none
        found = _NAME.match(raw, i + 1)
        if not found:
            return "$", i + 1
        return self.variable(found.group(0), raw[i: found.end()]), found.end()

    def variable(self, name: str, written: str) -> str:
        if name in self.shell.vars:
            return self.shell.vars[name]
        self.shell.warn(name, f"line {self.line}: `${name}` is not set in the script (the importer does not read "
                              "the environment); left as written")
        return written

    def braced(self, body: str, written: str) -> str:
        found = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+)(?:(:?[-=])(.*))?", body, re.S)
        if not found:
            self.shell.warn(written, f"line {self.line}: `{written}` is not expanded by the importer; left as written")
            return written
        name, operator, default = found.groups()
        value = None if name.isdigit() else self.shell.vars.get(name)
        if operator:
            empty = operator.startswith(":") and value == ""
            if value is None or empty:
                value = self.word(default)[0]
                if operator.endswith("="):
                    self.shell.vars[name] = value
            return value
        if name.isdigit():
            return ""
        return self.variable(name, written)

    def arithmetic(self, expression: str, written: str) -> str:
        def substitute(match: re.Match) -> str:
            name = match.group(1) or match.group(2) or match.group(3)
            value = self.shell.vars.get(name, "")
            if not _INT.fullmatch(value.strip()):
                raise ValueError(name)
            return f"({value.strip()})"

        try:
            text = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)|([A-Za-z_]\w*)", substitute, expression)
            return str(_integer(pyast.parse(text.replace("/", "//").strip(), mode="eval").body))
        except (ValueError, SyntaxError, ZeroDivisionError, RecursionError):
            self.shell.warn(written, f"line {self.line}: `{written}` cannot be computed (a variable that is not a "
                                     "number, or an operator the importer does not know); left as written")
            return written


def _integer(node: pyast.AST) -> int:
    if isinstance(node, pyast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, pyast.UnaryOp) and isinstance(node.op, (pyast.USub, pyast.UAdd)):
        value = _integer(node.operand)
        return -value if isinstance(node.op, pyast.USub) else value
    if isinstance(node, pyast.BinOp):
        left, right = _integer(node.left), _integer(node.right)
        ops = {pyast.Add: lambda: left + right, pyast.Sub: lambda: left - right, pyast.Mult: lambda: left * right,
               pyast.FloorDiv: lambda: int(left / right), pyast.Mod: lambda: left % right}
        for op, compute in ops.items():
            if isinstance(node.op, op):
                return compute()
    raise ValueError("operator")
