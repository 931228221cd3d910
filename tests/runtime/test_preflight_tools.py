"""Pre-flight renders the trained generate's environment's tool schemas into the prompts, in the chat_template
tool format (docs/environments.md), and only there."""

from __future__ import annotations

import pytest

from .helpers import SPECS, plan_from_spec
from rlgraph.runtime.preflight import _check_envs


def _qwen_style_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "<|im_end|>": 1}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", unk_token="<unk>")
    tokenizer.chat_template = (
        "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
        "{% for m in messages %}"
        "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tokenizer


@pytest.mark.parametrize("tool_format, rendered", [("chat_template", ["calc"]), ("auto", ["calc"]), ("tag", [])])
def test_the_chat_template_format_renders_the_environments_tools(tool_format, rendered):
    plan = plan_from_spec(SPECS / "grpo_arith_tool.rl", f"calc.tool_format={tool_format}")
    tokenizer = _qwen_style_tokenizer()
    if tool_format == "tag":  # the tag format needs its four tags as single tokens
        tokenizer.add_special_tokens({"additional_special_tokens": [
            "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]})
    tools = _check_envs(plan, tokenizer)
    assert [t["function"]["name"] for t in tools] == rendered
