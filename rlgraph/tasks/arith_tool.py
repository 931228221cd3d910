"""The built-in tool task `builtin:arith-tool`: two-digit multiplication, solved by calling a calculator.

A prompt is the text ``f"{a}*{b}="`` for a, b in 10..99; the correct answer is ``str(a * b)``. The tiny
built-in model cannot multiply by itself, but it can call the calculator tool
(`rlgraph.workers.envs.calculator:Calculator`) and copy its answer. A good episode reads

    37*48=<tool_call>calc 37*48</tool_call><tool_response>1776</tool_response>1776</s>

where the `<tool_response>...</tool_response>` part is inserted by the environment and the rest is the
model's. The 8,100 pairs are split once, by a seeded permutation, into 500 validation pairs and 7,600
training pairs, so the two never overlap and every machine makes the same split. Rows follow verl's
dataset schema, as in `rlgraph.tasks.arith`.

`evaluate` is the calculator itself: integer arithmetic with + - * / and parentheses, parsed with `ast`
(never `eval`), so a model's call cannot run code.
"""

from __future__ import annotations

import ast
from fractions import Fraction
from typing import Any

from rlgraph.tasks import arith

DATA_SOURCE = "rlgraph/arith-tool"
SPLITS = ("train", "val")
NUM_VAL = 500
OPERANDS = range(10, 100)
SPLIT_SEED = 20250113  # changing this changes every split: bump DATA_VERSION with it
DATA_VERSION = 1  # part of the cache file name; bump whenever the rows this module makes change

EOS_TEXT = "</s>"  # the built-in tokenizer's EOS, as text; the reward cuts a solution there
# The tag format of rlgraph.workers.envs.tools; each tag is one token of the built-in tool model's tokenizer.
TOOL_CALL, TOOL_CALL_END = "<tool_call>", "</tool_call>"
TOOL_RESPONSE, TOOL_RESPONSE_END = "<tool_response>", "</tool_response>"
TOOL_TAGS = (TOOL_CALL, TOOL_CALL_END, TOOL_RESPONSE, TOOL_RESPONSE_END)
TOOL_NAME = "calc"

MAX_EXPRESSION_CHARS = 200
MAX_RESULT_DIGITS = 30


def prompt_text(a: int, b: int) -> str:
    return f"{a}*{b}="


def answer_text(a: int, b: int) -> str:
    return str(a * b)


def split_pairs(split: str) -> list[tuple[int, int]]:
    """The (a, b) pairs of one split, in a fixed shuffled order."""
    return arith.seeded_split([(a, b) for a in OPERANDS for b in OPERANDS], split, SPLIT_SEED, NUM_VAL,
                              "builtin:arith-tool")


def make_rows(split: str) -> list[dict[str, Any]]:
    """The rows of one split in verl's schema, ``extra_info.index`` numbering them from 0."""
    return arith.pair_rows(split_pairs(split), split, DATA_SOURCE, prompt_text, answer_text)


def final_answer(solution_str: str) -> str:
    """The model's answer: the text after the last tool response (all of it when there is none), cut at EOS."""
    text = solution_str.rsplit(TOOL_RESPONSE_END, 1)[-1]
    return text.split(EOS_TEXT, 1)[0].strip()


def exact_match(data_source: str, solution_str: str, ground_truth: Any, extra_info: dict | None = None) -> float:
    """1.0 when the final answer (see `final_answer`) is exactly the ground truth; else 0.0.

    `solution_str` is the whole response of a multi-turn sample, decoded with the tool tags kept, so
    a number copied from the calculator counts only once the model has written it after the reply.
    """
    del data_source, extra_info  # one task, one rule
    return 1.0 if final_answer(solution_str) == str(ground_truth).strip() else 0.0


# --- the calculator

_OPERATORS = {ast.Add: lambda x, y: x + y, ast.Sub: lambda x, y: x - y, ast.Mult: lambda x, y: x * y}


def evaluate(expression: str) -> str:
    """The value of an integer expression with + - * / and parentheses, as text; ValueError otherwise.

    Exact: a division that does not come out even gives a decimal rounded to 6 places. Only numbers and
    those operators parse: names, calls, attributes, powers and the rest are refused, so nothing runs.
    The messages are short and do not echo the input: the reply is inserted into the model's context.
    """
    if not isinstance(expression, str):
        raise ValueError("the expression must be text")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression over {MAX_EXPRESSION_CHARS} characters")
    if not expression.strip():
        raise ValueError("empty expression")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError("cannot parse") from None
    value = _value(tree.body)
    if value.denominator == 1:
        return str(value.numerator)
    text = f"{float(value):.6f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        value = Fraction(node.value)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _value(node.operand)
        value = -value if isinstance(node.op, ast.USub) else value
    elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, right = _value(node.left), _value(node.right)
        if right == 0:
            raise ValueError("division by zero")
        value = left / right
    elif isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        value = _OPERATORS[type(node.op)](_value(node.left), _value(node.right))
    elif isinstance(node, ast.Constant):
        raise ValueError("only integers allowed")
    else:
        raise ValueError("only numbers and + - * / allowed")
    if abs(value) >= 10**MAX_RESULT_DIGITS:
        raise ValueError(f"result too large (over {MAX_RESULT_DIGITS} digits)")
    return value
