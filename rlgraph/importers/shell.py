"""Read a bash launch script as bash would, without running any of it: the words of the command that runs verl.

tree-sitter-bash parses the script; this module walks the tree in execution order and evaluates what can be
known statically: assignments (`X=1`, `export X=1`, `local`, `declare -a`), parameter expansions
(`${X:-8}`, `${X:=8}`, `${X:+a}`, `${#X}`, `${X%.*}`, `${X/a/b}`, `${X^^}`), arrays (`A=(a b)`, `A+=(c)`,
`"${A[@]}"`, `${A[0]}`, `${#A[@]}`), arithmetic (`$((2 * X))`), quotes and word splitting, `if/elif/else`,
`case`, `&&`/`||`, `for` loops over words, and functions that are called (with `$1`, `shift`, `return`).

Nothing from the script is executed and the environment is not read: a variable the script does not set
is unset (so `${X:-8}` is 8), a command substitution (`$(nvidia-smi ...)`) is not known. A word that holds
an unknown part keeps its text as written and is marked `known = False`; a condition that depends on one
takes one branch (an `if` or a test is assumed false, a `case` takes its first branch that does not exit)
and says so in a warning naming the line and the value assumed.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

_PARSER = Parser(Language(tree_sitter_bash.language()))
_MAX_LOOP = 256  # iterations of one `for` loop the importer follows
_MAX_DEPTH = 64  # nested function calls


class ShellError(Exception):
    """The script is not valid bash (the message names the line), or it cannot be followed."""


class Field(str):
    """One word after expansion: its text, the line it comes from, and whether every part of it is known."""

    line: int
    known: bool

    def __new__(cls, text: str, line: int, known: bool = True):
        field = super().__new__(cls, text)
        field.line, field.known = line, known
        return field


@dataclass
class Command:
    """A simple command as bash would run it: its words after expansion."""

    words: list[Field]
    line: int


class _Found(Exception):
    def __init__(self, command: Command):
        self.command = command


class _Exit(Exception):
    def __init__(self, line: int):
        self.line = line


class _Return(Exception):
    pass


def _line(node: Node) -> int:
    return node.start_point[0] + 1


def _text(node: Node) -> str:
    return node.text.decode("utf-8", "replace")


_ARITH_NAME = "__rlgraph_arithmetic_"


def _hide_arithmetic(text: str) -> tuple[str, dict[str, str]]:
    """Each one-line `$((...))` replaced by `${__rlgraph_arithmetic_N}`, the expression kept aside.

    tree-sitter-bash reads `$((a + b))` inside `${X:-...}` as a command substitution, and `$(((a + b) * 2))`
    there not at all; bash reads both as arithmetic. The expressions are evaluated when the walk reaches them.
    """
    hidden: dict[str, str] = {}
    out, i = [], 0
    while True:
        start = text.find("$((", i)
        if start < 0:
            break
        depth, j = 2, start + 3
        while j < len(text) and depth and text[j] != "\n":
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        if depth or text[j - 2: j] != "))":
            out.append(text[i: start + 3])
            i = start + 3
            continue
        name = f"{_ARITH_NAME}{len(hidden)}"
        hidden[name] = text[start:j]
        out.append(text[i:start] + "${" + name + "}")
        i = j
    out.append(text[i:])
    return "".join(out), hidden


def find_command(text: str, is_entry) -> tuple[Command | None, list[str]]:
    """The first command the script runs whose words `is_entry` accepts, and the warnings of reading it."""
    visible, hidden = _hide_arithmetic(text)
    shell = Shell(is_entry, hidden)
    return shell.run(parse(visible, hidden)), shell.warnings


def parse(text: str, hidden: dict[str, str] | None = None) -> Node:
    """The script's syntax tree; ShellError naming the line of the first syntax error."""
    tree = _PARSER.parse(text.encode("utf-8"))
    root = tree.root_node
    if root.has_error:
        bad = _first_error(root)
        line = _line(bad)
        snippet = _text(bad).strip().splitlines()[0][:60] if _text(bad).strip() else ""
        for name, expression in (hidden or {}).items():
            snippet = snippet.replace("${" + name + "}", expression)
        if bad.is_missing:
            if bad.type in ("'", '"', "`"):
                raise ShellError(f"line {line}: unbalanced {bad.type} quote")
            raise ShellError(f"line {line}: bash expects `{bad.type}` here (an unclosed if, case, loop, quote "
                             "or bracket above)")
        if snippet[:1] in ("'", '"', "`"):
            raise ShellError(f"line {line}: unbalanced {snippet[0]} quote")
        raise ShellError(f"line {line}: bash cannot parse `{snippet}`")
    return root


