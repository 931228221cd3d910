"""`rlgraph import verl` on verl's own example launches (tests/importers/fixtures/*.overrides: each launch's
overrides as data, with the script and commit it comes from) and on malformed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.cli import main
from rlgraph.commands.import_verl import import_verl_text
from rlgraph.compiler import compile_spec
from rlgraph.lang.formatter import format_text
from rlgraph.plan.build import plan_spec

FIXTURES = Path(__file__).parent / "fixtures"
LAUNCHES = sorted(FIXTURES.glob("*.overrides"))
# The data and weights the launches name are not on this machine: those two checks are left out here.
ABSENT_HERE = ("data-path", "model-path")
# Launches that fail `check` for a reason of their own; every other launch passes.
FAILS: dict[str, str] = {}
# Launches rlgraph refuses as they are, and the override (`rlgraph import verl -s`) that imports them.
OVERRIDES: dict[str, list[str]] = {"megatron_grpo_qwen2_7b": ["actor_rollout_ref.actor.strategy=fsdp"]}


def _as_script(path: Path) -> bytes:
    """The fixture as the shell launch it records: its entry point, then one quoted override a line."""
    lines = path.read_text().splitlines()
    header = next(line for line in lines if line.startswith("# entry point: "))
    entry, _, config = header.removeprefix("# entry point: ").partition("; Hydra config: ")
    words = [entry] + ([f"--config-name={config}"] if config else [])
    words += ["'" + line.replace("'", "'\\''") + "'" for line in lines if line and not line.startswith("#")]
    return (" \\\n    ".join(words) + "\n").encode()


def _import(path: Path, memory: str | None = "80GiB") -> tuple[str, list[str]]:
    return import_verl_text(_as_script(path), f"{path.stem}.sh", memory, OVERRIDES.get(path.stem, []))


def test_the_key_value_form_of_a_launch_gives_the_same_spec():
    path = FIXTURES / "grpo_qwen2_7b.overrides"
    from_lines = import_verl_text(path.read_bytes(), f"{path.stem}.sh", "80GiB")[0]
    body = lambda text: text.split("\n", 4)[4]  # past the header, which names the entry point
    assert body(from_lines) == body(_import(path)[0])


@pytest.mark.parametrize("path", LAUNCHES, ids=[p.stem for p in LAUNCHES])
def test_each_launch_imports_formatted_and_deterministic(path):
    text, warnings = _import(path)
    assert text == _import(path)[0]
    assert format_text(text) == text  # what `fmt --check` compares
    assert text.startswith("rlgraph 1\n")
    for warning in warnings:  # every unmapped setting is also a comment in the spec
        if " is not mapped: " in warning:
            key = warning.split(": ", 1)[1].split("=", 1)[0]
            assert key.removeprefix("actor_rollout_ref.") in text, warning


@pytest.mark.parametrize("path", LAUNCHES, ids=[p.stem for p in LAUNCHES])
def test_each_launch_passes_check_on_its_stated_hardware(path, tmp_path):
    if path.stem in FAILS:
        pytest.xfail(FAILS[path.stem])
    spec = tmp_path / f"{path.stem}.rl"
    spec.write_text(_import(path)[0])
    compilation = compile_spec(str(spec))
    _, diagnostics = plan_spec(compilation)
    errors = [f"{d.code}: {d.message}" for d in diagnostics if d.is_error and d.code not in ABSENT_HERE]
    assert errors == []


def test_the_cli_writes_a_spec_that_fmt_check_accepts(tmp_path, capsys):
    out = tmp_path / "grpo.rl"
    assert main(["import", "verl", str(FIXTURES / "grpo_qwen2_7b.overrides"), "--device-memory", "80GiB",
                 "-o", str(out)]) == 0
    assert "memory = 80GiB" in out.read_text()
    assert "warning:" in capsys.readouterr().err
    assert main(["fmt", "--check", str(out)]) == 0


def test_without_device_memory_the_spec_says_memory_is_unset():
    text, _ = _import(FIXTURES / "grpo_qwen2_7b.overrides", memory=None)
    assert "\n  memory =" not in text and "Device memory: not set" in text


SCRIPT = r"""#!/bin/bash
set -x
# a comment
MODEL=${MODEL:-Qwen/Qwen2.5-3B-Instruct}
n=4
prompts=$((64 * 2))
files="['$HOME/a.parquet', '/data/b.parquet']"
python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$files" \
    data.train_batch_size=${prompts} \
    actor_rollout_ref.model.path=$MODEL \
    actor_rollout_ref.rollout.n=$n \
    actor_rollout_ref.rollout.top_k=-1 \
    +actor_rollout_ref.rollout.enforce_eager=False \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    trainer.n_gpus_per_node=4 $@ 2>&1 | tee log.txt
