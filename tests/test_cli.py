"""The command line as a user runs it: exit codes 0/1/2 and the three output formats of `check`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rlgraph.cli import main

ROOT = Path(__file__).resolve().parents[1]
SPECS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("specs/*.rl"))
BAD = "tests/golden/many_errors.rl"
CLUSTER_SPEC = "specs/ppo_qwen7b_rm_2x8.rl"
CONCISE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning)\[(?P<code>[a-z-]+)\] .+$")


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def run(*argv: str) -> tuple[int, str]:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        code = main(list(argv))
    return code, stdout.getvalue()


def usage_error(*argv: str) -> int:
    with pytest.raises(SystemExit) as exc, contextlib.redirect_stderr(io.StringIO()):
        main(list(argv))
    return exc.value.code


# ---- check ------------------------------------------------------------------------------


def test_check_passes_on_every_shipped_spec():
    code, out = run("check", *SPECS)  # the cluster spec (SGLang on GPUs) too: checked, not run, here
    assert code == 0, out
    assert out.endswith(f"All checks passed ({len(SPECS)} files).\n")
    assert "error[" not in out and "warning[" not in out  # notes (engine waves) may come before it


def test_check_fails_on_errors_and_counts_them():
    code, out = run("check", BAD)
    assert code == 1
    assert re.search(r"^Found \d+ errors and \d+ warnings? in 1 file\.$", out, re.M)


def test_check_an_unreadable_file_is_an_error_not_a_crash():
    code, out = run("check", "specs/no_such_spec.rl", "--format", "concise")
    assert code == 1
    assert out.startswith("specs/no_such_spec.rl:1:1: error[io] cannot read")


def test_concise_format():
    code, out = run("check", BAD, "--format", "concise")
    assert code == 1
    lines = out.splitlines()
    assert lines and all(CONCISE.match(line) for line in lines), out
    assert {CONCISE.match(line)["file"] for line in lines} == {BAD}


def test_json_format():
    code, out = run("check", BAD, SPECS[0], "--format", "json")
    assert code == 1
    diagnostics = json.loads(out)
    assert diagnostics
    keys = {"code", "severity", "message", "file", "line", "column", "end_line", "end_column", "label", "hints",
            "notes"}
    for d in diagnostics:
        assert keys <= set(d)
        assert d["file"] == BAD and d["line"] >= 1 and d["column"] >= 1
    assert json.loads(run("check", SPECS[0], "--format", "json")[1]) == []


def test_overrides_reach_check():
    code, out = run("check", "specs/ppo_arith.rl", "-s", "train.steps=abc", "--format", "concise")
    assert code == 1
    assert out.startswith("<override 1>:1:13: error[wrong-type]")
    assert run("check", "specs/ppo_arith.rl", "--set", "train.steps=5")[0] == 0


# ---- fmt --------------------------------------------------------------------------------


def test_fmt_check_passes_on_the_shipped_specs():
    code, out = run("fmt", "--check", *SPECS, "specs/common/arith_base.rl")
    assert code == 0, out


def test_fmt_rewrites_checks_and_diffs(tmp_path):
    path = tmp_path / "messy.rl"
    messy = 'rlgraph 1\nmodel  m {path="x"}\n'
    path.write_text(messy)

    code, out = run("fmt", "--check", str(path))
    assert (code, out) == (1, f"would reformat {path}\n1 file would be reformatted.\n")
    code, out = run("fmt", "--diff", str(path))
    assert code == 1 and '-model  m {path="x"}\n+\n+model m { path = "x" }\n' in out
    assert path.read_text() == messy  # --check and --diff change nothing

    code, out = run("fmt", str(path))
    assert (code, out) == (0, f"reformatted {path}\n1 file reformatted.\n")
    assert path.read_text() == 'rlgraph 1\n\nmodel m { path = "x" }\n'
    assert run("fmt", "--check", str(path)) == (0, "1 file already formatted.\n")


def test_fmt_leaves_a_file_with_syntax_errors_alone(tmp_path):
    path = tmp_path / "broken.rl"
    broken = "rlgraph 1\npool p {  nodes: 1 }\n"
    path.write_text(broken)
    code, out = run("fmt", str(path))
    assert code == 1
    assert "error[syntax]: use `=` to set a key, not `:`" in out and f" --> {path}:2:16" in out
    assert "2 | pool p {  nodes: 1 }" in out  # the full form, with the source line
    assert path.read_text() == broken


def test_fmt_on_non_utf8_and_missing_files(tmp_path):
    path = tmp_path / "latin1.rl"
    path.write_bytes(b"rlgraph 1\n# caf\xe9\n")
    code, out = run("fmt", str(path), str(tmp_path / "missing.rl"))
    assert code == 1
    assert "error[encoding]" in out and "error[io]" in out
    assert path.read_bytes() == b"rlgraph 1\n# caf\xe9\n"


# ---- usage errors ------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    [], ["check"], ["fmt"], ["check", "--bogus", "specs/ppo_arith.rl"], ["check", "x.rl", "--format", "yaml"],
    ["frobnicate"], ["plan"],
])
def test_usage_errors_exit_2(argv):
    assert usage_error(*argv) == 2


def test_exit_codes_of_the_installed_command():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "rlgraph.cli"]
    ok = subprocess.run([*command, "check", "specs/ppo_arith.rl"], cwd=ROOT, env=env, capture_output=True)
    bad = subprocess.run([*command, "check", BAD], cwd=ROOT, env=env, capture_output=True)
    usage = subprocess.run([*command, "check", "--nope"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert (ok.returncode, bad.returncode, usage.returncode) == (0, 1, 2)
    assert b"Traceback" not in ok.stderr + bad.stderr
    assert "usage: rlgraph check" in usage.stderr


def test_fmt_refuses_to_write_when_the_formatter_would_change_the_meaning(tmp_path, monkeypatch):
    from rlgraph.commands import fmt as fmt_module
    from rlgraph.lang.formatter import FormatterBug

    def broken(text, file):
        raise FormatterBug(f"{file}: formatting would change the meaning of the spec")

    monkeypatch.setattr(fmt_module, "format_text", broken)
    path = tmp_path / "spec.rl"
    path.write_text("rlgraph 1\n")
    code, out = run("fmt", str(path))
    assert code == 1 and out.startswith("internal error:") and "left unchanged" in out
    assert path.read_text() == "rlgraph 1\n"


def test_the_check_benchmark_runs(tmp_path):
    """bench/bench_check.py, one repeat, to a scratch file (the real results stay untouched)."""
    output = tmp_path / "check.json"
    done = subprocess.run([sys.executable, "bench/bench_check.py", "--repeats", "1", "--output", str(output)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(output.read_text())
    assert result["check_median_s"] > 0 and result["python_median_s"] > 0 and result["ratio"] > 0
    assert "ratio:" in done.stdout


# ---- run: what rlgraph's runtime cannot run stops before anything starts -----------------

RUN_SCRIPT = """
import contextlib, io, json, sys
from rlgraph.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "out": out.getvalue(), "heavy": sorted(m for m in %r if m in sys.modules)}))
""" % (("torch", "ray", "transformers"),)


@pytest.mark.parametrize("case", ["lora", "tp"])
def test_run_refuses_what_the_runtime_cannot_run_before_anything_starts(case, tmp_path):
    argv, code = {
        # (every engine the language names runs here, so engine-not-implemented is not reachable from a spec)
        "lora": (["specs/grpo_arith_lora.rl", "-s", "main.devices_per_node=2", "-s", "actor.replicas=2", "-s",
                  "actor.strategy=fsdp"], "lora-not-implemented"),
        "tp": (["specs/ppo_arith.rl", "-s", "main.devices_per_node=2", "-s", "actor.replicas=2", "-s", "rollout.tp=2"],
               "tp-not-implemented"),
    }[case]
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", RUN_SCRIPT, json.dumps(["run", *argv, "--output", str(run_dir)])],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["code"] == 1, result["out"]
    assert f"warning[{code}]" in result["out"]
    assert result["out"].endswith(f"This runtime cannot run the spec ({code}); nothing was started.\n")
    assert result["heavy"] == [], "Ray, torch or transformers were imported"
    assert not run_dir.exists()
