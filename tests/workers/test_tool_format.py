"""Reading tool calls from a model's turn and writing an environment's reply as ids (rlgraph/workers/envs/tools.py)."""

from __future__ import annotations

import pytest

from rlgraph.workers.envs import ToolCall, tool_schema
from rlgraph.workers.envs.tools import ToolFormatError, make_tool_format, parse_call

CALC = tool_schema("calc", "evaluate an arithmetic expression", {"expression": {"type": "string"}})
SEARCH = tool_schema("search", "look up", {"query": {"type": "string"}, "limit": {"type": "integer"}},
                     required=["query"])
TOOLS = [CALC, SEARCH]


def test_short_form_for_a_one_parameter_tool():
    assert parse_call("calc 37*48", TOOLS) == ToolCall("calc", {"expression": "37*48"})


def test_json_form_hermes_style_and_string_arguments():
    assert parse_call('{"name": "search", "arguments": {"query": "x", "limit": 3}}', TOOLS) == \
        ToolCall("search", {"query": "x", "limit": 3})
    assert parse_call('{"name": "calc", "arguments": "{\\"expression\\": \\"1+1\\"}"}', TOOLS) == \
        ToolCall("calc", {"expression": "1+1"})


@pytest.mark.parametrize("body, message", [
    ("sqrt 4", "unknown tool 'sqrt'"),
    ("search x", "takes 2 arguments: write the call as JSON"),
    ('{"name": "search", "arguments": {}}', "missing query"),
    ('{"name": "search", "arguments": {"query": "x", "page": 2}}', "no argument page"),
    ('{"name": "search", "arguments": {"query": "x", "limit": "3"}}', "limit must be a integer"),
    ('{"name": "search", "arguments": {"query": "x", "limit": true}}', "limit must be a integer"),
    ('{"name": "calc", ', "not valid JSON"),
    ('{"arguments": {}}', 'has no "name"'),
])
def test_calls_that_cannot_be_used_say_why(body, message):
    with pytest.raises(ValueError, match=message):
        parse_call(body, TOOLS)


class _Tokenizer:
    """A tokenizer with the four tags as single tokens (what `tag` needs), one id per other character."""

    TAGS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
    chat_template = None
    unk_token_id = 0

    def encode(self, text, add_special_tokens=False):
        ids = []
        while text:
            tag = next((t for t in self.TAGS if text.startswith(t)), None)
            if tag:
                ids.append(1000 + self.TAGS.index(tag))
                text = text[len(tag):]
            else:
                ids.append(ord(text[0]))
                text = text[1:]
        return ids


def test_tag_format_parses_every_call_and_reports_the_bad_and_unclosed_ones():
    fmt = make_tool_format("auto", _Tokenizer(), TOOLS)
    assert fmt.name == "tag" and fmt.stop_token_ids == (1001,)
    calls, errors = fmt.parse("let me see <tool_call>calc 2*3</tool_call> and <tool_call>nope 1</tool_call>"
                              "<tool_call>calc 4")
    assert calls == [ToolCall("calc", {"expression": "2*3"})]
    assert len(errors) == 2 and "unknown tool 'nope'" in errors[0] and "has no </tool_call>" in errors[1]
    assert fmt.parse("just an answer 42") == ([], [])


def test_tag_format_reply_is_the_wrapped_text_tokenised_alone():
    fmt = make_tool_format("tag", _Tokenizer(), TOOLS)
    assert fmt.reply_ids("6") == [1002, ord("6"), 1003]


def test_tag_format_needs_the_tags_as_single_tokens():
    class Plain(_Tokenizer):
        TAGS = []

    with pytest.raises(ToolFormatError, match="needs '</tool_call>' as one token"):
        make_tool_format("tag", Plain(), TOOLS)
    with pytest.raises(ToolFormatError, match="has no chat template"):
        make_tool_format("chat_template", _Tokenizer(), TOOLS)


def test_chat_template_reply_frame_from_a_real_template():
    """A Qwen-style template: the reply starts after the assistant's end-of-turn token (the newline the
    template writes after it included) and ends with the next assistant header."""
    from .helpers import qwen_style_tokenizer

    tokenizer = qwen_style_tokenizer()
    fmt = make_tool_format("auto", tokenizer, TOOLS)
    assert fmt.name == "chat_template" and fmt.stop_token_ids == ()
    assert fmt.reply_prefix == "\n<|im_start|>user\n<tool_response>\n"
    assert fmt.reply_suffix == "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"


def test_an_environment_without_tools_on_a_model_without_a_template_talks_plain_text():
    class Plain(_Tokenizer):
        TAGS = []

    fmt = make_tool_format("auto", Plain(), [])
    assert fmt.name == "plain" and fmt.stop_token_ids == ()
    assert fmt.parse("<tool_call>calc 1</tool_call>") == ([], [])
    assert fmt.reply_ids("ok") == [ord("o"), ord("k")]
