"""specs/grpo_arith_judge.rl through `rlgraph run`: GRPO scored by an LLM judge on a pool of its own. Its verdicts
that hold no score leave their rows out of the update (advantage 0), counted as judge/<role>/invalid; more than
the judge's max_invalid_fraction stops the run with the row and the verdict named, no traceback."""

from __future__ import annotations

import inspect
import json
import math

from .helpers import SPECS, fast, read_metrics

JUDGE = SPECS / "grpo_arith_judge.rl"
# a score for prompts whose first number is even; none for the others (what a parser gives a verdict it cannot read)
PARSER = """\
def parse(verdict, prompt, response, ground_truth):
    if int(prompt.split("+")[0]) % 2:
        return None
    return float(response.strip() == verdict.strip())
"""


def _parser(tmp_path) -> str:
    (tmp_path / "parsers.py").write_text(PARSER)
    return f'judge.parser="{tmp_path / "parsers.py"}:parse"'


def test_verdicts_without_a_score_are_left_out_of_the_update_and_counted(run_cli, tmp_path):
    out = tmp_path / "run"
    code, text = run_cli(JUDGE, "--output", out, *fast(steps=2, batch_size=16, **{"train.samples_every": 1}),
                         "-s", _parser(tmp_path), "-s", "judge.max_invalid_fraction=0.9")
    assert code == 0, text
    assert "Traceback" not in text
    steps = [r for r in read_metrics(out) if r["training/global_step"] > 0]
    assert [r["training/global_step"] for r in steps] == [1, 2]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert samples
    for record in steps:
        assert record["judge/judge/invalid"] > 0  # the batch's odd first numbers
        assert 0.0 <= record["critic/score/mean"] <= 1.0  # over the scored rows: not NaN
        assert record["actor/grad_norm"] > 0
    for sample in samples:
        unscored = int(sample["prompt"].split("+")[0]) % 2 == 1
        assert (sample["score"] is None) == unscored
        if unscored:
            assert sample["advantage"] == 0.0  # left out of its group's mean and std, and of the loss
        else:
            assert sample["score"] in (0.0, 1.0) and math.isfinite(sample["advantage"])


def test_more_verdicts_without_a_score_than_allowed_stops_the_run_naming_the_row_and_verdict(run_cli, tmp_path):
    code, text = run_cli(JUDGE, "--output", tmp_path / "run", *fast(steps=2, batch_size=16), "-s", _parser(tmp_path))
    assert code == 1, text
    assert "Traceback" not in text
    flat = " ".join(text.split())  # the console wraps long lines
    assert "judge `judge` failed in" in flat and "verdicts hold no score for parser" in flat
    assert "max_invalid_fraction = 0.1 allows" in flat and "the judge was asked" in flat and "said" in flat


def odd(response: str) -> bool:
    """No score for an answer that does not end in an even digit: about half of each prompt's samples."""
    text = response.strip()
    return not text[-1:].isdigit() or int(text[-1]) % 2 == 1


def test_dynamic_sampling_on_a_judges_scores_counts_a_verdict_without_a_score_as_unscored(run_cli, tmp_path):
    """DAPO's filter (specs/dapo_arith.rl) reading a judge's scores: a row without a score is 0 to the filter, as a
    reward's unscored row is, and left out of the kept batch's update."""
    (tmp_path / "parsers.py").write_text(
        "def parse(verdict, prompt, response, ground_truth):\n"
        "    if odd(response):\n        return None\n"
        "    return float(response.strip() == verdict.strip())\n\n\n" + inspect.getsource(odd))
    judge = JUDGE.read_text()
    declared = judge[judge.index("model judge_model"):judge.index("step {")]
    dapo = (SPECS / "dapo_arith.rl").read_text().replace('include "common/', f'include "{SPECS}/common/')
    dapo = dapo.replace("responses -> exact -> scores", "responses -> judge.score -> scores")
    spec = tmp_path / "dapo_judged.rl"
    spec.write_text(dapo.replace("step {", declared.replace(
        "rlgraph.tasks.arith_judge:same_answer", f"{tmp_path / 'parsers.py'}:parse").replace(
        "max_invalid_fraction = 0.1", "max_invalid_fraction = 0.9").replace("max_new_tokens = 4", "max_new_tokens = 6")
        + "step {"))
    out = tmp_path / "run"
    code, text = run_cli(spec, "--output", out, *fast(steps=2, batch_size=16, **{"train.samples_every": 1}))
    assert code == 0, text
    assert "Traceback" not in text
    steps = [r for r in read_metrics(out) if r["training/global_step"] > 0]
    assert all(r["train/num_gen_batches"] >= 1 for r in steps)
    assert sum(r["judge/judge/invalid"] for r in steps) > 0  # rows without a score in the kept batches
    for sample in (json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()):
        assert (sample["score"] is None) == odd(sample["response"])
        if sample["score"] is None:
            assert sample["advantage"] == 0.0


def test_two_judge_replicas_split_the_samples_and_score_them_as_one_does(run_cli, tmp_path):
    """judge.score is split over the judge's replicas (each a share of the rows, greedy): the same scores come back
    in the rows' order, so the run trains exactly as with one replica."""
    runs = {}
    for replicas in (1, 2):
        out = tmp_path / f"replicas{replicas}"
        code, text = run_cli(JUDGE, "--output", out, *fast(steps=2, batch_size=16),
                             "-s", f"judging.devices_per_node={replicas}", "-s", f"judge.replicas={replicas}")
        assert code == 0, text
        runs[replicas] = [r for r in read_metrics(out) if r["training/global_step"] > 0]
    keys = ("critic/score/mean", "critic/advantages/max", "actor/grad_norm", "actor/pg_loss")
    assert [[r[k] for k in keys] for r in runs[2]] == [[r[k] for k in keys] for r in runs[1]]
