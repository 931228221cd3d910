"""Pre-flight renders the trained generate's environment's tool schemas into the prompts, in the chat_template
tool format (docs/environments.md), and only there."""

from __future__ import annotations

import pytest

from .helpers import SPECS, plan_from_spec
from tests.workers.helpers import qwen_style_tokenizer
from rlgraph.runtime.preflight import _check_envs


@pytest.mark.parametrize("tool_format, rendered", [("chat_template", ["calc"]), ("auto", ["calc"]), ("tag", [])])
def test_the_chat_template_format_renders_the_environments_tools(tool_format, rendered):
    plan = plan_from_spec(SPECS / "grpo_arith_tool.rl", f"calc.tool_format={tool_format}")
    tokenizer = qwen_style_tokenizer()
    if tool_format == "tag":  # the tag format needs its four tags as single tokens
        tokenizer.add_special_tokens({"additional_special_tokens": [
            "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]})
    tools = _check_envs(plan, tokenizer)
    assert [t["function"]["name"] for t in tools] == rendered
