"""The verdict on working memory that grows with the rows' lengths (docs/memory.md, "Full-length rows"): a
micro-batch counted in rows is estimated at full length, a worst case: when only that does not fit, a warning
with the longest row that fits and fixes that were checked; a token budget the user stated, or what does not
depend on lengths, that does not fit stays an error."""

from __future__ import annotations

import json
import re

from rlgraph.cli import main

from .helpers import codes, only, plan_text, spec

MODEL = ('model big { path = "models/not-here"  params = 7B  layers = 28  hidden = 3584  heads = 28  kv_heads = 4  '
         'vocab = 152064 }')


def _launch(actor: str, prompt: int = 2048) -> str:
    """A 7B actor, fsdp over 8 x 80 GiB with SGLang colocated; rows of `prompt` + 512 tokens at most."""
    return spec("pool gpus { nodes = 1  devices_per_node = 8  device = gpu  memory = 80GiB }\n"
                f"role actor {{ model = big  pool = gpus  replicas = 8  strategy = fsdp  dtype = bf16  {actor} }}\n"
                "role rollout { colocate = actor  engine = sglang  memory_fraction = 0.5  n = 8  max_new_tokens = 512  "
                "dtype = bf16 }", model=MODEL, data=f"batch_size = 256  max_prompt_length = {prompt}")


def _over(diagnostics) -> list[str]:
    return [d.code for d in diagnostics if d.code in ("out-of-memory", "memory-at-full-length")]


def test_a_launch_that_fits_only_below_some_length_warns_with_that_length(tmp_path):
    _, diagnostics = plan_text(tmp_path, _launch("micro_batch = 8"))
    d = only(diagnostics, "memory-at-full-length")
    assert not d.is_error and "out-of-memory" not in codes(diagnostics)
    assert "with every row at full length (2,048 prompt + 512 response = 2,560 tokens)" in d.message
    longest = int(re.search(r"longest row is up to ([\d,]+) tokens", d.message)[1].replace(",", ""))
    assert 512 < longest < 2560
    # the length it names is the boundary: the same launch whose rows are at most that long fits, one token more not
    _, shorter = plan_text(tmp_path, _launch("micro_batch = 8", prompt=longest - 512), name="shorter.rl")
    assert _over(shorter) == []
    _, longer = plan_text(tmp_path, _launch("micro_batch = 8", prompt=longest + 1 - 512), name="longer.rl")
    assert _over(longer) == ["memory-at-full-length"]
    fixes = [h for h in d.hints if h.startswith("fits with")]
    assert any("`micro_batch_tokens = " in h and "instead of `micro_batch = 8`" in h for h in fixes), fixes
    assert any("`gradient_checkpointing = true`" in h for h in fixes), fixes


def test_the_warnings_fix_written_by_plan_fit_fits(tmp_path, capsys):
    path = tmp_path / "launch.rl"
    path.write_text(_launch("micro_batch = 8"))
    fitted = tmp_path / "fitted.rl"
    assert main(["plan", str(path), "--fit", "-o", str(fitted)]) == 0
    written = fitted.read_text()
    assert "micro_batch_tokens" in written or "micro_batch = 4" in written or "gradient_checkpointing" in written
    assert not ("micro_batch = " in written and "micro_batch_tokens" in written)  # a budget replaces micro_batch
    _, diagnostics = plan_text(tmp_path, written, name="again.rl")
    assert _over(diagnostics) == [] and not any(d.is_error for d in diagnostics)


def test_a_token_budget_that_fits_with_the_rows_micro_batch_replaced(tmp_path):
    _, diagnostics = plan_text(tmp_path, _launch("micro_batch = 8"))
    fix = next(h for h in only(diagnostics, "memory-at-full-length").hints if "micro_batch_tokens = " in h)
    budget = int(re.search(r"micro_batch_tokens = (\d+)", fix)[1])
    _, applied = plan_text(tmp_path, _launch(f"micro_batch_tokens = {budget}"), name="budget.rl")
    assert _over(applied) == [] and not any(d.is_error for d in applied)


def test_a_token_budget_that_does_not_fit_is_an_error(tmp_path):
    # the user bounded the pass at 16,384 tokens: its estimate at the budget is what it holds, whatever the lengths
    _, diagnostics = plan_text(tmp_path, _launch("micro_batch_tokens = 16384"))
    d = only(diagnostics, "out-of-memory")
    assert d.is_error and "memory-at-full-length" not in codes(diagnostics)
    assert any(h.startswith("fits with `micro_batch_tokens = ") for h in d.hints), d.hints


def test_what_does_not_depend_on_lengths_not_fitting_stays_an_error(tmp_path):
    # the actor's fp32 training state under ddp, 16 bytes a parameter on every device, does not fit at any length
    text = _launch("micro_batch = 8").replace("strategy = fsdp  dtype = bf16", "dtype = fp32")
    _, diagnostics = plan_text(tmp_path, text)
    d = only(diagnostics, "out-of-memory")
    assert d.hints[0].startswith("`actor`'s training state alone is 16 bytes per parameter")
    assert "memory-at-full-length" not in codes(diagnostics)


def test_a_tied_models_mlp_size_comes_from_intermediate_not_from_params(tmp_path):
    """Qwen2.5-0.5B ties its embeddings: what params leaves for the MLPs after two embedding matrices is far
    below its intermediate_size (4864), so without `intermediate` its activations are under-stated. The model
    block's key gives what its config.json would."""
    shape = 'params = 494M  layers = 24  hidden = 896  heads = 14  kv_heads = 2  vocab = 151936'
    config = {"model_type": "qwen2", "num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14,
              "num_key_value_heads": 2, "vocab_size": 151936, "intermediate_size": 4864,
              "tie_word_embeddings": True}
    (tmp_path / "qwen05b").mkdir()
    (tmp_path / "qwen05b" / "config.json").write_text(json.dumps(config))

    def update_items(model: str, name: str) -> dict[str, int]:
        text = spec("pool gpus { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }\n"
                    "role actor { model = policy  pool = gpus  dtype = bf16  micro_batch = 4 }\n"
                    "role rollout { colocate = actor  n = 2  max_new_tokens = 512 }",
                    model=f"model policy {{ {model} }}", data="batch_size = 8  max_prompt_length = 512")
        plan, _ = plan_text(tmp_path, text, name=name)
        return plan.memory[0].breakdown

    derived = update_items(f'path = "Qwen/Qwen2.5-0.5B"  {shape}', "derived.rl")
    written = update_items(f'path = "Qwen/Qwen2.5-0.5B"  {shape}  intermediate = 4864', "written.rl")
    from_config = update_items('path = "qwen05b"', "config.rl")
    assert written["actor/activations"] == from_config["actor/activations"]
    assert derived["actor/activations"] < 0.9 * written["actor/activations"]