def _first_error(node: Node) -> Node:
    for child in node.children:
        if child.is_missing or child.type == "ERROR":
            return child
        if child.has_error:
            return _first_error(child)
    return node


class Shell:
    """The script's state as evaluation reaches each statement; `run` finds the command `is_entry` accepts."""

    def __init__(self, is_entry, arithmetic: dict[str, str] | None = None):
        self.is_entry = is_entry  # words -> bool: the command that runs verl
        self.hidden = arithmetic or {}  # placeholder -> `$((...))`, see _hide_arithmetic
        # $HOME is the home of whoever runs the spec: `~`, which rlgraph expands where the run happens
        self.vars: dict[str, str | list[Field]] = {"HOME": Field("~", 0)}
        self.functions: dict[str, Node] = {}
        self.positional: list[Field] = []  # the script is imported without arguments
        self.locals: list[dict[str, object]] = []
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self.depth = 0
        self.in_test = False  # inside `[ ]`/`[[ ]]`: an unset variable is empty, as bash reads it

    def warn(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            self.warnings.append(message)

    def run(self, root: Node) -> Command | None:
        try:
            self.block(root.children)
        except _Found as found:
            return found.command
        except _Exit as exit:
            raise ShellError(f"line {exit.line}: the script exits here, before any verl command (with the "
                             "environment unset, as the importer reads it)") from None
        except _Return:
            return None
        return None

    # ---- statements ----------------------------------------------------------------------------

    def block(self, nodes) -> bool | None:
        status: bool | None = True
        for node in nodes:
            if node.is_named and node.type != "comment":
                status = self.statement(node)
        return status

    def statement(self, node: Node) -> bool | None:
        """Evaluate one statement; its exit status (True: success, None: not known statically)."""
        kind = node.type
        if kind in ("variable_assignment", "variable_assignments"):
            self.assignments(node)
            return True
        if kind == "declaration_command":
            return self.declaration(node)
        if kind == "command":
            return self.command(node)
        if kind in ("compound_statement", "do_group", "program"):
            if node.children and node.children[0].type == "((":
                return self.arithmetic_status(node)
            return self.block(node.children)
        if kind == "subshell":
            saved = dict(self.vars)
            try:
                return self.block(node.children)
            finally:
                self.vars = saved
        if kind == "redirected_statement":
            body = node.child_by_field_name("body")
            return self.statement(body) if body is not None else True
        if kind == "pipeline":
            status = True
            for child in node.named_children:
                status = self.statement(child)
            return status
        if kind == "list":
            return self.list(node)
        if kind == "negated_command":
            status = self.statement(node.named_children[0])
            return None if status is None else not status
        if kind == "if_statement":
            return self.if_statement(node)
        if kind == "case_statement":
            return self.case_statement(node)
        if kind == "for_statement":
            return self.for_statement(node)
        if kind in ("while_statement", "c_style_for_statement"):
            return self.loop_once(node)
        if kind == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is not None and body is not None:
                self.functions[_text(name)] = body
            return True
        if kind in ("test_command",):
            return self.test(node)
        return True  # heredoc bodies, comments, ...

    def list(self, node: Node) -> bool | None:
        """`a && b || c`: an unknown status is assumed false for a test (`[ -f x ]`), success for a command
        (`python3 prepare.py`), as in an `if`; either way a warning names the line."""
        children = node.children
        status = self.statement(children[0])
        if status is None:
            test = children[0].type in ("test_command", "negated_command")
            status = not test
            self.warn(f"list:{_line(node)}", f"line {_line(node)}: `{_short(children[0])}` cannot be known "
                                             f"statically; assumed {'true' if status else 'false'}")
        i = 1
        while i + 1 < len(children):
            operator, right = children[i].type, children[i + 1]
            if operator == "&&" and status or operator == "||" and not status:
                status = self.statement(right)
                status = True if status is None else status
            i += 2
        return status

    def if_statement(self, node: Node) -> bool | None:
        condition: list[Node] = []
        body: list[Node] = []
        clauses: list[Node] = []
        part = "condition"
        for child in node.children:
            if child.type in ("elif_clause", "else_clause"):
                clauses.append(child)
            elif child.type == "then":
                part = "body"
            elif child.is_named and child.type != "comment":
                (condition if part == "condition" else body).append(child)
        branches = [(condition, body)] + [self.clause(clause) for clause in clauses]
        for condition, body in branches:
            if not condition or self.condition(condition):  # no condition: the else
                return self.block(body)
        return True

    def clause(self, node: Node) -> tuple[list[Node], list[Node]]:
        condition: list[Node] = []
        body: list[Node] = []
        part = "condition" if node.type == "elif_clause" else "body"
        for child in node.children:
            if child.type == "then":
                part = "body"
            elif child.is_named and child.type != "comment":
                (condition if part == "condition" else body).append(child)
        return condition, body

    def condition(self, nodes: list[Node]) -> bool:
        """The status of an if's condition; not known statically: False, with a warning."""
        status = self.block(nodes)
        if status is None:
            where = _line(nodes[0])
            written = " ".join(_text(n).strip() for n in nodes if n.is_named)
            self.warn(f"if:{where}", f"line {where}: the condition `{_clip(written)}` cannot be known statically "
                                     "(it depends on the machine or the environment); assumed false")
            return False
        return status

    def case_statement(self, node: Node) -> bool | None:
        value_node = node.child_by_field_name("value")
        value = self.scalar(value_node) if value_node is not None else Field("", _line(node))
        items = [child for child in node.children if child.type == "case_item"]
        for item in items:
            patterns, body = self.case_item(item)
            if value.known:
                if any(p.known and fnmatch.fnmatchcase(value, p) for p in patterns):
                    return self.block(body)
            elif not _exits(body):
                assumed = patterns[0] if patterns else Field("", _line(node))
                self.warn(f"case:{_line(node)}", f"line {_line(node)}: `case {_clip(_text(value_node))}`: the value "
                                                 f"cannot be known statically; assumed `{assumed}` (its first branch "
                                                 "that does not exit)")
                name = _variable_of(value_node)
                if name and assumed.known and not any(c in assumed for c in "*?["):
                    self.vars[name] = Field(assumed, _line(node))  # later tests on it agree with this branch
                return self.block(body)
        return True

    def case_item(self, node: Node) -> tuple[list[Field], list[Node]]:
        patterns: list[Field] = []
        body: list[Node] = []
        seen_paren = False
        for child in node.children:
            if child.type == ")" and not seen_paren:
                seen_paren = True
            elif not seen_paren:
                if child.is_named:
                    patterns.append(self.scalar(child))
            elif child.type not in (";;", ";&", ";;&"):
                body.append(child)
        return patterns, body

    def for_statement(self, node: Node) -> bool | None:
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values: list[Field] = []
        seen_in = False
        for child in node.children:
            if child.type == "in":
                seen_in = True
            elif seen_in and child.is_named and child.type not in ("do_group", "comment"):
                values += self.fields(child)
        if not seen_in:
            values = list(self.positional)
        if any(not v.known for v in values):
            self.warn(f"for:{_line(node)}", f"line {_line(node)}: the words of this loop cannot be known "
                                            "statically; the loop is not followed")
            return True
        status: bool | None = True
        for value in values[:_MAX_LOOP]:
            if variable is not None:
                self.vars[_text(variable)] = value
            status = self.statement(body) if body is not None else True
        return status

    def loop_once(self, node: Node) -> bool | None:
        body = node.child_by_field_name("body")
        if body is None or not re.search(r"=|\bpython|\bverl", _text(body)):
            return True  # a wait loop (`while ! ray status; do sleep 1; done`): nothing the launch reads
        self.warn(f"loop:{_line(node)}", f"line {_line(node)}: a `{_text(node.children[0])}` loop cannot be followed "
                                         "statically; its body is read once")
        return self.statement(body)

    # ---- assignments -----------------------------------------------------------------------------

    def assignments(self, node: Node) -> None:
        targets = [node] if node.type == "variable_assignment" else \
            [c for c in node.children if c.type == "variable_assignment"]
        for target in targets:
            self.assign(target)

    def assign(self, node: Node, local: bool = False) -> None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return
        name = _text(name_node)
        index = None
        if name_node.type == "subscript":  # A[2]=x
            index = name_node.child_by_field_name("index")
            name = _text(name_node.child_by_field_name("name"))
        append = any(c.type == "+=" for c in node.children)
        if local and self.locals and name not in self.locals[-1]:
            self.locals[-1][name] = self.vars.get(name, _UNSET)
        if value_node is None:
            value: str | list[Field] = Field("", _line(node))
        elif value_node.type == "array":
            value = [f for child in value_node.named_children if child.type != "comment"
                     for f in self.fields(child)]
        else:
            value = self.scalar(value_node)
        old = self.vars.get(name)
        if index is not None:
            items = list(old) if isinstance(old, list) else ([old] if old is not None else [])
            position = self.arithmetic(index)
            if position is None or not isinstance(value, Field):
                self.vars[name] = Field(_text(node), _line(node), known=False)
                return
            while len(items) <= position:
                items.append(Field("", _line(node)))
            items[position] = value
            self.vars[name] = items
            return
        if append:
            if isinstance(value, list):
                base = old if isinstance(old, list) else ([old] if old is not None else [])
                value = list(base) + value
            elif isinstance(old, list):
                value = old[:-1] + [_join([old[-1], value], _line(node))] if old else [value]
            elif old is not None:
                value = _join([old, value], _line(node))
        self.vars[name] = value

    def declaration(self, node: Node) -> bool:
        local = node.children[0].type in ("local", "declare", "typeset") and bool(self.locals)
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, local=local)
            elif child.type == "variable_name" and local:
                name = _text(child)
                if name not in self.locals[-1]:
                    self.locals[-1][name] = self.vars.get(name, _UNSET)
                self.vars.pop(name, None)
        return True

    # ---- simple commands -------------------------------------------------------------------------

    def command(self, node: Node) -> bool | None:
        words: list[Field] = []
        name_seen = False
        for child in node.children:
            if child.type == "variable_assignment" and not name_seen:
                continue  # `A=1 cmd`: A is in cmd's environment only
            if child.type == "command_name":
                name_seen = True
                words += self.fields(child.named_children[0] if child.named_children else child)
            elif name_seen and child.is_named and not child.type.endswith("redirect") and child.type != "comment":
                words += self.fields(child)
        if not name_seen:
            self.assignments(node)  # only assignments
            return True
        if not words:
            return True
        command = Command(words, _line(node))
        if self.is_entry(words):
            raise _Found(command)
        name = words[0]
        if name in self.functions:
            return self.call(self.functions[name], words[1:], node)
        if name == "exit":
            raise _Exit(_line(node))
        if name == "return":
            raise _Return()
        if name == "shift":
            count = int(words[1]) if len(words) > 1 and words[1].isdigit() else 1
            self.positional = self.positional[count:]
            return True
        if name == "read":
            return self.read(node, words)
        if name in ("true", ":"):
            return True
        if name == "false":
            return False
        if name in ("test", "["):
            return None
        if name in ("source", ".") and len(words) > 1:
            self.warn(f"source:{words[1]}", f"line {_line(node)}: `{name} {words[1]}` is not read (the importer "
                                            "reads this file only); what it sets is not known")
            return True
        if name in ("eval", "bash", "sh") and re.search(r"verl|main_", " ".join(words[1:])):
            self.warn(f"eval:{_line(node)}", f"line {_line(node)}: `{name}` runs a command built at run time; the "
                                             "importer does not follow it")
        return None if name in ("command", "which", "type", "grep", "python", "python3", "nvidia-smi") else True

    def read(self, node: Node, words: list[Field]) -> bool:
        """`read -r A B <<< "x y"`: the here-string's words into the names (the last takes the rest); without a
        here-string the input is the run's, so the names are not known."""
        names = [w for w in words[1:] if not w.startswith("-")]
        here = next((c for c in node.children if c.type == "herestring_redirect"), None)
        value = self.scalar(here.named_children[-1]) if here is not None and here.named_children else None
        if value is None or not value.known:
            for name in names:
                self.vars[name] = Field(f"${name}", _line(node), known=False)
            self.warn(f"read:{_line(node)}", f"line {_line(node)}: `read` takes the run's input; "
                                             f"{', '.join(names) or 'REPLY'} not known")
            return True
        parts = value.split(None, max(len(names) - 1, 0)) if names else [value]
        for i, name in enumerate(names):
            self.vars[name] = Field(parts[i] if i < len(parts) else "", _line(node))
        return True

    def call(self, body: Node, arguments: list[Field], node: Node) -> bool | None:
        if self.depth >= _MAX_DEPTH:
            raise ShellError(f"line {_line(node)}: functions call each other more than {_MAX_DEPTH} deep")
        saved = self.positional
        self.positional = list(arguments)
        self.locals.append({})
        self.depth += 1
        try:
            return self.statement(body)
        except _Return:
            return True
        finally:
            self.depth -= 1
            for name, old in self.locals.pop().items():
                if old is _UNSET:
                    self.vars.pop(name, None)
                else:
                    self.vars[name] = old
            self.positional = saved

    # ---- conditions ---------------------------------------------------------------------------------

    def test(self, node: Node) -> bool | None:
        expressions = [c for c in node.named_children if c.type != "comment"]
        if not expressions:
            return False
        outer, self.in_test = self.in_test, True
        try:
            return self.expression(expressions[0], double=node.children[0].type == "[[")
        finally:
            self.in_test = outer

    def expression(self, node: Node, double: bool) -> bool | None:
        kind = node.type
        if kind == "parenthesized_expression":
            return self.expression(node.named_children[0], double)
        if kind == "unary_expression":
            operator = _text(node.children[0])
            operand = node.named_children[-1]
            if operator == "!":
                value = self.expression(operand, double)
                return None if value is None else not value
            if operator == "-v":
                return _text(operand) in self.vars
            value = self.scalar(operand)
            if operator in ("-z", "-n"):
                if not value.known:
                    return None
                return (value == "") == (operator == "-z")
            return None  # files (-f, -d, -e, ...): the machine's
        if kind == "binary_expression":
            left_node, right_node = node.named_children[0], node.named_children[-1]
            operator = _text(node.children[1]) if len(node.children) > 2 else ""
            if operator in ("&&", "-a", "||", "-o"):
                left = self.expression(left_node, double)
                right = self.expression(right_node, double)
                if operator in ("&&", "-a"):
                    return False if left is False or right is False else (None if None in (left, right) else True)
                return True if left or right else (None if None in (left, right) else False)
            left, right = self.scalar(left_node), self.scalar(right_node)
            if not (left.known and right.known):
                return None
            return _compare(left, operator, right, double)
        if kind == "negated_command" or kind == "test_command":
            return self.statement(node)
        value = self.scalar(node)  # `[ "$X" ]`: true when non-empty
        return (value != "") if value.known else None

    def arithmetic_status(self, node: Node) -> bool | None:
        inner = [c for c in node.named_children]
        if not inner:
            return True
        value = self.arithmetic(inner[0])
        return None if value is None else value != 0

    # ---- words ---------------------------------------------------------------------------------

    def scalar(self, node: Node) -> Field:
        """A word as one string (array elements joined by spaces, as in `[ "${A[*]}" ]`)."""
        fields = self.fields(node, split=False)
        return _join(fields, _line(node)) if fields else Field("", _line(node))

    def fields(self, node: Node, split: bool = True) -> list[Field]:
        """The words one node becomes after expansion, quote removal and word splitting."""
        groups: list[list[Field]] = [[]]
        keep = False
        for part, quoted in self.parts(node, quoted=False, split=split):
            keep = keep or quoted
            if part:
                groups[-1].append(part[0])
                groups += [[extra] for extra in part[1:]]
        words = [_join(group, _line(node)) for group in groups if group]
        if keep:
            return words or [Field("", _line(node))]
        return [word for word in words if word or not word.known]

    def parts(self, node: Node, quoted: bool, split: bool) -> list[tuple[list[Field], bool]]:
        """(fields, quoted) for each piece of a word; a piece of several fields splits the word there."""
        kind, line = node.type, _line(node)
        if kind == "concatenation":
            out = []
            for child in node.children:
                out += self.parts(child, quoted, split)
            return out
        if kind == "raw_string":
            return [([Field(_text(node)[1:-1], line)], True)]
        if kind == "ansi_c_string":
            body = _text(node)[2:-1]
            return [([Field(body.encode("latin-1", "backslashreplace").decode("unicode_escape"), line)], True)]
        if kind == "string":
            fields = self.string(node)
            return [(fields, bool(fields))]
        if kind in ("simple_expansion", "expansion"):
            values = self.expansion(node, quoted)
            return [(self.split(values, split and not quoted), quoted)]
        if kind == "command_substitution" or kind == "process_substitution":
            written = _text(node)
            self.warn(f"sub:{written}", f"line {line}: command substitution `{_clip(written)}` is not run; left "
                                        "as written")
            return [([Field(written, line, known=False)], quoted)]
        if kind == "arithmetic_expansion":
            inner = [c for c in node.named_children]
            value = self.arithmetic(inner[0]) if inner else 0
            if value is None:
                written = _text(node)
                self.warn(f"arith:{written}", f"line {line}: `{_clip(written)}` cannot be computed (a variable that "
                                              "is not a number, or an operator the importer does not know); left "
                                              "as written")
                return [([Field(written, line, known=False)], quoted)]
            return [([Field(str(value), line)], quoted)]
        if kind in ("word", "number", "extglob_pattern", "regex", "special_variable_name", "variable_name",
                    "test_operator"):
            return [([Field(_unescape(_text(node)), line)], False)]
        if kind == "command_name":
            return self.parts(node.named_children[0], quoted, split) if node.named_children else []
        if kind == "brace_expression":
            return [([Field(_text(node), line)], False)]
        return [([Field(_text(node), line)], False)]

    def string(self, node: Node) -> list[Field]:
        """A double-quoted string: expansions inside and no word splitting, except `"${A[@]}"` and `"$@"`,
        which give one word an element (none for an empty array)."""
        words: list[list[Field]] = [[]]
        only_all, saw_all = True, False  # nothing but `${A[@]}` expansions: no word when they are empty
        source, base = node.text, node.start_byte

        def literal(start: int, stop: int, line: int) -> None:
            nonlocal only_all
            if stop > start:
                only_all = False
                words[-1].append(Field(_unescape_double(source[start - base: stop - base].decode("utf-8",
                                                                                               "replace")), line))

        cursor = node.start_byte + 1
        for child in node.children:
            if child.type == '"':
                continue
            literal(cursor, child.start_byte, _line(node))
            if child.type == "string_content":
                literal(child.start_byte, child.end_byte, _line(child))
            elif child.type in ("simple_expansion", "expansion") and _expands_all(child):
                saw_all = True
                values = self.expansion(child, quoted=True)
                if values:
                    words[-1].append(values[0])
                    words += [[value] for value in values[1:]]
            else:
                only_all = False
                for part, _ in self.parts(child, quoted=True, split=False):
                    words[-1].append(_join(part, _line(child), " "))
            cursor = child.end_byte
        literal(cursor, node.end_byte - 1, _line(node))
        joined = [_join(group, _line(node)) for group in words if group]
        if not joined:
            return [] if saw_all and only_all else [Field("", _line(node))]
        return joined

    def split(self, values: list[Field], split: bool) -> list[Field]:
        if not split:
            return values
        out: list[Field] = []
        for value in values:
            if not value.known:
                out.append(value)
                continue
            out += [Field(word, value.line) for word in value.split()]
        return out

    def expansion(self, node: Node, quoted: bool) -> list[Field]:
        """`$X`, `${X...}`: its fields (an array's `[@]` gives one field an element)."""
        line, written = _line(node), _text(node)
        children = [c for c in node.children if c.type not in ("$", "${", "}")]
        if not children:
            return [Field("$", line)]
        length = indirect = False
        if children[0].type == "#" and len(children) > 1:
            length, children = True, children[1:]
        elif children[0].type == "!" and len(children) > 1:
            indirect, children = True, children[1:]
        target = children[0]
        rest = children[1:]
        values = self.lookup(target, written)
        if indirect:
            self.warn(f"ind:{written}", f"line {line}: indirect expansion `{written}` is not followed; left as "
                                        "written")
            return [Field(written, line, known=False)]
        if length:
            if values is None:
                return [Field("0", line)]
            if _is_all(target):
                return [Field(str(len(values)), line)]
            return [Field(str(len(_join(values, line))), line)]
        if not rest:
            if values is None:
                return self.unset(target, written, line)
            return values
        operator = _text(rest[0])
        operand_nodes = rest[1:]
        empty = values is None or (len(values) == 1 and values[0] == "") or values == []
        if operator in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            missing = empty if operator.startswith(":") else values is None
            operand = self.operand(operand_nodes, line)
            if operator in (":+", "+"):
                return [] if missing else [operand]
            if not missing:
                return values
            if operator in (":=", "="):
                self.vars[_text(target)] = operand
                return [operand]
            if operator in (":?", "?"):
                self.warn(f"req:{written}", f"line {line}: `{written}` needs a variable the script does not set "
                                            "(bash would stop here); left as written")
                return [Field(written, line, known=False)]
            return [operand] if operand or quoted else []
        if values is None:
            return self.unset(target, written, line)
        value = _join(values, line)
        if not value.known:
            return [Field(written, line, known=False)]
        if operator in ("%", "%%", "#", "##"):
            pattern = self.operand(operand_nodes, line)
            return [Field(_strip(value, pattern, operator), line, pattern.known)]
        if operator in ("/", "//", "/#", "/%"):
            pieces = [c for c in operand_nodes]
            slash = next((i for i, c in enumerate(pieces) if c.type == "/"), None)
            old = self.operand(pieces[:slash] if slash is not None else pieces, line)
            new = self.operand(pieces[slash + 1:], line) if slash is not None else Field("", line)
            if any(c in old for c in "*?["):
                return [Field(written, line, known=False)]
            count = -1 if operator == "//" else 1
            if operator == "/#":
                result = new + value[len(old):] if value.startswith(old) else value
            elif operator == "/%":
                result = value[: len(value) - len(old)] + new if value.endswith(old) else value
            else:
                result = value.replace(old, new, count)
            return [Field(result, line, old.known and new.known)]
        if operator in ("^^", ",,", "^", ","):
            changed = {"^^": value.upper(), ",,": value.lower(), "^": value[:1].upper() + value[1:],
                       ",": value[:1].lower() + value[1:]}[operator]
            return [Field(changed, line)]
        if operator == ":":  # ${X:offset:length}
            numbers = [self.arithmetic(c) for c in operand_nodes if c.type not in (":",)]
            if numbers and all(n is not None for n in numbers):
                start = numbers[0]
                stop = None if len(numbers) < 2 else start + numbers[1]
                return [Field(value[start:stop], line)]
        self.warn(f"op:{written}", f"line {line}: `{written}` is not expanded by the importer; left as written")
        return [Field(written, line, known=False)]

    def operand(self, nodes: list[Node], line: int) -> Field:
        pieces: list[Field] = []
        for child in nodes:
            for part, _ in self.parts(child, quoted=True, split=False):
                pieces.append(_join(part, line, " "))
        return _join(pieces, line) if pieces else Field("", line)

    def lookup(self, target: Node, written: str) -> list[Field] | None:
        """The fields a name (or `A[i]`, `A[@]`, `$1`, `$@`) holds; None when unset."""
        line = _line(target)
        if target.type == "subscript":
            name = _text(target.child_by_field_name("name"))
            index = target.child_by_field_name("index")
            value = self.vars.get(name)
            if value is None:
                return None
            items = value if isinstance(value, list) else [value]
            if _is_all(target):
                return list(items)
            position = self.arithmetic(index) if index is not None else None
            if position is None:
                return [Field(written, line, known=False)]
            return [items[position]] if -len(items) <= position < len(items) else None
        name = _text(target)
        if name in ("@", "*"):
            return list(self.positional)
        if name == "#":
            return [Field(str(len(self.positional)), line)]
        if name.isdigit():
            position = int(name)
            if position == 0:
                return [Field("run.sh", line, known=False)]
            return [self.positional[position - 1]] if position <= len(self.positional) else None
        if name in ("?", "$", "!", "-"):
            return [Field(written, line, known=False)]
        if name in self.hidden:
            return [self.hidden_arithmetic(self.hidden[name], line)]
        value = self.vars.get(name)
        if value is None:
            return None
        return value[:1] if isinstance(value, list) else [value]

    def hidden_arithmetic(self, written: str, line: int) -> Field:
        tree = _PARSER.parse(f"X={written}\n".encode())
        node = tree.root_node.named_children[0].child_by_field_name("value") if not tree.root_node.has_error \
            else None
        value = self.arithmetic(node.named_children[0]) if node is not None and node.named_children else None
        if value is None:
            self.warn(f"arith:{written}", f"line {line}: `{_clip(written)}` cannot be computed (a variable that "
                                          "is not a number, or an operator the importer does not know); left as "
                                          "written")
            return Field(written, line, known=False)
        return Field(str(value), line)

    def unset(self, target: Node, written: str, line: int) -> list[Field]:
        name = _text(target)
        if name.isdigit() or target.type == "subscript":
            return []  # the script's arguments (none), an unset array: nothing
        if self.in_test:
            self.warn(f"unset-test:{name}", f"line {line}: `${name}` is not set in the script; the test reads it as "
                                            "empty (the importer does not read the environment)")
            return [Field("", line)]
        self.warn(f"unset:{name}", f"line {line}: `${name}` is not set in the script (the importer does not read "
                                   "the environment); left as written")
        return [Field(written, line, known=False)]

    # ---- arithmetic ---------------------------------------------------------------------------------

    def arithmetic(self, node: Node) -> int | None:
        """bash's integer arithmetic over the tree; None when a part is not known."""
        try:
            return self._arith(node)
        except (ValueError, ZeroDivisionError, KeyError, IndexError, TypeError, RecursionError):
            return None

    def _arith(self, node: Node) -> int:
        kind = node.type
        if kind == "number":
            text = _text(node)
            return int(text, 0) if not re.fullmatch(r"0\d+", text) else int(text, 8)
        if kind in ("variable_name", "word"):
            return self._arith_value(_text(node))
        if kind in ("simple_expansion", "expansion", "string", "concatenation"):
            value = self.scalar(node)
            if not value.known:
                raise ValueError(value)
            return self._arith_text(value)
        if kind == "parenthesized_expression":
            return self._arith(node.named_children[0])
        if kind == "unary_expression":
            operator, value = _text(node.children[0]), self._arith(node.named_children[-1])
            return {"-": -value, "+": value, "!": int(not value), "~": ~value}[operator]
        if kind == "ternary_expression":
            condition, yes, no = node.named_children[:3]
            return self._arith(yes) if self._arith(condition) else self._arith(no)
        if kind == "binary_expression":
            left, right = node.named_children[0], node.named_children[-1]
            operator = _text(node.children[1])
            if operator in ("=", "+=", "-=", "*=", "/="):
                value = self._arith(right)
                if operator != "=":
                    current = self._arith(left)
                    value = {"+=": current + value, "-=": current - value, "*=": current * value,
                             "/=": _div(current, value)}[operator]
                self.vars[_text(left)] = Field(str(value), _line(node))
                return value
            a, b = self._arith(left), self._arith(right)
            return _ARITH[operator](a, b)
        if kind == "postfix_expression":
            target = node.named_children[0]
            value = self._arith(target)
            step = 1 if _text(node.children[-1]) == "++" else -1
            self.vars[_text(target)] = Field(str(value + step), _line(node))
            return value
        raise ValueError(kind)

    def _arith_value(self, name: str) -> int:
        value = self.vars.get(name)
        if value is None:
            if name in self.vars or re.fullmatch(r"[A-Za-z_]\w*", name):
                raise ValueError(name)  # unset: bash reads 0, but that is the environment's
        if isinstance(value, list):
            value = value[0] if value else Field("0", 0)
        if not value.known:
            raise ValueError(name)
        return self._arith_text(value)

    def _arith_text(self, text: str) -> int:
        text = text.strip()
        if re.fullmatch(r"[+-]?\d+", text):
            return int(text)
        tree = _PARSER.parse(f"(( {text} ))".encode())
        inner = tree.root_node.named_children[0].named_children if tree.root_node.named_children else []
        if tree.root_node.has_error or not inner:
            raise ValueError(text)
        return self._arith(inner[0])


