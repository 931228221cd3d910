import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlgraph.data import DataError, load_rows

GOOD = {"data_source": "t", "prompt": "1+1=", "reward_model": {"style": "rule", "ground_truth": "2"}}


def write_jsonl(path, lines):
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def test_jsonl_rows_load_and_normalise(tmp_path):
    chat = {"prompt": [{"role": "user", "content": "2+2="}], "reward_model": {"ground_truth": "4"}}
    rows = load_rows(write_jsonl(tmp_path / "mine.jsonl", [GOOD, "", chat]))
    assert rows[0] == {**GOOD, "extra_info": {}}
    assert rows[1]["data_source"] == "mine"  # default: the file's stem
    assert rows[1]["prompt"] == chat["prompt"]


@pytest.mark.parametrize(
    "bad, problem",
    [
        ({"reward_model": {"ground_truth": "2"}}, 'no "prompt" field'),
        ({**GOOD, "prompt": ""}, '"prompt" is an empty string'),
        ({**GOOD, "prompt": 7}, '"prompt" is a number'),
        ({**GOOD, "prompt": []}, '"prompt" is an empty list'),
        ({**GOOD, "prompt": [{"role": "user"}]}, 'message 0 has no "content"'),
        ({**GOOD, "prompt": ["hi"]}, "message 0 is a string, not an object"),
        ({"prompt": "1+1="}, 'no "reward_model" field'),
        ({**GOOD, "reward_model": {"style": "rule"}}, 'no "ground_truth"'),
        ({**GOOD, "data_source": 3}, '"data_source" is a number'),
        ({**GOOD, "extra_info": [1]}, '"extra_info" is a list'),
        ([1, 2], "expected a JSON object, got a list"),
    ],
)
def test_bad_jsonl_row_names_file_line_problem_and_fix(tmp_path, bad, problem):
    path = write_jsonl(tmp_path / "train.jsonl", [GOOD, "", bad, GOOD])  # the bad row is on line 3
    with pytest.raises(DataError) as info:
        load_rows(path)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ")
    assert problem in message
    assert "give" in message or "write" in message  # says how to fix it
    assert info.value.file == str(path) and info.value.row == 3


def test_bad_json_line(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [GOOD, '{"prompt": "1+1=", '])
    with pytest.raises(DataError, match=r"train\.jsonl:2: not valid JSON") as info:
        load_rows(path)
    assert info.value.row == 2


def test_bad_parquet_row_names_file_and_row(tmp_path):
    rows = [GOOD, GOOD, {**GOOD, "reward_model": {"style": "rule", "ground_truth": None}}]
    path = tmp_path / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    with pytest.raises(DataError) as info:
        load_rows(path)
    assert str(info.value).startswith(f"{path}: row 3: ")
    assert 'no "ground_truth"' in str(info.value)
    assert info.value.row == 3


def test_parquet_with_chat_prompts(tmp_path):
    row = {
        "data_source": "openai/gsm8k",
        "prompt": [{"role": "user", "content": "2+2="}],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "4"},
        "extra_info": {"split": "train", "index": 0},
    }
    path = tmp_path / "gsm8k.parquet"
    pq.write_table(pa.Table.from_pylist([row]), path)
    assert load_rows(path) == [row]


def test_unreadable_files(tmp_path):
    with pytest.raises(DataError, match="cannot read the file"):
        load_rows(tmp_path / "missing.jsonl")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"junk\.parquet: cannot read the file as parquet"):
        load_rows(tmp_path / "junk.parquet")
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="has no rows"):
        load_rows(tmp_path / "empty.jsonl")
    (tmp_path / "latin.jsonl").write_bytes(b'{"prompt": "\xe9"}\n')
    with pytest.raises(DataError, match="not UTF-8"):
        load_rows(tmp_path / "latin.jsonl")


def test_several_files_are_read_in_order_and_a_bad_row_names_its_own_file(tmp_path):
    from rlgraph.data import load_files

    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    row = {"prompt": "1+1=", "reward_model": {"ground_truth": "2"}}
    write_jsonl(first, [json.dumps({**row, "prompt": "a"}), json.dumps({**row, "prompt": "b"})])
    write_jsonl(second, [json.dumps({**row, "prompt": "c"})])
    rows = load_files([str(first), str(second)])
    assert [r["prompt"] for r in rows] == ["a", "b", "c"]
    assert [r["data_source"] for r in rows] == ["first", "first", "second"]
    write_jsonl(second, [json.dumps(row), json.dumps({"prompt": "x"})])
    with pytest.raises(DataError) as bad:
        load_files([str(first), str(second)])
    assert (bad.value.file, bad.value.row) == (str(second), 2)
    assert str(bad.value).startswith(f"{second}:2: ")


# --- demonstrations (SFT rows): a response to imitate, in either of verl's SFT schemas ---

DEMO = {"prompt": "1+1=", "response": "2"}


def test_demonstrations_load_from_response_columns_and_from_conversations(tmp_path):
    conversation = {"messages": [{"role": "system", "content": "add"}, {"role": "user", "content": "2+2="},
                                 {"role": "assistant", "content": "4"}]}
    rows = load_rows(write_jsonl(tmp_path / "sft.jsonl", [DEMO, conversation]), demonstrations=True)
    assert rows[0]["prompt"] == "1+1=" and rows[0]["response"] == "2"  # no ground truth needed
    assert rows[1]["prompt"] == conversation["messages"][:-1]  # the conversation before the answer
    assert rows[1]["response"] == "4"


@pytest.mark.parametrize(
    "bad, problem",
    [
        ({"prompt": "1+1="}, 'no "response" field'),
        ({**DEMO, "response": ""}, '"response" is an empty string'),
        ({**DEMO, "response": 2}, '"response" is a number'),
        ({"messages": [{"role": "user", "content": "1+1="}]}, "at least 2 messages"),
        ({"messages": [{"role": "assistant", "content": "2"}, {"role": "user", "content": "1+1="}]},
         "not an assistant message"),
    ],
)
def test_a_bad_demonstration_names_file_row_problem_and_fix(tmp_path, bad, problem):
    path = write_jsonl(tmp_path / "sft.jsonl", [DEMO, DEMO, bad])  # the bad row is on line 3
    with pytest.raises(DataError) as info:
        load_rows(path, demonstrations=True)
    message = str(info.value)
    assert message.startswith(f"{path}:3: ") and problem in message
    assert '"response"' in message and "messages" in message  # the hint shows both schemas
    assert info.value.row == 3


def test_a_parquet_demonstration_without_a_response_names_its_row(tmp_path):
    path = tmp_path / "sft.parquet"
    pq.write_table(pa.Table.from_pylist([DEMO, {"prompt": "2+2=", "response": None}]), path)
    with pytest.raises(DataError, match=r'sft\.parquet.*row 2.*no "response" field'):
        load_rows(path, demonstrations=True)
