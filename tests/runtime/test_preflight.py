"""rlgraph/runtime/preflight.py: what a run refuses before Ray starts, each with a message a user can act on."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from .helpers import REPO, SPECS, plan_from_spec
from rlgraph.runtime.errors import PreflightError
from rlgraph.runtime.preflight import preflight


def sglang_imports() -> bool:
    try:
        import sglang  # noqa: F401
    except Exception:
        return False
    return True


@pytest.mark.skipif(sglang_imports(), reason="sglang is installed here")
def test_engine_sglang_without_sglang_is_refused_naming_the_extra():
    plan = plan_from_spec(SPECS / "ppo_qwen7b_rm_2x8.rl")
    with pytest.raises(PreflightError) as refused:
        preflight(plan, starting_locally=False)
    message = str(refused.value)
    assert message.startswith("role `rollout`: engine = sglang needs the sglang package, which does not import here")
    assert "pip install 'rlgraph[sglang]'" in message


@pytest.mark.skipif(sglang_imports(), reason="sglang is installed here")
def test_rlgraph_run_refuses_it_with_a_clear_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rlgraph.cli", "run", str(SPECS / "ppo_qwen7b_rm_2x8.rl"),
                           "--output", str(tmp_path / "run")], capture_output=True, text=True, timeout=120, cwd=REPO)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "error: role `rollout`: engine = sglang needs the sglang package" in out
    assert "pip install 'rlgraph[sglang]'" in out and "Traceback" not in out


def test_a_model_folder_without_tokenizer_files_is_refused_naming_the_folder_and_the_files(tmp_path):
    from rlgraph.models import resolve_model_path

    folder = tmp_path / "no-tokenizer"
    shutil.copytree(resolve_model_path("builtin:arith-gpt"), folder,
                    ignore=shutil.ignore_patterns("tokenizer*"))
    plan = plan_from_spec(SPECS / "grpo_arith.rl", f'policy.path="{folder}"')
    with pytest.raises(PreflightError) as refused:
        preflight(plan, starting_locally=False)
    message = str(refused.value)
    assert f"model `policy` (path = '{folder}'): the folder {folder} has no tokenizer files" in message
    assert "tokenizer.json" in message and "tokenizer.model" in message and "tokenizer_config.json" in message
    assert f"tokenizer.save_pretrained('{folder}')" in message


def test_a_folder_with_a_sentencepiece_model_only_passes_the_file_check(tmp_path):
    from rlgraph.runtime.preflight import _check_tokenizer_files

    (tmp_path / "tokenizer.model").write_bytes(b"")
    _check_tokenizer_files("model `policy`", str(tmp_path), str(tmp_path))
    (tmp_path / "tokenizer.model").unlink()
    (tmp_path / "cl100k.tiktoken").write_bytes(b"")
    _check_tokenizer_files("model `policy`", str(tmp_path), str(tmp_path))


def test_a_bad_data_row_is_refused_before_ray_starts(tmp_path, monkeypatch):
    # the errors users meet most (a row, a model path, an engine to install) come before Ray is started: the
    # rest of pre-flight (rewards, tokenizer, tokenizing) runs in a thread while Ray starts
    import rlgraph.runtime.run as run

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started before the data was checked")

    monkeypatch.setattr(run, "ray_cluster", no_ray)
    rows = tmp_path / "train.jsonl"
    rows.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    plan = plan_from_spec(SPECS / "grpo_arith.rl", f'data.train="{rows}"')
    with pytest.raises(PreflightError) as refused:
        run.run_plan(plan, tmp_path / "run")
    assert str(refused.value).startswith(f"data.train: {rows}:1: no \"reward_model\" field")


JUDGE = SPECS / "grpo_arith_judge.rl"


@pytest.mark.parametrize("body, words", [
    ("def score(verdict, prompt, response, ground_truth):\n    return 1.0\n", "has no attribute 'parse'"),
    ("def parse(verdict):\n    return 1.0\n", "must take (verdict, prompt, response, ground_truth)"),
])
def test_a_judges_parser_that_cannot_parse_is_refused_before_ray_starts(tmp_path, body, words):
    (tmp_path / "parsers.py").write_text(body)
    plan = plan_from_spec(JUDGE, f'judge.parser="{tmp_path / "parsers.py"}:parse"')
    with pytest.raises(PreflightError) as refused:
        preflight(plan, starting_locally=False)
    assert str(refused.value).startswith("judge `judge`: ") and words in str(refused.value)


@pytest.mark.skipif(sglang_imports(), reason="sglang is installed here")
def test_a_judges_engine_that_is_not_installed_is_refused_as_a_rollouts_is():
    plan = plan_from_spec(JUDGE, "judging.device=gpu", "judge.engine=sglang")
    with pytest.raises(PreflightError, match=r"^role `judge`: engine = sglang needs the sglang package"):
        preflight(plan, starting_locally=False)


def test_demonstrations_without_ground_truths_prepare_and_a_bad_one_names_its_row(tmp_path):
    rows = tmp_path / "sft.jsonl"
    rows.write_text('{"prompt": "1+1=", "response": "2"}\n'
                    '{"messages": [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]}\n' * 40)
    plan = plan_from_spec(SPECS / "sft_arith.rl", f'data.train="{rows}"', f'data.val="{rows}"')
    prepared = preflight(plan, starting_locally=False)
    assert len(prepared.train) == 80 and prepared.warnings == []
    assert prepared.train[0]["response_ids"][-1] == prepared.tokenizer.eos_token_id
    assert prepared.val[1]["ground_truth"] is None  # validation scores no row then: val/sft_loss alone
    rows.write_text('{"prompt": "1+1=", "response": "2"}\n{"prompt": "2+2=", "answer": "4"}\n')
    with pytest.raises(PreflightError, match=r'data.train: .*sft.jsonl:2: no "response" field'):
        preflight(plan, starting_locally=False)
