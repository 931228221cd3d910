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