_UNSET = object()
_ARITH = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": lambda a, b: _div(a, b), "%": lambda a, b: a - b * _div(a, b), "**": lambda a, b: a ** b,
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "&&": lambda a, b: int(bool(a and b)), "||": lambda a, b: int(bool(a or b)),
    "&": lambda a, b: a & b, "|": lambda a, b: a | b, "^": lambda a, b: a ^ b,
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b,
}


def _div(a: int, b: int) -> int:
    quotient = abs(a) // abs(b)  # bash truncates toward zero
    return quotient if (a >= 0) == (b >= 0) else -quotient


def _compare(left: str, operator: str, right: str, double: bool) -> bool | None:
    if operator in ("=", "=="):
        return fnmatch.fnmatchcase(left, right) if double else left == right
    if operator == "!=":
        return not fnmatch.fnmatchcase(left, right) if double else left != right
    if operator == "=~":
        try:
            return re.search(right, left) is not None
        except re.error:
            return None
    if operator in ("<", ">"):
        return left < right if operator == "<" else left > right
    numbers = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-gt": lambda a, b: a > b,
               "-ge": lambda a, b: a >= b, "-lt": lambda a, b: a < b, "-le": lambda a, b: a <= b}
    if operator in numbers:
        try:
            return numbers[operator](int(left), int(right))
        except ValueError:
            return None
    return None


