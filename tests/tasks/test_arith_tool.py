import pytest

from rlgraph.tasks import DATA_SOURCES, arith_tool, default_compute_score, get_task
from rlgraph.workers.envs import ToolCall, Turn
from rlgraph.workers.envs.calculator import Calculator


def test_rows_follow_verl_schema_and_are_correct():
    rows = arith_tool.make_rows("val")
    assert rows[0].keys() == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    for i, row in enumerate(rows):
        a, b = row["extra_info"]["a"], row["extra_info"]["b"]
        assert 10 <= a <= 99 and 10 <= b <= 99
        assert row["data_source"] == "rlgraph/arith-tool"
        assert row["prompt"] == f"{a}*{b}="
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(a * b)}
        assert row["extra_info"]["split"] == "val" and row["extra_info"]["index"] == i


def test_splits_are_disjoint_cover_all_pairs_and_are_deterministic():
    train, val = arith_tool.split_pairs("train"), arith_tool.split_pairs("val")
    assert len(val) == 500 and len(train) == 7600
    assert not set(train) & set(val)
    assert set(train) | set(val) == {(a, b) for a in range(10, 100) for b in range(10, 100)}
    assert arith_tool.split_pairs("val") == val
    # Pinned: the split must not drift without a bump of DATA_VERSION (the cache file name).
    assert arith_tool.DATA_VERSION == 1
    assert val[:3] == [(41, 99), (89, 62), (11, 22)]
    with pytest.raises(ValueError, match="unknown split 'test'"):
        arith_tool.split_pairs("test")


def test_the_task_is_a_builtin_data_set(tmp_path, monkeypatch):
    from rlgraph.data import resolve_data_path
    import pyarrow.parquet as pq

    monkeypatch.setenv("RLGRAPH_CACHE", str(tmp_path))
    assert get_task("arith-tool") is arith_tool
    rows = pq.read_table(resolve_data_path("builtin:arith-tool/val")).to_pylist()
    assert [row["prompt"] for row in rows] == [row["prompt"] for row in arith_tool.make_rows("val")]


@pytest.mark.parametrize("solution, score", [
    ("<tool_call>calc 37*48</tool_call><tool_response>1776</tool_response>1776</s>", 1.0),
    ("<tool_call>calc 37*48</tool_call><tool_response>1776</tool_response> 1776 ", 1.0),  # stripped
    ("1776</s>", 1.0),  # a direct answer
    ("1776</s>1777", 1.0),  # nothing after EOS counts
    ("<tool_call>calc 73*48</tool_call><tool_response>3504</tool_response>3504</s>", 0.0),  # a wrong call
    ("<tool_call>calc 37*48</tool_call><tool_response>1776</tool_response>", 0.0),  # the reply is not an answer
    ("<tool_call>calc 37*48</tool_call><tool_response>1776</tool_response>1777</s>", 0.0),  # miscopied
    ("<tool_call>calc 37*48</tool_call>1776</s>", 0.0),  # no reply: the call's text is part of the answer
    ("", 0.0),
])
def test_exact_match_scores_the_answer_after_the_last_tool_reply(solution, score):
    assert arith_tool.exact_match("rlgraph/arith-tool", solution, "1776") == score
    assert DATA_SOURCES["rlgraph/arith-tool"] == "rlgraph.tasks.arith_tool:exact_match"
    assert default_compute_score("rlgraph/arith-tool", solution, 1776) == score


@pytest.mark.parametrize("expression, value", [
    ("37*48", "1776"), (" (1+2)*3 ", "9"), ("-5+2", "-3"), ("7/2", "3.5"), ("1/3", "0.333333"), ("10/5", "2"),
])
def test_evaluate(expression, value):
    assert arith_tool.evaluate(expression) == value


@pytest.mark.parametrize("expression, message", [
    ("37*", "cannot parse"),
    ("", "empty expression"),
    ("37**48", "only numbers and"),
    ("1.5*2", "only integers"),
    ("1/0", "division by zero"),
    ("9" * 31, "result too large"),
    ("99999999999*" * 3 + "9", "result too large"),
    ("1+" * 150 + "1", "over 200 characters"),
    # code never runs: names, calls, attributes, subscripts and lambdas are refused before anything is evaluated
    ("__import__('os').system('touch /tmp/pwned')", "only numbers and"),
    ("open('/etc/passwd').read()", "only numbers and"),
    ("(lambda: 1)()", "only numbers and"),
    ("[1][0]", "only numbers and"),
    ("x", "only numbers and"),
])
def test_evaluate_refuses_anything_else(expression, message):
    with pytest.raises(ValueError, match=message):
        arith_tool.evaluate(expression)


def _turn(tool_calls=(), errors=(), text="") -> Turn:
    return Turn(index=0, text=text, token_ids=[1, 2, 3], tool_calls=list(tool_calls), tool_call_errors=list(errors),
                ended_by_eos=not tool_calls and not errors)


def test_calculator_answers_a_good_call():
    env = Calculator()
    assert [tool["function"]["name"] for tool in env.tools] == ["calc"]
    assert env.tools[0]["function"]["parameters"]["required"] == ["expression"]
    assert env.reset({"prompt_text": "37*48="}) is None
    observation = env.step(_turn([ToolCall("calc", {"expression": "37*48"})], text="<tool_call>calc 37*48</tool_call>"))
    assert (observation.text, observation.done, observation.tool_errors, observation.reward) == ("1776", False, 0, 0.0)


def test_calculator_answers_a_bad_expression_with_an_error_reply():
    observation = Calculator().step(_turn([ToolCall("calc", {"expression": "37*"})]))
    assert (observation.text, observation.done, observation.tool_errors) == ("error: cannot parse", False, 1)


def test_a_turn_without_a_call_ends_the_episode():
    observation = Calculator().step(_turn(text="1776"))
    assert observation.done and observation.text is None and observation.reward == 0.0


def test_the_tool_tags_are_single_tokens_kept_by_decode():
    from rlgraph.models.char_tokenizer import build_char_tokenizer

    tokenizer = build_char_tokenizer(added_tokens=arith_tool.TOOL_TAGS)
    ids = tokenizer("<tool_response>1776</tool_response>")["input_ids"]
    assert len(ids) == 1 + 4 + 1
    assert ids[0] == tokenizer.convert_tokens_to_ids("<tool_response>")
    text = "37*48=<tool_call>calc 37*48</tool_call><tool_response>1776</tool_response>1776"
    ids = tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]
    assert tokenizer.decode(ids, skip_special_tokens=False) == text + "</s>"
    assert tokenizer.decode(ids, skip_special_tokens=True) == text  # tags are not special: only EOS goes
    assert len(tokenizer) == len(build_char_tokenizer()) + 4  # the arith-gpt ids are unchanged below them