"""


def test_a_shell_launch_with_variables_arithmetic_and_continuations():
    text, warnings = import_verl_text(SCRIPT.encode(), "run.sh", "80GiB")
    assert 'path = "Qwen/Qwen2.5-3B-Instruct"' in text
    assert 'train = ["~/a.parquet", "/data/b.parquet"]' in text  # $HOME: the home of whoever runs it
    assert "batch_size = 128" in text and "n = 4" in text and "top_k = 0" in text
    assert "rollout.enforce_eager=False (not mapped" in text
    assert not any("$HOME" in w for w in warnings)  # known: no "not set" warning
    assert any("enforce_eager" in w for w in warnings)


def test_a_yaml_config_is_flattened():
    pytest.importorskip("yaml")
    yaml_text = "algorithm:\n  adv_estimator: rloo\ndata:\n  train_batch_size: 64\nactor_rollout_ref:\n" \
                "  rollout:\n    n: 4\n  actor:\n    ppo_mini_batch_size: 16\n"
    text, _ = import_verl_text(yaml_text.encode(), "config.yaml")
    assert "rloo_advantage" in text and "batch_size = 64" in text


@pytest.mark.parametrize("content, message", [
    (b"", "empty"),
    (b"\x00\x01\x02binary", "binary"),
    (b"\xff\xfe bad", "not UTF-8"),
    (b"#!/bin/bash\necho hello\n", "no verl command"),
    (b"python3 -m verl.trainer.main_ppo data.train_batch_size=abc\n", "data.train_batch_size=abc: expected an integer"),
    (b"python3 -m verl.trainer.main_ppo data.train_files='oops\n", "unbalanced"),
    (b"data.train_batch_size=8\nactor_rollout_ref.model.path=\"x\n", "unbalanced"),
    (b"python3 -m verl.trainer.main_ppo algorithm.adv_estimator=gpg\n", "no step for this estimator"),
    (b"python3 -m verl.trainer.main_ppo trainer.nnodes=$NODES\n", "expected an integer >= 1 (it uses a variable"),
    (b"python3 -m verl.trainer.main_generation data.path=x\n", "not an RL training launch"),
    (b"algorithm:\n  - [unclosed\n", "not valid YAML"),
])
def test_malformed_launches_are_one_clear_error(tmp_path, capsys, content, message):
    path = tmp_path / ("launch.yaml" if content.startswith(b"algorithm:") else "launch.sh")
    path.write_bytes(content)
    assert main(["import", "verl", str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_an_unknown_file_and_a_bad_memory_size(tmp_path, capsys):
    assert main(["import", "verl", str(tmp_path / "nope.sh")]) == 1
    assert "cannot read" in capsys.readouterr().err
    assert main(["import", "verl", str(FIXTURES / "grpo_qwen2_7b.overrides"), "--device-memory", "80G"]) == 1
    assert "expected a size with its unit" in capsys.readouterr().err



@pytest.mark.parametrize("launch, roles", [("grpo_qwen2_7b", ("actor", "ref")),
                                           ("ppo_deepseek7b_critic", ("actor", "critic"))])
def test_padding_removal_maps_to_remove_padding_on_the_roles_that_run_the_models(launch, roles):
    """verl's use_remove_padding of the policy (its actor and ref) and of the critic: `remove_padding` on each."""
    text, warnings = _import(FIXTURES / f"{launch}.overrides")
    blocks = {block.split(" {", 1)[0]: block for block in text.split("\nrole ")[1:]}
    keys = {"actor": "model.use_remove_padding", "ref": "model.use_remove_padding",
            "critic": "critic.model.use_remove_padding"}
    for role in roles:
        assert f"remove_padding = true  # verl: {keys[role]}" in blocks[role], role
    assert not any("use_remove_padding" in warning for warning in warnings)


def test_a_cosine_lr_schedule_imports_as_one_and_another_schedule_warns():
    script = SCRIPT.replace("trainer.n_gpus_per_node=4", "trainer.n_gpus_per_node=4 "
                            "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine "
                            "actor_rollout_ref.actor.optim.min_lr_ratio=0.1")
    text, warnings = import_verl_text(script.encode(), "run.sh", "80GiB")
    assert "schedule = cosine" in text and "min_lr_ratio = 0.1" in text
    assert not any("lr_scheduler_type" in w for w in warnings)
    other, warnings = import_verl_text(SCRIPT.replace("trainer.n_gpus_per_node=4", "trainer.n_gpus_per_node=4 "
                                                      "actor_rollout_ref.actor.optim.lr_scheduler_type=wsd").encode(),
                                       "run.sh", "80GiB")
    assert "schedule = cosine" not in other and any("lr_scheduler_type" in w for w in warnings)
