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


def test_remove_all(tmp_path):
    _write(tmp_path, 2)
    assert ckpt.remove_all(tmp_path) == 1 and ckpt.latest_checkpoint(tmp_path) is None
