"""The judge worker (rlgraph/workers/judge.py) scoring a real rollout: the built-in policy's samples on builtin:arith,
judged by the built-in teacher (builtin:arith-gpt-teacher) asked each sample's question, as
specs/grpo_arith_judge.rl does."""

from __future__ import annotations

import math

import pytest
import torch

from rlgraph.contract import settings as s
from rlgraph.contract.judge import JudgeVerdictError
from rlgraph.workers.judge import JudgeWorker

from .helpers import generate_settings, make_items, rollout_settings

SAME_ANSWER = "rlgraph.tasks.arith_judge:same_answer"
PAIRS = [(12, 34), (7, 5), (99, 1), (40, 41), (3, 68), (55, 55)]


def judge_settings(**overrides) -> s.JudgeSettings:
    fields = dict(engine="hf", template="{{ prompt }}", parser=SAME_ANSWER, base_dir=".", max_new_tokens=4,
                  temperature=0.0, max_sequences=None, memory_fraction=0.5, dtype="float32", max_invalid_fraction=0.0)
    return s.JudgeSettings(**(fields | overrides))


@pytest.fixture(scope="module")
def teacher() -> str:
    from rlgraph.models import resolve_model_path

    return resolve_model_path("builtin:arith-gpt-teacher")


@pytest.fixture(scope="module")
def rollout():
    """The built-in policy's samples: 6 prompts x 2, sampled at temperature 1 (some right, some wrong)."""
    from rlgraph.models import resolve_model_path
    from rlgraph.workers.rollout import RolloutWorker

    worker = RolloutWorker(resolve_model_path("builtin:arith-gpt"), rollout_settings(max_new_tokens=4), seed=0)
    items = make_items([f"{a}+{b}=" for a, b in PAIRS], worker.tokenizer, [str(a + b) for a, b in PAIRS])
    return worker.generate(items, settings=generate_settings(n=2, max_new_tokens=4), seed=0)


def teacher_answers(teacher: str, prompts: list[str]) -> list[str]:
    """The teacher's greedy answer to each prompt, from transformers' own generate: the reference."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(teacher)
    model = AutoModelForCausalLM.from_pretrained(teacher, dtype=torch.float32).eval()
    answers = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer(prompt)["input_ids"]])
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        answers.append(tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip())
    return answers


def row_scores(rollout, token_scores: torch.Tensor) -> list[float]:
    """(batch,) each row's score, read off its reward_index; every other column holds 0."""
    rows = torch.arange(len(rollout))
    at_index = token_scores[rows, rollout.reward_index]
    assert token_scores.sum(-1).nan_to_num(0).tolist() == at_index.nan_to_num(0).tolist()
    return at_index.tolist()


def test_the_judge_scores_each_sample_by_whether_it_gives_the_teachers_answer(teacher, rollout):
    scores = JudgeWorker(teacher, judge_settings(), seed=0).score(rollout, settings=s.NoSettings())
    assert scores.shape == rollout.responses.shape and scores.dtype == torch.float32  # (batch, R)
    answers = teacher_answers(teacher, rollout.prompt_text)
    expected = [float(response.strip() == answer) for response, answer in zip(rollout.response_text, answers)]
    assert row_scores(rollout, scores) == expected
    assert 0 < sum(expected) < len(expected)  # the batch has samples the judge takes and samples it does not


def test_a_template_over_the_response_reaches_the_judge_rendered(teacher, rollout):
    worker = JudgeWorker(teacher, judge_settings(template="{{ prompt }}{{ response }} vs {{ ground_truth }}"), seed=0)
    assert worker.prompt(rollout, 0) == f"{rollout.prompt_text[0]}{rollout.response_text[0]} vs {rollout.ground_truth[0]}"


def _write_parser(tmp_path, body: str) -> str:
    (tmp_path / "parsers.py").write_text(body)
    return "parsers.py:parse"


NO_SCORE_FOR_ODD_A = """\
def parse(verdict, prompt, response, ground_truth):
    return None if int(prompt.split("+")[0]) % 2 else 1.0  # no score for odd first numbers
"""


