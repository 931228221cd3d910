import dataclasses
import json
from pathlib import Path

import pytest

from rlgraph.tasks import arith_tool


@pytest.fixture(scope="module")
def arith_tool_gpt():
    """(model, tokenizer, build report) of builtin:arith-tool-gpt, its hashes checked, loaded the plain HF way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlgraph.models import resolve_model_path

    folder = Path(resolve_model_path("builtin:arith-tool-gpt"))
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return model.eval(), tokenizer, json.loads((folder / "rlgraph_build.json").read_text())


def test_the_tokenizer_has_the_tool_tags_as_single_ids(arith_tool_gpt):
    model, tokenizer, _ = arith_tool_gpt
    assert tokenizer("<tool_response>1776</tool_response>")["input_ids"] == [
        tokenizer.convert_tokens_to_ids("<tool_response>"), *tokenizer("1776")["input_ids"],
        tokenizer.convert_tokens_to_ids("</tool_response>")]
    assert [tokenizer.convert_tokens_to_ids(tag) for tag in arith_tool.TOOL_TAGS] == [50, 51, 52, 53]
    assert model.config.vocab_size == len(tokenizer) == 54
    assert tokenizer.padding_side == "left" and tokenizer.eos_token == "</s>" and not tokenizer.chat_template


def test_the_recorded_numbers_leave_rl_room_to_lift(arith_tool_gpt):
    """Greedy, the model mostly answers in its head (and wrongly); sampled, it calls the tool often enough
    for GRPO to find the reward, and copies what the calculator says."""
    _, _, report = arith_tool_gpt
    greedy, sampled = report["greedy"], report["sampled"]
    assert report["val_accuracy"] == greedy["accuracy"] and report["val_rows"] == 500
    assert 0.05 <= greedy["accuracy"] <= 0.30
    assert 0.25 <= sampled["tool_call_rate"] <= 0.60
    assert greedy["copy_rate"] >= 0.95
    assert 0.05 <= sampled["accuracy"] < sampled["tool_call_rate"]  # some calls are wrong: room to learn


def test_greedy_episodes_with_the_calculator_reproduce_the_recorded_accuracy(arith_tool_gpt):
    from rlgraph.models.build_arith_tool_gpt import tool_episodes

    model, tokenizer, report = arith_tool_gpt
    greedy = tool_episodes(model, tokenizer, arith_tool.make_rows("val"), max_turns=3, max_response_tokens=32)
    # one of the 500 answers may flip on another CPU (a near tie in the argmax), no more
    assert greedy["accuracy"] == pytest.approx(report["greedy"]["accuracy"], abs=0.002)
    assert greedy["tool_call_rate"] == pytest.approx(report["greedy"]["tool_call_rate"], abs=0.002)


def test_an_episode_reads_like_the_documented_transcript(arith_tool_gpt):
    from rlgraph.models.build_arith_tool_gpt import run_episodes

    model, tokenizer, _ = arith_tool_gpt
    rows = arith_tool.make_rows("val")
    episodes = run_episodes(model, tokenizer, [row["prompt"] for row in rows], max_turns=3, max_response_tokens=32)
    called = next(e for e in episodes if e["calls"])
    (start, end), = called["env"]
    prompt = tokenizer.decode(called["ids"][: called["prompt"]])
    a, b = prompt[:-1].split("*")
    assert tokenizer.decode(called["ids"][called["prompt"] : start]) == f"<tool_call>calc {a}*{b}</tool_call>"
    assert tokenizer.decode(called["ids"][start:end]) == f"<tool_response>{int(a) * int(b)}</tool_response>"
    assert tokenizer.decode(called["ids"][end:]) == f"{int(a) * int(b)}</s>"


def test_the_recipe_still_makes_the_shipped_kind_of_folder(tmp_path):
    from rlgraph.models.build_arith_tool_gpt import Recipe, build_arith_tool_gpt
    from rlgraph.models.registry import BUILTIN_MODELS

    # a few steps only: the full recipe made the shipped bytes
    recipe = dataclasses.replace(Recipe(), max_steps=10, eval_every=5, eval_rows=8, accept_low=0.0, accept_high=1.0,
                                 accept_sampled_calls=(0.0, 1.0), max_response_tokens=8)
    report = build_arith_tool_gpt(tmp_path / "gpt", recipe, log=lambda _: None)
    assert {p.name for p in (tmp_path / "gpt").iterdir()} == set(BUILTIN_MODELS["arith-tool-gpt"].sha256)
    saved = json.loads((tmp_path / "gpt" / "rlgraph_build.json").read_text())
    assert saved["steps"] == 10 and [check["step"] for check in saved["checks"]] == [5, 10]
    assert saved["num_parameters"] == report["num_parameters"] == 266_176
