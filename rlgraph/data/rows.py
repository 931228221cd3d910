"""Reading rows in verl's schema from parquet or JSONL, checking every one before training starts.

A row (verl's `examples/data_preprocess` schema):

    {"data_source": "openai/gsm8k",                       # str; optional, defaults to the file's stem
     "prompt": "12+34=" or [{"role": "user", "content": "..."}],
     "ability": "math",                                   # optional, free text
     "reward_model": {"style": "rule", "ground_truth": "46"},
     "extra_info": {"split": "train", "index": 0}}        # optional dict

Rows of supervised fine-tuning (SFT: `demos -> actor.sft`, `load_rows(path, demonstrations=True)`) hold the
answer to imitate instead of (or beside) a ground truth, in either of verl's SFT schemas:

    {"prompt": "12+34=", "response": "46"}                # prompt and response columns
    {"messages": [{"role": "user", "content": "12+34="},  # a conversation: the last message, the
                  {"role": "assistant", "content": "46"}]} # assistant's, is the response

A bad row stops the load with a DataError naming the file, the row (the line, for JSONL), what is
wrong and how to fix it: better at load time than as a KeyError twenty minutes into a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlgraph.data.errors import DataError

PROMPT_HINT = 'give "prompt" as a string, or as a list of messages like [{"role": "user", "content": "..."}]'
REWARD_HINT = 'give "reward_model": {"style": "rule", "ground_truth": "<the answer>"}'
RESPONSE_HINT = ('give the answer to imitate as "response": "...", or the conversation as "messages": '
                 '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]')


def load_rows(path: str | Path, demonstrations: bool = False) -> list[dict[str, Any]]:
    """All rows of a .parquet or .jsonl file, checked and normalised.

    Normalised means: `data_source` is filled in (the file's stem when absent) and `extra_info` is a
    dict (empty when absent). Every other field is kept as it is. `demonstrations`: SFT rows, each with a
    `response` (a `messages` row gets its `prompt` and `response` from the conversation); a ground truth may
    be left out.
    """
    path = Path(path)
    file = str(path)
    if path.suffix == ".jsonl":
        raw, where = _read_jsonl(path), "line"
    elif path.suffix == ".parquet":
        raw, where = _read_parquet(path), "row"
    else:
        raise DataError(f"{file}: unsupported data file type {path.suffix!r}; use .parquet or .jsonl", file=file)
    rows = [check_row(row, file=file, row_number=n, where=where, default_source=path.stem,
                      demonstrations=demonstrations) for n, row in raw]
    if not rows:
        raise DataError(f"{file}: the file has no rows", file=file)
    return rows


def load_files(names: str | list[str] | tuple[str, ...], demonstrations: bool = False) -> list[dict[str, Any]]:
    """The rows of every data name (a path or `builtin:<task>/<split>`), one file after the other, each
    checked as `load_rows` does: a bad row names its own file (verl's data.train_files)."""
    from rlgraph.data.paths import resolve_data_path

    rows: list[dict[str, Any]] = []
    for name in [names] if isinstance(names, str) else names:
        rows += load_rows(resolve_data_path(name), demonstrations)
    return rows


def check_row(
    row: Any, *, file: str, row_number: int, where: str = "row", default_source: str = "unknown",
    demonstrations: bool = False,
) -> dict[str, Any]:
    """`row`, normalised, or a DataError saying what is wrong with it and how to fix it."""

    def bad(problem: str, fix: str) -> DataError:
        location = f"{file}:{row_number}" if where == "line" else f"{file}: row {row_number}"
        return DataError(f"{location}: {problem}; {fix}", file=file, row=row_number)

    if not isinstance(row, dict):
        raise bad(f"expected a JSON object, got {_kind(row)}", 'write one object per line, e.g. {"prompt": "...", ...}')
    if demonstrations:
        row = _demonstration(row, bad)

    prompt = row.get("prompt")
    if prompt is None:
        raise bad('no "prompt" field', PROMPT_HINT)
    if isinstance(prompt, str):
        if not prompt.strip():
            raise bad('"prompt" is an empty string', PROMPT_HINT)
    elif isinstance(prompt, list):
        if not prompt:
            raise bad('"prompt" is an empty list of messages', PROMPT_HINT)
        for i, message in enumerate(prompt):
            if not isinstance(message, dict):
                raise bad(f'"prompt" message {i} is {_kind(message)}, not an object', PROMPT_HINT)
            for key in ("role", "content"):
                if not isinstance(message.get(key), str):
                    problem = "has no" if message.get(key) is None else "has a non-string"
                    raise bad(f'"prompt" message {i} {problem} "{key}"', PROMPT_HINT)
    else:
        raise bad(f'"prompt" is {_kind(prompt)}', PROMPT_HINT)

    reward_model = row.get("reward_model")
    if demonstrations and reward_model is None:
        pass  # imitated, not scored: a demonstration needs no ground truth
    elif not isinstance(reward_model, dict):
        problem = 'no "reward_model" field' if reward_model is None else f'"reward_model" is {_kind(reward_model)}'
        raise bad(problem, REWARD_HINT)
    elif reward_model.get("ground_truth") is None:
        raise bad('"reward_model" has no "ground_truth"', REWARD_HINT)

    data_source = row.get("data_source")
    if data_source is not None and not isinstance(data_source, str):
        raise bad(f'"data_source" is {_kind(data_source)}', 'give "data_source" as a string such as "openai/gsm8k"')

    extra_info = row.get("extra_info")
    if extra_info is not None and not isinstance(extra_info, dict):
        raise bad(f'"extra_info" is {_kind(extra_info)}', 'give "extra_info" as an object, or leave it out')

    return {**row, "data_source": data_source or default_source, "extra_info": extra_info or {}}


def _demonstration(row: dict[str, Any], bad: Any) -> dict[str, Any]:
    """An SFT row with its `prompt` and `response`: as written, or a `messages` conversation cut before its last
    message (the assistant's answer, the response)."""
    messages = row.get("messages")
    if "response" not in row and messages is not None:
        if not isinstance(messages, list) or len(messages) < 2:
            raise bad('"messages" needs the conversation and the assistant\'s answer, at least 2 messages',
                      RESPONSE_HINT)
        last = messages[-1]
        if not isinstance(last, dict) or last.get("role") != "assistant" or not isinstance(last.get("content"), str):
            raise bad('the last of "messages" is not an assistant message with a "content" string: it is the '
                      "response SFT trains on", RESPONSE_HINT)
        row = {**row, "prompt": row.get("prompt", messages[:-1]), "response": last["content"]}
    response = row.get("response")
    if response is None:
        raise bad('no "response" field (SFT trains on the data\'s answers)', RESPONSE_HINT)
    if not isinstance(response, str) or not response:
        raise bad(f'"response" is {"an empty string" if response == "" else _kind(response)}', RESPONSE_HINT)
    return dict(row)


def _read_jsonl(path: Path) -> list[tuple[int, Any]]:
    file = str(path)
    rows = []
    try:
        with path.open(encoding="utf-8") as f:
            for line_number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    rows.append((line_number, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise DataError(
                        f"{file}:{line_number}: not valid JSON ({e.msg} at column {e.colno}); "
                        "each line must be one complete JSON object",
                        file=file,
                        row=line_number,
                    ) from None
    except UnicodeDecodeError as e:
        raise DataError(f"{file}: not UTF-8 text ({e.reason}); save the file as UTF-8 JSONL", file=file) from None
    except OSError as e:
        raise DataError(f"{file}: cannot read the file ({e.strerror or e})", file=file) from None
    return rows


def _read_parquet(path: Path) -> list[tuple[int, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    file = str(path)
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as e:
        raise DataError(f"{file}: cannot read the file as parquet ({e})", file=file) from None
    return list(enumerate(table.to_pylist(), start=1))


def _kind(value: Any) -> str:
    names = {str: "a string", list: "a list", dict: "an object", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), f"a {type(value).__name__}")