def test_verdicts_without_a_score_are_nan_on_their_rows_within_the_allowed_share(teacher, rollout, tmp_path):
    parser = _write_parser(tmp_path, NO_SCORE_FOR_ODD_A)
    odd = [int(p.split("+")[0]) % 2 == 1 for p in rollout.prompt_text]
    settings = judge_settings(parser=parser, base_dir=str(tmp_path), max_invalid_fraction=sum(odd) / len(odd))
    scores = row_scores(rollout, JudgeWorker(teacher, settings, seed=0).score(rollout, settings=s.NoSettings()))
    assert [math.isnan(v) for v in scores] == odd
    assert all(v == 1.0 for v, o in zip(scores, odd) if not o)


def test_more_verdicts_without_a_score_than_allowed_is_an_error_naming_the_row_and_its_verdict(teacher, rollout,
                                                                                                 tmp_path):
    parser = _write_parser(tmp_path, NO_SCORE_FOR_ODD_A)
    odd = [i for i, p in enumerate(rollout.prompt_text) if int(p.split("+")[0]) % 2]
    worker = JudgeWorker(teacher, judge_settings(parser=parser, base_dir=str(tmp_path), max_invalid_fraction=0.1),
                         seed=0)
    with pytest.raises(JudgeVerdictError) as raised:
        worker.score(rollout, settings=s.NoSettings())
    message, first = str(raised.value), odd[0]
    assert f"{len(odd)} of {len(rollout)} verdicts hold no score for parser `parsers.py:parse`" in message
    assert f"max_invalid_fraction = 0.1 allows {int(0.1 * len(rollout))}" in message
    assert f"row {first} (uid={rollout.uid[first]})" in message and repr(rollout.prompt_text[first]) in message
    verdict = teacher_answers(teacher, [rollout.prompt_text[first]])[0]
    assert f"said {verdict!r}" in message
    assert "max_new_tokens" in message and "`max_invalid_fraction`" in message  # the ways out


def test_yes_no_on_a_judge_that_answers_with_numbers_holds_no_score(teacher, rollout):
    """A template that does not ask for the parser's form: every verdict is a sum, none is yes or no."""
    with pytest.raises(JudgeVerdictError, match="12 of 12 verdicts hold no score for parser `yes_no`"):
        JudgeWorker(teacher, judge_settings(parser="yes_no"), seed=0).score(rollout, settings=s.NoSettings())
    allowed = JudgeWorker(teacher, judge_settings(parser="yes_no", max_invalid_fraction=1.0), seed=0)
    assert all(math.isnan(v) for v in row_scores(rollout, allowed.score(rollout, settings=s.NoSettings())))


def test_a_parser_that_raises_is_an_error_naming_the_row_not_a_traceback(teacher, rollout, tmp_path):
    parser = _write_parser(tmp_path, "def parse(verdict, prompt, response, ground_truth):\n    return 1 / 0\n")
    worker = JudgeWorker(teacher, judge_settings(parser=parser, base_dir=str(tmp_path)), seed=0)
    with pytest.raises(JudgeVerdictError, match=r"raised ZeroDivisionError: division by zero on row 0 \(uid=0\)"):
        worker.score(rollout, settings=s.NoSettings())


def test_a_parser_that_cannot_take_a_verdicts_arguments_is_refused_at_start(teacher, tmp_path):
    parser = _write_parser(tmp_path, "def parse(verdict):\n    return 1.0\n")
    with pytest.raises(JudgeVerdictError, match=r"must take \(verdict, prompt, response, ground_truth\)"):
        JudgeWorker(teacher, judge_settings(parser=parser, base_dir=str(tmp_path)), seed=0)


def test_a_vllm_judge_gives_the_hf_judges_scores(teacher, rollout):
    """The judge generates with any rollout engine: vLLM (its CPU build here) says what hf says, greedy."""
    pytest.importorskip("vllm", reason="the vllm engine needs vLLM (`make install` brings its CPU build)")
    hf = JudgeWorker(teacher, judge_settings(), seed=0).score(rollout, settings=s.NoSettings())
    worker = JudgeWorker(teacher, judge_settings(engine="vllm", max_sequences=16), seed=0)
    try:
        assert worker.verdicts(rollout) == JudgeWorker(teacher, judge_settings(), seed=0).verdicts(rollout)
        assert torch.equal(worker.score(rollout, settings=s.NoSettings()), hf)
    finally:
        worker.engine.shutdown()
