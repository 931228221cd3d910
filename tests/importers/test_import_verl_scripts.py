"""`rlgraph import verl` on verl's current example scripts (tests/importers/fixtures/scripts: copied unchanged from
verl-project/verl at 1dda039) and on short scripts that use each piece of bash the importer evaluates."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.cli import main
from rlgraph.commands.import_verl import import_verl_text
from rlgraph.importers.launch import read_launch
from rlgraph.importers.verl import ImportProblem
from rlgraph.lang.formatter import format_text

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"
AS_FSDP = ["model_engine=fsdp", "actor_rollout_ref.actor.strategy=fsdp"]


def _import(name: str, overrides: list[str] = ()) -> tuple[str, list[str]]:
    return import_verl_text((SCRIPTS / name).read_bytes(), name, "80GiB", overrides)


def _settings(script: str) -> dict[str, object]:
    return {s.key: s.value for s in read_launch(script.encode(), "run.sh").settings}


@pytest.mark.parametrize("name, overrides", [
    ("grpo_trainer_run_qwen3_8b_fsdp.sh", []),
    ("ppo_trainer_run_qwen3_8b_fsdp.sh", []),
    ("router_replay_run_qwen3_30b_a3b_megatron.sh", AS_FSDP),
    ("mtp_trainer_run_mimo_7b_mtp_fully_async_megatron_multinode.sh", AS_FSDP),
    ("grpo_trainer_run_deepseek_v3_671b_megatron.sh", AS_FSDP),
])
def test_each_current_script_imports_formatted_and_the_same_twice(name, overrides):
    text, _ = _import(name, overrides)
    assert text == _import(name, overrides)[0] and format_text(text) == text


def test_bash_arrays_and_a_case_on_the_machine_give_the_gpu_branch_and_say_so():
    text, warnings = _import("grpo_trainer_run_qwen3_8b_fsdp.sh")
    # "${ACTOR[@]}", "${ROLLOUT[@]}", ... each element one override; `case "${DEVICE}"` (DEVICE from
    # `$(python3 -c 'import torch_npu' ...)`) takes the gpu branch: tp 2, 0.6 of memory, 8 GPUs
    for line in ("batch_size = 1024  # verl: data.train_batch_size", "micro_batch_tokens = 24576",
                 "tp = 2  # verl: rollout.tensor_model_parallel_size", "memory_fraction = 0.6", "n = 5",
                 "devices_per_node = 8", "param_offload = true  # verl: ref.fsdp_config.param_offload"):
        assert line in text, line
    assert any(w.startswith("line 53: `case \"${DEVICE}\"`") and "assumed `gpu`" in w for w in warnings)
    assert "sp_size" not in text and "enforce_eager" not in text  # the npu and gb200 branches are not taken


def test_the_critics_padding_removal_is_verls_current_default():
    text, _ = _import("ppo_trainer_run_qwen3_8b_fsdp.sh")
    critic = text.split("role critic {", 1)[1].split("\n}", 1)[0]
    assert "remove_padding = true" in critic


def test_a_megatron_launch_is_refused_with_the_override_that_imports_it():
    with pytest.raises(ImportProblem) as refused:
        _import("grpo_trainer_run_deepseek_v3_671b_megatron.sh")
    assert any("model_engine=megatron: rlgraph has no megatron strategy" in e and "-s model_engine=fsdp" in e
               for e in refused.value.errors)
    text, warnings = _import("grpo_trainer_run_deepseek_v3_671b_megatron.sh", AS_FSDP)
    assert "strategy = fsdp" in text
    assert any("megatron.tensor_model_parallel_size=8 is not mapped" in w for w in warnings)


def test_a_megatron_lite_launch_names_no_strategy_but_is_refused_as_one():
    script = (b"python3 -m verl.trainer.main_ppo hydra.searchpath=[pkg://verl_mlite.config] "
              b"actor_rollout_ref.actor.engine.tp=2 algorithm.adv_estimator=grpo\n")
    with pytest.raises(ImportProblem, match=r"line 1: hydra.searchpath=\[pkg://verl_mlite.config\]: rlgraph has no "
                                            r"mlite strategy .* -s actor_rollout_ref.actor.strategy=fsdp"):
        import_verl_text(script, "run.sh")
    _, warnings = import_verl_text(script, "run.sh", None, ["actor_rollout_ref.actor.strategy=fsdp"])
    assert any("actor.engine.tp=2 is not mapped: a training-backend option" in w for w in warnings)


def test_the_fully_async_main_imports_with_its_batch_and_overlong_penalty():
    name = "mtp_trainer_run_mimo_7b_mtp_fully_async_megatron_multinode.sh"
    text, warnings = _import(name, AS_FSDP)
    assert "verl.experimental.fully_async_policy.fully_async_main" in text
    assert "batch_size = 32  # verl: actor.ppo_mini_batch_size, async_training.require_batches" in text
    assert "overlong_penalty(buffer = 4096, penalty_factor = 1.0)" in text
    assert "engine = sglang" in text
    assert any("async_training.staleness_threshold=0.5 is not mapped" in w for w in warnings)
    # the rollout's own devices (rollout.nnodes x rollout.n_gpus_per_node) are a pool of its own
    assert "pool rollout_gpus {" in text and "pool = rollout_gpus" in text
    assert not any("rollout.n_gpus_per_node" in w for w in warnings)


def test_arithmetic_in_a_default_and_a_token_budget_without_dynamic_batching():
    text, warnings = _import("router_replay_run_qwen3_30b_a3b_megatron.sh", AS_FSDP)
    # ppo_max_token_len_per_gpu=${ppo_max_token_len_per_gpu:-$(((max_prompt_length + max_response_length) * 2))}
    assert any("actor.ppo_max_token_len_per_gpu=2048 has no effect: no effect without actor.use_dynamic_bsz" in w
               for w in warnings)


def test_if_elif_else_case_functions_and_defaults_are_evaluated():
    settings = _settings(r"""
