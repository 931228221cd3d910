"""`rlgraph plan SPEC --fit`: the smallest verified change, written into the spec's text as a user would."""

from __future__ import annotations

import shutil

from rlgraph.cli import main
from rlgraph.compiler import compile_spec
from rlgraph.lang.edit import set_key
from rlgraph.lang.formatter import format_text
from rlgraph.plan.build import plan_spec

from .helpers import FIXTURES, REPO, spec

FIT = FIXTURES / "fit"


def _fit(capsys, *args):
    code = main(["plan", *map(str, args), "--fit"])
    out, err = capsys.readouterr()
    return code, out, err


def _plans_cleanly(path) -> None:
    _, diagnostics = plan_spec(compile_spec(str(path)))
    assert [d.code for d in diagnostics if d.is_error] == []


def _fitted(tmp_path, capsys, source):
    """Fit a copy of `source` (with the files beside it) and return (code, diff, stderr, fitted text)."""
    folder = tmp_path / "specs"
    shutil.copytree(source.parent, folder)
    out_path = folder / "fitted.rl"
    code, diff, err = _fit(capsys, folder / source.name, "-o", out_path)
    return code, diff, err, out_path.read_text() if out_path.exists() else None


def test_7b_on_one_device_gets_four_devices_and_a_micro_batch_that_divides_its_samples(tmp_path, capsys):
    # memory alone says `devices_per_node = 4`; then each replica gets 40 samples a mini-batch, which
    # micro_batch = 16 does not divide: --fit keeps to changes the whole compiler accepts
    source = FIXTURES / "verl_grpo_qwen2_7b_1gpu.rl"
    code, diff, err, fitted = _fitted(tmp_path, capsys, source)
    assert code == 0
    assert err.splitlines()[0] == ("fits with `micro_batch = 8` on `actor` and `devices_per_node = 4` on pool `gpu` "
                                   "(4 times the devices and replicas)")
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == [
        "-pool gpu { nodes = 1  devices_per_node = 1  device = gpu  memory = 80GiB }",
        "+pool gpu { nodes = 1  devices_per_node = 4  device = gpu  memory = 80GiB }",
        "-  micro_batch = 16",
        "+  micro_batch = 8",
        "+  replicas = 4",
    ]
    assert fitted == source.read_text().replace("devices_per_node = 1", "devices_per_node = 4").replace(
        "  micro_batch = 16\n  gradient", "  micro_batch = 8\n  gradient").replace(
        "  optim { lr = 1e-6 }\n}", "  optim { lr = 1e-6 }\n  replicas = 4\n}")
    _plans_cleanly(tmp_path / "specs" / "fitted.rl")
    assert main(["fmt", "--check", str(tmp_path / "specs" / "fitted.rl")]) == 0


def test_a_micro_batch_too_big_becomes_a_token_budget_comments_kept(tmp_path, capsys):
    source = FIT / "micro_batch.rl"
    code, diff, err, fitted = _fitted(tmp_path, capsys, source)
    assert code == 0
    assert ("fits with `micro_batch_tokens = 9216` on `actor` (3 rows of 3072 tokens a pass; instead of "
            "`micro_batch = 16`)") in err
    assert diff.startswith(f"--- {tmp_path / 'specs' / 'micro_batch.rl'}\n+++ {tmp_path / 'specs' / 'fitted.rl'}\n")
    # the key it replaces goes with its own comment; every other comment stays
    assert ("-  micro_batch = 16  # verl: ppo_micro_batch_size_per_gpu\n"
            "   optim { lr = 1e-6 }\n"
            "+  micro_batch_tokens = 9216\n }\n") in diff
    removed = "  micro_batch = 16  # verl: ppo_micro_batch_size_per_gpu\n"
    assert fitted == source.read_text().replace(removed, "").replace(
        "  optim { lr = 1e-6 }\n}", "  optim { lr = 1e-6 }\n  micro_batch_tokens = 9216\n}")
    _plans_cleanly(tmp_path / "specs" / "fitted.rl")
    assert main(["fmt", "--check", str(tmp_path / "specs" / "fitted.rl")]) == 0


def test_a_key_set_in_an_included_file_is_set_again_in_the_top_files_block(tmp_path, capsys):
    code, diff, err, fitted = _fitted(tmp_path, capsys, FIT / "include_top.rl")
    assert code == 0
    assert "fits with `micro_batch = 2` on `actor`" in err
    assert fitted == (FIT / "include_top.rl").read_text().replace(
        "  dtype = bf16  # as in base.rl\n", "  dtype = bf16  # as in base.rl\n  micro_batch = 2\n")
    assert (tmp_path / "specs" / "base.rl").read_text() == (FIT / "base.rl").read_text()  # never edited
    _plans_cleanly(tmp_path / "specs" / "fitted.rl")


