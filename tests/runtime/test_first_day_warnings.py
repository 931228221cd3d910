"""The warnings that save a new user's afternoon (issue 32), and the per-step lines of a log that is no terminal.

The case seen: a user's own Qwen2 with a WordLevel tokenizer trained with the tokenizers library. transformers 5
loads that folder's tokenizer as Qwen2Tokenizer (by config.json's model_type), which decodes without the spaces,
so no response can match its ground truth: every reward is 0, every GRPO advantage 0, and the run said nothing.
"""

from __future__ import annotations

import json

import pytest

from .helpers import SPECS, plan_from_spec, read_metrics
from rlgraph.runtime.preflight import preflight

LETTERS = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def qwen2_wordlevel(tmp_path_factory):
    """(model folder, data file): a tiny random Qwen2 whose WordLevel tokenizer does not round-trip once
    reloaded, and "sort the letters" prompts whose ground truths hold spaces."""
    import itertools

    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    root = tmp_path_factory.mktemp("first_day")
    folder = root / "sorter"
    vocab = {word: i for i, word in enumerate(["<pad>", "<unk>", "<eos>", "sort", *LETTERS])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", unk_token="<unk>",
                            eos_token="<eos>").save_pretrained(folder)
    config = Qwen2Config(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         pad_token_id=0, eos_token_id=2, bos_token_id=2)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        Qwen2ForCausalLM(config).save_pretrained(folder)
    rows = root / "sort.jsonl"
    orders = list(itertools.permutations(LETTERS))[:16]
    rows.write_text("".join(json.dumps({"prompt": "sort " + " ".join(order),
                                        "reward_model": {"ground_truth": " ".join(LETTERS)}}) + "\n"
                            for order in orders))
    return folder, rows


def test_a_tokenizer_that_does_not_round_trip_is_warned_of_with_both_strings(qwen2_wordlevel):
    folder, rows = qwen2_wordlevel
    plan = plan_from_spec(SPECS / "grpo_arith.rl", f'policy.path="{folder}"', f'data.train="{rows}"',
                          f'data.val="{rows}"', "data.batch_size=16")
    prepared = preflight(plan, starting_locally=False)
    assert type(prepared.tokenizer).__name__ == "Qwen2Tokenizer"  # what makes the case: transformers 5's choice
    [warning] = prepared.warnings
    assert "does not decode what it encodes" in warning
    # the first prompt and the first ground truth that differ, each with what it decodes as
    assert "the prompt of data.train row 1, 'sort a b c d', decodes as 'abcd'" in warning, warning
    assert "the ground truth of data.train row 1, 'a b c d', decodes as 'abcd'" in warning, warning
    assert "16 of the texts of the first 8 rows differ" in warning and "'qwen2'" in warning


def test_the_builtin_tokenizer_round_trips_without_a_warning():
    prepared = preflight(plan_from_spec(SPECS / "grpo_arith.rl"), starting_locally=False)
    assert prepared.warnings == []


def test_special_tokens_in_a_prompt_pass_and_in_a_ground_truth_are_warned_of_unless_multi_turn():
    from transformers import AutoTokenizer

    from rlgraph.models import resolve_model_path
    from rlgraph.runtime.preflight import round_trip_warnings

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("builtin:arith-gpt"))
    eos = tokenizer.eos_token
    assert round_trip_warnings(tokenizer, [row(f"1+1={eos}", "2")], "data.train") == []  # the model reads it
    [warning] = round_trip_warnings(tokenizer, [row("1+1=", f"2{eos}")], "data.train")
    assert f"the ground truth of data.train row 1, '2{eos}', decodes as '2'" in warning
    assert "Leave them out of the ground truths" in warning
    # a multi-turn reward reads the response with its special tokens
    assert round_trip_warnings(tokenizer, [row("1+1=", f"2{eos}")], "data.train", skip_special_tokens=False) == []


def row(prompt: str, truth: str) -> dict:
    return {"prompt": prompt, "reward_model": {"ground_truth": truth}}


SPEC = """rlgraph 1
model policy {{ path = "{folder}" }}
pool main {{ nodes = 1  devices_per_node = 1  device = cpu }}
reward exact {{ fn = "rlgraph.tasks.arith:exact_match" }}
data {{ train = "{rows}"  batch_size = 4  max_prompt_length = 8 }}
train {{ steps = 3  seed = 0  validate_every = 0  checkpoint_every = 0  samples_every = 0 }}
role actor {{ model = policy  pool = main  optim {{ lr = 1e-4 }} }}
role rollout {{ colocate = actor  engine = hf  n = 4  temperature = 1.0  max_new_tokens = 4 }}
step {{
  sync actor -> rollout
  prompts -> rollout.generate -> responses, old_log_prob
  responses -> exact -> scores
  scores -> grpo_advantage -> advantages
  old_log_prob, advantages -> actor.update(clip = 0.2, epochs = 1, minibatch = 4)
}}
"""


def test_a_run_that_cannot_score_warns_twice_and_logs_a_line_per_step(run_cli, qwen2_wordlevel, tmp_path):
    # `rlgraph run` with its output captured (not a terminal), as under `tee` or a batch job
    folder, rows = qwen2_wordlevel
    spec = tmp_path / "sort.rl"
    spec.write_text(SPEC.format(folder=folder, rows=rows))
    code, out = run_cli(spec, "--output", tmp_path / "run")
    assert code == 0, out
    flat = " ".join(out.split())  # rich wraps long lines at the console's width
    # pre-flight: the tokenizer, with both strings, on the console and in the run's history
    assert "warning: the tokenizer (Qwen2Tokenizer) does not decode what it encodes" in flat, out
    assert "'a b c d', decodes as 'abcd'" in flat, out
    [entry] = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    assert len(entry["warnings"]) == 1 and "'a b c d', decodes as 'abcd'" in entry["warnings"][0]
    # at run time: every group scored alike each step (all advantages 0), counted, and warned of at the third
    steps = [r for r in read_metrics(tmp_path / "run") if r["training/global_step"] > 0]
    assert [r["batch/zero_advantage_groups"] for r in steps] == [1.0, 1.0, 1.0]
    assert [r["batch/zero_advantage_step"] for r in steps] == [1.0, 1.0, 1.0]
    assert "warning: steps 1-3: every advantage was 0" in flat, out
    assert "max_new_tokens" in flat and "SFT" in flat
    # one line per step, each with its key metrics, and no progress bar
    lines = [line for line in out.splitlines() if line.startswith("step ") and " | reward " in line]
    assert [line.split(" |")[0] for line in lines] == ["step 1/3", "step 2/3", "step 3/3"], out
    assert all("grad_norm" in line and "zero_adv 1.00" in line for line in lines), lines
    assert "eta" not in out
