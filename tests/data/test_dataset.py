import copy

from rlgraph.data import RLDataset
from rlgraph.tasks import arith

TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant {% endif %}"
)


def row(prompt, answer="2", **extra):
    return {"data_source": "t", "prompt": prompt, "reward_model": {"ground_truth": answer}, "extra_info": extra}


def test_plain_prompts_are_exactly_the_tokenizer_ids(char_tokenizer):
    rows = arith.make_rows("val")[:5]
    dataset = RLDataset(rows, char_tokenizer, max_prompt_length=16)
    assert len(dataset) == 5 and dataset.num_filtered == 0
    item = dataset[2]
    assert item["input_ids"] == char_tokenizer(rows[2]["prompt"])["input_ids"]
    assert len(item["input_ids"]) == len(rows[2]["prompt"])  # one id per character, no BOS
    assert item["prompt_text"] == rows[2]["prompt"]
    assert item["ground_truth"] == rows[2]["reward_model"]["ground_truth"]
    assert item["data_source"] == "rlgraph/arith"
    assert item["extra_info"] == rows[2]["extra_info"]
    assert item["index"] == 2


def test_messages_without_a_template_join_their_contents(char_tokenizer):
    messages = [{"role": "system", "content": "add"}, {"role": "user", "content": "1+1="}]
    item = RLDataset([row(messages)], char_tokenizer)[0]
    assert item["prompt_text"] == "add\n1+1="
    assert item["input_ids"] == char_tokenizer("add\n1+1=")["input_ids"]


def test_chat_template_is_applied_with_a_generation_prompt(char_tokenizer):
    tokenizer = copy.deepcopy(char_tokenizer)
    tokenizer.chat_template = TEMPLATE
    calls = []
    original = tokenizer.apply_chat_template

    def spy(messages, **kwargs):
        calls.append(kwargs)
        return original(messages, **kwargs)

    tokenizer.apply_chat_template = spy
    dataset = RLDataset([row([{"role": "user", "content": "1+1="}]), row("2+2=", "4")], tokenizer)
    assert all(call["add_generation_prompt"] for call in calls) and any(call["tokenize"] for call in calls)
    assert dataset[0]["prompt_text"] == "user 1+1= assistant "
    assert dataset[0]["input_ids"] == char_tokenizer("user 1+1= assistant ")["input_ids"]
    assert dataset[1]["prompt_text"] == "user 2+2= assistant "  # a string prompt is one user message


def test_an_environments_tools_are_rendered_by_the_chat_template_into_every_prompt(char_tokenizer):
    """A Qwen-style template writes the tool schemas it is given before the conversation; none given, none written."""
    from rlgraph.workers.envs import tool_schema

    tokenizer = copy.deepcopy(char_tokenizer)
    tokenizer.chat_template = ("{% if tools %}tools:{% for t in tools %} {{ t['function']['name'] }}{% endfor %}. "
                               "{% endif %}" + TEMPLATE)
    calc = tool_schema("calc", "evaluate an expression", {"expr": {"type": "string"}})
    with_tools = RLDataset([row("1+1=")], tokenizer, tools=[calc])[0]
    assert with_tools["prompt_text"] == "tools: calc. user 1+1= assistant "
    assert with_tools["input_ids"] == char_tokenizer("tools: calc. user 1+1= assistant ")["input_ids"]
    assert RLDataset([row("1+1=")], tokenizer)[0]["prompt_text"] == "user 1+1= assistant "


def test_overlong_prompts_are_filtered_and_counted(char_tokenizer):
    rows = [row("1+1="), row("1+1+1+1="), row("12+1="), row("1+1+1+1+1+1+1=")]
    dataset = RLDataset(rows, char_tokenizer, max_prompt_length=5)
    assert dataset.num_filtered == 2
    assert [item["prompt_text"] for item in dataset] == ["1+1=", "12+1="]
    assert [item["index"] for item in dataset] == [0, 2]  # rows keep their place in the file
    assert RLDataset(rows, char_tokenizer).num_filtered == 0


def test_demonstrations_end_with_eos_and_overlong_responses_are_filtered(char_tokenizer):
    rows = arith.make_rows("sft")[:4] + [{**row("1+1="), "response": "12345678"}]
    dataset = RLDataset(rows, char_tokenizer, max_prompt_length=16, demonstrations=True, max_response_length=4)
    assert len(dataset) == 4 and dataset.num_filtered == 1  # 8 digits + EOS > 4 tokens
    item = dataset[0]
    answer = rows[0]["response"]
    assert item["response_ids"] == char_tokenizer(answer, add_special_tokens=False)["input_ids"] + [
        char_tokenizer.eos_token_id]
    assert item["response_text"] == answer and item["ground_truth"] == answer
    assert item["pad_token_id"] == char_tokenizer.pad_token_id