TP=${TP:-4}
: ${N:=8}
ARGS=(a.tp=$TP)
if [ "$TP" -ge 8 ]; then SEQS=256; elif [[ $TP == 4 ]]; then SEQS=1024; else SEQS=384; fi
case "$TP" in 1|2) MODE=small ;; *) MODE=big ;; esac
add() { ARGS+=("$1=$2"); }
add a.mode "$MODE"
for k in x y; do ARGS+=(loop.$k=1); done
export LR=1e-6
python3 -m verl.trainer.main_ppo "${ARGS[@]}" a.seqs=$SEQS a.n=$N a.lr=$LR \
    a.files="['$HOME/x.parquet']" "${EMPTY[@]}" "$@"
""")
    assert settings == {"a.tp": 4, "a.mode": "big", "loop.x": 1, "loop.y": 1, "a.seqs": 1024, "a.n": 8,
                        "a.lr": 1e-6, "a.files": ["~/x.parquet"]}


def test_a_branch_on_the_machine_takes_one_branch_and_names_the_line_and_value():
    launch = read_launch(b"""GPUS=8
if [ "$(nvidia-smi --list-gpus | wc -l)" -lt 8 ]; then
    GPUS=4
fi
python3 -m verl.trainer.main_ppo trainer.n_gpus_per_node=$GPUS
""", "run.sh")
    assert [s.value for s in launch.settings] == [8]
    assert any(w.startswith("line 2: the condition") and "assumed false" in w for w in launch.warnings)


@pytest.mark.parametrize("command", [
    "torchrun --nproc_per_node=8 -m verl.trainer.main_ppo",
    "ray job submit --address=http://127.0.0.1:8265 --runtime-env=verl/trainer/runtime_env.yaml -- python3 -m "
    "verl.trainer.main_ppo",
    "python3 -m verl.experimental.one_step_off_policy.main_ppo",
    "python3 -m recipe.dapo.main_dapo",
])
def test_wrappers_and_other_mains(command):
    launch = read_launch(f"nohup {command} data.train_batch_size=16 2>&1 | tee log.txt &\n".encode(), "run.sh")
    assert launch.entry.endswith(command.rsplit(" ", 1)[-1])
    assert [(s.key, s.value) for s in launch.settings] == [("data.train_batch_size", 16)]


@pytest.mark.parametrize("script, message", [
    (b"if [ a ]; then\n  x=1\n", "line 3: bash expects `fi`"),
    (b"A=(1 2\npython3 -m verl.trainer.main_ppo a=1\n", "line "),
    (b"python3 -m verl.trainer.main_ppo a.b=\"x\n", "unbalanced"),
    (b"python3 -m verl.trainer.sft_trainer data.train_batch_size=8\n", "is not an RL training launch"),
])
def test_malformed_scripts_are_one_error_naming_the_line(tmp_path, capsys, script, message):
    path = tmp_path / "run.sh"
    path.write_bytes(script)
    assert main(["import", "verl", str(path)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


LAUNCH = "python3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo actor_rollout_ref.rollout.n=4 "


def _spec(overrides: str, extra: list[str] = ()) -> tuple[str, list[str]]:
    return import_verl_text((LAUNCH + overrides + "\n").encode(), "run.sh", "80GiB", extra)


def test_a_critic_verl_trains_but_grpo_does_not_read_is_a_warning():
    _, warnings = _spec("critic.enable=True")
    assert any("critic.enable=True is not mapped: verl builds and trains this critic" in w for w in warnings)


def test_gae_without_the_critic_verl_would_build_is_refused():
    with pytest.raises(ImportProblem, match="critic.enable=False with adv_estimator=gae: GAE needs a critic"):
        import_verl_text(b"python3 -m verl.trainer.main_ppo critic.enable=False\n", "run.sh")


def test_verls_renamed_reward_keys_give_the_overlong_penalty():
    text, warnings = _spec("+reward.reward_kwargs.overlong_buffer_cfg.enable=True "
                           "+reward.reward_kwargs.overlong_buffer_cfg.len=512 "
                           "+reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=0.5 "
                           "reward.custom_reward_function.path=/r.py")
    assert "overlong_penalty(buffer = 512, penalty_factor = 0.5)" in text
    assert "# verl: reward.reward_kwargs.overlong_buffer_cfg.enable" in text  # named as the launch wrote it
    assert 'fn = "/r.py:compute_score"' in text


def test_an_import_overridden_to_cpu_says_what_gpu_only_settings_it_changed(tmp_path):
    text, warnings = _spec("actor_rollout_ref.actor.use_kl_loss=True "
                           "actor_rollout_ref.ref.fsdp_config.param_offload=True",
                           ["trainer.device=cpu", "trainer.n_gpus_per_node=1"])
    assert "device = cpu" in text and "dtype = bf16" not in text and "dtype = fp32" in text
    changed = {w.split(": ", 2)[1].split(" = ")[0] for w in warnings if w.startswith("trainer.device=cpu")}
    assert {"role actor dtype", "role actor gradient_checkpointing", "role actor remove_padding",
            "role ref param_offload", "role rollout engine"} <= changed
    assert "engine = hf" in text


def test_a_model_folder_with_config_json_is_not_unknown(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    _, warnings = _spec(f"actor_rollout_ref.model.path={tmp_path}")
    assert not any("unknown to the importer" in w for w in warnings)
    _, warnings = _spec(f"actor_rollout_ref.model.path={tmp_path / 'absent'}")
    assert any("unknown to the importer" in w for w in warnings)


def test_a_bad_override_is_one_clear_error(capsys):
    assert main(["import", "verl", str(SCRIPTS / "ppo_trainer_run_qwen3_8b_fsdp.sh"), "-s", "nonsense"]) == 1
    assert "-s nonsense: expected a verl override KEY=VALUE" in capsys.readouterr().err


def test_a_variable_the_script_does_not_set_is_empty_in_a_test_and_left_as_written_in_a_value():
    launch = read_launch(b"""if [ -z "$CKPT" ]; then MODE=fresh; else MODE=resume; fi