def _strip(value: str, pattern: str, operator: str) -> str:
    """`${X%pat}` (shortest suffix), `%%` (longest), `#` (shortest prefix), `##` (longest)."""
    n = len(value)
    if operator.startswith("%"):
        starts = range(n, -1, -1) if operator == "%" else range(0, n + 1)
        for start in starts:
            if fnmatch.fnmatchcase(value[start:], pattern):
                return value[:start]
        return value
    ends = range(0, n + 1) if operator == "#" else range(n, -1, -1)
    for end in ends:
        if fnmatch.fnmatchcase(value[:end], pattern):
            return value[end:]
    return value


def _join(fields: list[Field], line: int, separator: str = "") -> Field:
    if len(fields) == 1:
        return fields[0]
    text = separator.join(fields)
    return Field(text, fields[0].line if fields else line, all(f.known for f in fields))


def _unescape(text: str) -> str:
    """An unquoted word: `\\x` is x, `\\<newline>` is nothing."""
    return re.sub(r"\\(\n|.)", lambda m: "" if m.group(1) == "\n" else m.group(1), text, flags=re.S)


def _unescape_double(text: str) -> str:
    """Inside double quotes a backslash escapes only $ ` " \\ and a newline."""
    return re.sub(r'\\([$`"\\\n])', lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _expands_all(node: Node) -> bool:
    """`${A[@]}`, `$@`, `${@}`: one field an element."""
    children = [c for c in node.children if c.type not in ("$", "${", "}")]
    if len(children) != 1:
        return False
    target = children[0]
    return _text(target) in ("@",) or (target.type == "subscript" and _text(target.child_by_field_name("index"))
                                       == "@")


def _is_all(target: Node) -> bool:
    index = target.child_by_field_name("index") if target.type == "subscript" else None
    return index is not None and _text(index) in ("@", "*")


def _variable_of(node: Node | None) -> str | None:
    """The variable a `case` word names (`$X`, `"${X}"`), so an assumed branch can bind it."""
    if node is None:
        return None
    found = re.fullmatch(r'"?\$\{?([A-Za-z_]\w*)\}?"?', _text(node))
    return found.group(1) if found else None


def _exits(body: list[Node]) -> bool:
    return any(re.search(r"(^|[\s;])exit\b", _text(node)) for node in body)


def _short(node: Node) -> str:
    return _clip(_text(node).strip())


def _clip(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
