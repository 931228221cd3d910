from rlgraph.tasks import arith, get_task


def test_prompt_and_answer_text():
    assert arith.prompt_text(12, 34) == "12+34="
    assert arith.answer_text(12, 34) == "46"
    assert arith.answer_text(99, 99) == "198"


def test_rows_follow_verl_schema_and_are_correct():
    rows = arith.make_rows("val")
    assert rows[0].keys() == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    for i, row in enumerate(rows):
        a, b = row["extra_info"]["a"], row["extra_info"]["b"]
        assert row["data_source"] == "rlgraph/arith"
        assert row["prompt"] == f"{a}+{b}="
        assert row["reward_model"] == {"style": "rule", "ground_truth": str(a + b)}
        assert row["extra_info"]["split"] == "val" and row["extra_info"]["index"] == i


def test_splits_are_disjoint_cover_all_pairs_and_are_deterministic():
    train, val = arith.split_pairs("train"), arith.split_pairs("val")
    assert len(val) == 500 and len(train) == 9500
    assert not set(train) & set(val)
    assert set(train) | set(val) == {(a, b) for a in range(100) for b in range(100)}
    assert arith.split_pairs("val") == val  # same order every call
    # Pinned: the split must not drift without a bump of DATA_VERSION (the cache file name).
    assert arith.DATA_VERSION == 1
    assert val[:3] == [(44, 47), (50, 94), (39, 37)]
    assert arith.make_rows("train")[0]["prompt"] == "{}+{}=".format(*train[0])


def test_exact_match():
    score = arith.exact_match
    assert score("rlgraph/arith", "46", "46") == 1.0
    assert score("rlgraph/arith", " 46 \n", "46") == 1.0
    assert score("rlgraph/arith", "46</s>7", "46") == 1.0  # anything after EOS does not count
    assert score("rlgraph/arith", "47", "46") == 0.0
    assert score("rlgraph/arith", "460", "46") == 0.0
    assert score("rlgraph/arith", "", "46") == 0.0
    assert score("rlgraph/arith", "46", 46, extra_info={"index": 0}) == 1.0


def test_format_ok():
    assert arith.format_ok("rlgraph/arith", " 47</s>", "46") == 1.0
    assert arith.format_ok("rlgraph/arith", "4 7", "46") == 0.0
    assert arith.format_ok("rlgraph/arith", "", "46") == 0.0
    assert arith.format_ok("rlgraph/arith", "-3", "46") == 0.0


def test_get_task():
    assert get_task("arith") is arith
    try:
        get_task("nope")
    except KeyError as e:
        assert "arith" in str(e)
    else:
        raise AssertionError("expected KeyError")