python3 -m verl.trainer.main_ppo a.mode=$MODE a.path=$DATA/x.parquet
""", "run.sh")
    assert [(s.key, s.value) for s in launch.settings] == [("a.mode", "fresh"), ("a.path", "$DATA/x.parquet")]
    assert any("`$CKPT` is not set in the script; the test reads it as empty" in w for w in launch.warnings)
    assert any(w.startswith("line 2: `$DATA` is not set") for w in launch.warnings)


def test_in_a_list_an_unknown_test_is_false_and_a_command_succeeds_each_said():
    launch = read_launch(b"""X=1
[ -f /data/x ] && X=2
python3 prepare.py && python3 -m verl.trainer.main_ppo a.x=$X
""", "run.sh")
    assert [s.value for s in launch.settings] == [1]
    assert "line 2: `[ -f /data/x ]` cannot be known statically; assumed false" in launch.warnings
    assert "line 3: `python3 prepare.py` cannot be known statically; assumed true" in launch.warnings



def test_here_strings_heredocs_and_loops():
    launch = read_launch(b"""read -r N REST <<< "4 a b"
cat > /tmp/cfg.yaml <<END
a: $(date)
END
while ! ray status; do sleep 1; done
python3 -m verl.trainer.main_ppo a.n=$N a.rest="$REST"
""", "run.sh")
    assert [(s.key, s.value) for s in launch.settings] == [("a.n", 4), ("a.rest", "a b")]
    assert launch.warnings == []  # the heredoc's $(date) is not run; the wait loop sets nothing


def _actor(text: str) -> str:
    return text.split("role actor {", 1)[1].split("\n}", 1)[0]


def test_verls_param_offload_is_not_rlgraphs_the_update_holds_the_state_on_the_device():
    """verl loads an offloaded actor's state onto the device for each update (load_fsdp_model_to_gpu): its peak is
    a role's without offload, so the import leaves rlgraph's param_offload (FSDP2's CPUOffloadPolicy) off."""
    text, _ = _import("grpo_trainer_run_qwen3_8b_fsdp.sh", ["actor_rollout_ref.actor.fsdp_config.param_offload=True"])
    actor = _actor(text)
    assert "param_offload = true" not in actor
    assert "verl: actor.fsdp_config.param_offload=True (as rlgraph:" in actor


def test_verls_offload_policy_is_rlgraphs_param_offload():
    text, _ = _import("grpo_trainer_run_qwen3_8b_fsdp.sh", ["actor_rollout_ref.actor.fsdp_config.offload_policy=True"])
    assert "param_offload = true  # verl: actor.fsdp_config.offload_policy" in _actor(text)


def test_a_mixture_of_experts_is_imported_with_its_experts_and_head_dim():
    """Qwen3-30B-A3B: 30.5B parameters in all (each expert counted for memory), head_dim 128 (not hidden / heads)."""
    text, _ = _import("router_replay_run_qwen3_30b_a3b_megatron.sh", AS_FSDP)
    for line in ("params = 30.5B", "head_dim = 128", "experts = 128", "experts_per_token = 8",
                 "expert_intermediate = 768"):
        assert f"  {line}\n" in text, line