def test_a_block_only_in_an_included_file_is_added_after_the_includes(tmp_path, capsys):
    shutil.copy(FIT / "base.rl", tmp_path / "base.rl")
    top = tmp_path / "top.rl"
    top.write_text('rlgraph 1\n\ninclude "base.rl"  # the whole spec\n')
    code, diff, err = _fit(capsys, top, "-o", tmp_path / "out.rl")
    assert code == 0
    assert (tmp_path / "out.rl").read_text() == (
        'rlgraph 1\n\ninclude "base.rl"  # the whole spec\n\nrole actor { micro_batch = 2 }\n')
    assert top.read_text() == 'rlgraph 1\n\ninclude "base.rl"  # the whole spec\n'  # -o leaves the spec alone
    _plans_cleanly(tmp_path / "out.rl")


def test_a_spec_that_fits_is_left_alone(tmp_path, capsys):
    path = REPO / "specs" / "grpo_arith.rl"
    code, out, err = _fit(capsys, path, "-o", tmp_path / "out.rl")
    assert (code, out) == (0, "")
    assert err == f"`{path}` already fits: nothing to change\n"
    assert (tmp_path / "out.rl").read_text() == path.read_text()  # -o always holds a spec that fits


def test_no_verified_change_exits_1_and_writes_nothing(tmp_path, capsys):
    code, out, err = _fit(capsys, FIT / "too_big.rl", "-o", tmp_path / "out.rl")
    assert (code, out) == (1, "")
    assert "error[out-of-memory]" in err
    assert err.endswith("no change that rlgraph knows makes pool `gpu` fit: no fitting spec was written\n")
    assert not (tmp_path / "out.rl").exists()


def test_other_errors_are_reported_as_check_does_without_a_fit(tmp_path, capsys):
    path = tmp_path / "bad.rl"
    path.write_text(spec("pool main { nodes = 1  devices_per_node = 1  device = cpu }\n"
                         "role actor { model = policy  pool = main  optim { lr = 1e-5 } }\n"
                         "role rollout { engine = hf  colocate = actr }"))
    code, out, err = _fit(capsys, path)
    assert (code, out) == (1, "")
    assert "error[unknown-name]" in err or "error[unknown-role]" in err
    assert "did you mean `actor`?" in err
    assert "Traceback" not in err
    assert err.endswith("--fit changes only what memory needs: fix the errors above first\n")


def test_an_unreadable_spec_exits_1_without_a_traceback(tmp_path, capsys):
    code, out, err = _fit(capsys, tmp_path / "missing.rl")
    assert (code, out) == (1, "")
    assert "error[io]" in err


def test_fit_refuses_overrides_and_formats(capsys):
    assert main(["plan", str(FIT / "micro_batch.rl"), "--fit", "-s", "actor.micro_batch=2"]) == 2
    assert "--fit edits the spec file" in capsys.readouterr().err
    assert main(["plan", str(FIT / "micro_batch.rl"), "--fit", "--format", "json"]) == 2


def test_set_key_edits_text_as_a_person_would():
    text = ("rlgraph 1\n\npool p { nodes = 1  devices_per_node = 1 }  # one machine\n\n"
            "role actor {\n  model = m  # the policy\n  optim { lr = 1e-6 } }\n")
    edited = set_key(text, "pool", "p", "devices_per_node", 4)
    assert "pool p { nodes = 1  devices_per_node = 4 }  # one machine\n" in edited
    edited = set_key(edited, "pool", "p", "device", "gpu")  # a one-line block stays on one line
    assert "pool p { nodes = 1  devices_per_node = 4  device = gpu }" in edited
    edited = set_key(edited, "role", "actor", "strategy", "fsdp")
    edited = set_key(edited, "role", "actor", "param_offload", True)
    edited = set_key(edited, "role", "critic", "micro_batch", 2)
    assert format_text(edited) == (
        "rlgraph 1\n\npool p { nodes = 1  devices_per_node = 4  device = gpu }  # one machine\n\n"
        "role actor {\n  model = m  # the policy\n  optim { lr = 1e-6 }\n  strategy = fsdp\n"
        "  param_offload = true\n}\n\nrole critic { micro_batch = 2 }\n")
