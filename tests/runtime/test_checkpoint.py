import torch

from rlgraph.runtime import checkpoint as ckpt


def _write(run_dir, step, keep=2):
    writer = ckpt.CheckpointWriter(run_dir, step)
    writer.save_tensors(ckpt.TRAINER_STATE, {"step": step, "dataloader": {"epoch": 0, "batch": step}})
    return writer.publish(keep)


def test_publish_is_atomic_and_keeps_the_newest(tmp_path):
    for step in (2, 4, 6):
        _write(tmp_path, step)
    assert [c.step for c in ckpt.checkpoints(tmp_path)] == [4, 6]
    latest = ckpt.latest_checkpoint(tmp_path)
    assert latest.step == 6 and latest.trainer_state()["dataloader"]["batch"] == 6
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_an_unfinished_write_is_not_a_checkpoint(tmp_path):
    _write(tmp_path, 2)
    writer = ckpt.CheckpointWriter(tmp_path, 4)  # crashed before publish
    writer.save_tensors(ckpt.TRAINER_STATE, {"step": 4})
    assert ckpt.latest_checkpoint(tmp_path).step == 2


def test_state_loads_with_weights_only(tmp_path):
    writer = ckpt.CheckpointWriter(tmp_path, 1)
    writer.save_tensors(ckpt.TRAINER_STATE, {"step": 1, "rng": torch.get_rng_state(), "t": (1, 2.0, "x")})
    assert writer.publish(1).trainer_state()["t"] == (1, 2.0, "x")


def test_rewriting_a_step_replaces_it(tmp_path):
    _write(tmp_path, 2)
    _write(tmp_path, 2)
    assert [c.step for c in ckpt.checkpoints(tmp_path)] == [2]


def test_a_fresh_start_sets_the_earlier_run_aside_and_a_second_one_next_to_it(tmp_path):
    for attempt in (1, 2):
        _write(tmp_path, 2)
        (tmp_path / "metrics.jsonl").write_text(f'{{"attempt": {attempt}}}\n')
        assert ckpt.set_aside(tmp_path, also=("metrics.jsonl", "samples.jsonl")) == (1, tmp_path / "earlier" / str(attempt))
        assert ckpt.latest_checkpoint(tmp_path) is None and not (tmp_path / "metrics.jsonl").exists()
    for attempt in (1, 2):  # each earlier run whole, where it can be resumed from by hand
        kept = tmp_path / "earlier" / str(attempt)
        assert ckpt.latest_checkpoint(kept).trainer_state()["step"] == 2
        assert (kept / "metrics.jsonl").read_text() == f'{{"attempt": {attempt}}}\n'


def test_a_fresh_start_in_an_empty_run_directory_moves_nothing(tmp_path):
    assert ckpt.set_aside(tmp_path, also=("metrics.jsonl",)) == (0, None)
    assert not (tmp_path / "earlier").exists()


# --- a checkpoint is verified by its manifest or not used ---


def _write_model(run_dir, step, model_dir=None):
    """A checkpoint with a real HF model folder (the shipped tiny model's config, random weights: fast)."""
    import shutil

    from safetensors.torch import save_file

    writer = ckpt.CheckpointWriter(run_dir, step)
    writer.save_tensors(ckpt.TRAINER_STATE, {"step": step})
    writer.save_tensors("optim/actor.pt", {"state": {0: {"exp_avg": torch.zeros(64, 64)}}})
    (writer.tmp / "actor").mkdir()
    if model_dir is not None:
        shutil.copytree(model_dir, writer.tmp / "actor", dirs_exist_ok=True)
    else:
        save_file({"w": torch.full((64, 64), float(step))}, str(writer.tmp / "actor" / "model.safetensors"))
    return writer.publish(3)


def _truncate(file):
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def test_a_newest_checkpoint_without_its_manifest_is_set_aside_and_the_intact_one_before_used(tmp_path):
    _write_model(tmp_path, 2)
    newest = _write_model(tmp_path, 4)
    (newest.path / ckpt.MANIFEST).unlink()
    _truncate(newest.path / "actor" / "model.safetensors")  # what it holds cannot be known without the manifest
    warnings: list[str] = []
    chosen = ckpt.resume_checkpoint(tmp_path, warnings.append)
    assert chosen.step == 2
    assert len(warnings) == 1 and f"{newest.path} has no manifest.json" in warnings[0]
    assert "resuming from step 2" in warnings[0]
    assert (tmp_path / "checkpoints" / "step_4.corrupt").is_dir()  # kept for a look, never resumed from
    assert [c.step for c in ckpt.checkpoints(tmp_path)] == [2]


def test_only_checkpoints_without_manifests_is_an_error_that_says_how_to_start_over(tmp_path):
    import pytest

    from rlgraph.runtime.errors import CheckpointError

    for step in (2, 4):
        (_write_model(tmp_path, step).path / ckpt.MANIFEST).unlink()
    with pytest.raises(CheckpointError) as caught:
        ckpt.resume_checkpoint(tmp_path, lambda message: None)
    message = str(caught.value)
    assert "no complete checkpoint" in message and "step_4 has no manifest.json" in message
    assert "--no-resume" in message


def test_a_truncated_optimizer_file_read_in_a_worker_is_a_checkpoint_error_naming_it(tmp_path):
    import pytest

    from rlgraph.runtime.errors import CheckpointError
    from rlgraph.runtime.process import DeviceProcess

    checkpoint = _write_model(tmp_path, 2)
    _truncate(checkpoint.optimizer_file("actor"))
    process = DeviceProcess("actor/0", 0, [], num_threads=1)
    process.workers["actor"] = object()  # never reached: the file fails first
    with pytest.raises(CheckpointError) as caught:
        process.load_optimizer("actor", str(checkpoint.optimizer_file("actor")))
    message = str(caught.value)
    assert f"{checkpoint.optimizer_file('actor')} is truncated or corrupt" in message
    assert f"delete {checkpoint.path} to resume from the checkpoint before it" in message and "Traceback" not in message


def test_truncated_weights_of_a_checkpoint_loaded_in_a_worker_are_a_checkpoint_error_naming_them(tmp_path):
    import pytest

    from rlgraph.models import resolve_model_path
    from rlgraph.runtime.errors import CheckpointError
    from rlgraph.runtime.process import DeviceProcess, HostedRole
    from rlgraph.runtime.roles import worker_specs

    from .plans import grpo_plan

    checkpoint = _write_model(tmp_path, 2, model_dir=resolve_model_path("builtin:arith-gpt"))
    actor = worker_specs(grpo_plan(), {"actor": str(checkpoint.model_dir("actor")), "ref": "", "rollout": ""})["actor"]
    DeviceProcess("actor/0", 0, [HostedRole(actor, 0)], num_threads=1).setup()  # intact: it builds
    weights = checkpoint.model_dir("actor") / "model.safetensors"
    _truncate(weights)
    with pytest.raises(CheckpointError) as caught:
        DeviceProcess("actor/0", 0, [HostedRole(actor, 0)], num_threads=1).setup()
    message = str(caught.value)
    assert f"{weights} is truncated or corrupt (Error while deserializing header" in message
    assert f"delete {checkpoint.path} to resume from the checkpoint before it" in message and "Traceback" not in message
