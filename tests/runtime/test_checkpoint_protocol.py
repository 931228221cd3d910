"""The checkpoint protocol: a run killed at any moment resumes from a complete checkpoint with every
metrics line once; a damaged checkpoint is found before Ray starts and the one before it is used; every
read or write error names the file and the cause."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from rlgraph.runtime import checkpoint as ckpt
from rlgraph.runtime.errors import CheckpointError
from rlgraph.runtime.metrics import MetricsWriter

from .helpers import fast, read_metrics

SPEC = "specs/grpo_arith.rl"
# every write to /dev/full fails with ENOSPC: the kernel's own disk-full error, no mock
DEV_FULL = pytest.mark.skipif(not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)),
                              reason="needs /dev/full")


def _write(run_dir: Path, step: int, keep: int = 3) -> ckpt.Checkpoint:
    writer = ckpt.CheckpointWriter(run_dir, step)
    (writer.tmp / "actor").mkdir()
    save_file({"w": torch.full((64, 64), float(step))}, str(writer.tmp / "actor" / "model.safetensors"))
    writer.save_tensors("rng/driver.pt", {"torch": torch.get_rng_state()})
    writer.save_tensors(ckpt.TRAINER_STATE, {"step": step})
    writer.save_json("meta.json", {"step": step})
    return writer.publish(keep)


def _truncate(file: Path) -> None:
    data = file.read_bytes()
    file.write_bytes(data[: len(data) // 2])


def _flip_a_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    file.write_bytes(bytes(data))


def test_the_manifest_lists_every_file_with_its_size_and_sha256(tmp_path):
    checkpoint = _write(tmp_path, 2)
    files = json.loads((checkpoint.path / ckpt.MANIFEST).read_text())["files"]
    on_disk = {p.relative_to(checkpoint.path).as_posix() for p in checkpoint.path.rglob("*") if p.is_file()}
    assert set(files) == on_disk - {ckpt.MANIFEST}
    for name, entry in files.items():
        data = (checkpoint.path / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert ckpt.verify(checkpoint) is None


@pytest.mark.parametrize("damage, file, problem", [
    (_truncate, "actor/model.safetensors", "is truncated"),
    (_truncate, ckpt.TRAINER_STATE, "is truncated"),
    (_flip_a_byte, "actor/model.safetensors", "is corrupt"),
    (Path.unlink, "rng/driver.pt", "is missing"),
    (Path.unlink, ckpt.TRAINER_STATE, "is missing"),
])
def test_a_damaged_latest_checkpoint_is_reported_and_the_one_before_used(tmp_path, damage, file, problem):
    _write(tmp_path, 2)
    latest = _write(tmp_path, 4)
    damage(latest.path / file)
    warnings: list[str] = []
    chosen = ckpt.resume_checkpoint(tmp_path, warnings.append)
    assert chosen.step == 2
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert f"{latest.path / file} {problem}" in warnings[0] and "resuming from step 2" in warnings[0]
    # set aside for a look, never resumed from nor counted again (pruning would keep it over step 2)
    assert (tmp_path / "checkpoints" / "step_4.corrupt").is_dir()
    assert [c.step for c in ckpt.checkpoints(tmp_path)] == [2]


def test_no_complete_checkpoint_is_an_error_that_says_what_to_delete(tmp_path):
    for step in (2, 4):
        _truncate(_write(tmp_path, step).path / "actor" / "model.safetensors")
    with pytest.raises(CheckpointError) as caught:
        ckpt.resume_checkpoint(tmp_path, lambda message: None)
    message = str(caught.value)
    assert "no complete checkpoint" in message and "step_4/actor/model.safetensors is truncated" in message
    assert f"Delete {tmp_path / 'checkpoints'}" in message and "--no-resume" in message


def test_a_damaged_file_is_named_when_read(tmp_path):
    # damaged after the resume verified it: the load itself says what is wrong
    checkpoint = _write(tmp_path, 2)
    _truncate(checkpoint.path / ckpt.TRAINER_STATE)
    (checkpoint.path / "rng" / "driver.pt").unlink()
    with pytest.raises(CheckpointError, match=r"trainer_state.pt is truncated or corrupt .*delete .*step_2 to resume"):
        checkpoint.trainer_state()
    with pytest.raises(CheckpointError, match=r"rng/driver.pt is missing; delete"):
        checkpoint.load(checkpoint.rng_file("driver"))


class Killed(BaseException):
    """The process dies here: nothing after this point runs (no `except Exception` catches it)."""


def test_a_pruning_cut_short_leaves_no_step_folder_and_is_swept_at_start(tmp_path, monkeypatch):
    _write(tmp_path, 2, keep=1)
    rmtree = shutil.rmtree

    def killed_halfway(path, *args, **kwargs):  # the model goes first; trainer_state.pt is still there
        rmtree(Path(path) / "actor")
        raise Killed

    monkeypatch.setattr(shutil, "rmtree", killed_halfway)
    with pytest.raises(Killed):
        _write(tmp_path, 4, keep=1)  # publishes step 4, then prunes step 2
    monkeypatch.setattr(shutil, "rmtree", rmtree)
    root = tmp_path / "checkpoints"
    assert [c.step for c in ckpt.checkpoints(tmp_path)] == [4]  # the half-deleted step 2 is not a checkpoint
    assert [p.name for p in root.iterdir() if p.name.startswith(".deleting-step_2-")]

    abandoned = root / ".step_6.tmp-1-0123abcd"  # a writer killed before it published
    (abandoned / "actor").mkdir(parents=True)
    live = ckpt.CheckpointWriter(tmp_path, 8)  # a writer of this process, still writing
    ckpt.sweep(tmp_path)
    assert sorted(p.name for p in root.iterdir()) == sorted(["step_4", live.tmp.name])
    live.abandon()


@DEV_FULL
def test_disk_full_names_the_file_and_what_to_do(tmp_path):
    writer = ckpt.CheckpointWriter(tmp_path, 2)
    (writer.tmp / ckpt.TRAINER_STATE).symlink_to("/dev/full")
    with pytest.raises(CheckpointError) as caught:
        # torch's zip writer, cleaning up, raises "unexpected pos" over the OSError: the cause is still found
        writer.save_tensors(ckpt.TRAINER_STATE, {"step": 2, "w": torch.zeros(1 << 16)})
    assert str(caught.value) == (f"disk full while writing {writer.tmp / ckpt.TRAINER_STATE}: free space on "
                                 f"{ckpt._filesystem(tmp_path)} or lower keep_checkpoints")
    writer.abandon()

    metrics = MetricsWriter(tmp_path, keep_up_to_step=None)
    metrics.path.unlink()
    metrics.path.symlink_to("/dev/full")
    with pytest.raises(CheckpointError, match=rf"^disk full while writing {tmp_path}/metrics.jsonl: free space on "):
        metrics.write({"training/global_step": 1})
    assert metrics.records == []


@DEV_FULL
def test_a_worker_that_cannot_write_its_optimizer_names_the_file(ray_session, arith_model, tmp_path):
    # ray_session: setup() asks Ray where it runs, which outside Ray would start an instance of its own
    from rlgraph.runtime.process import DeviceProcess, HostedRole
    from rlgraph.runtime.roles import worker_specs

    from .plans import grpo_plan

    specs = worker_specs(grpo_plan(), {"actor": arith_model, "ref": arith_model, "rollout": arith_model})
    process = DeviceProcess("actor/0", 0, [HostedRole(specs["actor"], 0)], num_threads=1)
    process.setup()
    optimizer_file = tmp_path / "optim" / "actor.pt"
    optimizer_file.parent.mkdir()
    optimizer_file.symlink_to("/dev/full")
    with pytest.raises(CheckpointError, match=rf"^disk full while writing {optimizer_file}: free space on "):
        process.save("actor", str(tmp_path / "actor"), str(optimizer_file))


# --- whole runs (the test session's Ray) ---


def _killed_at_step_2_publish(run_cli, run_dir, monkeypatch, after: bool) -> None:
    """A run of 2 steps, a checkpoint each, whose driver dies just before (or just after) step 2's is published."""
    publish = ckpt.CheckpointWriter.publish

    def dying(self, keep):
        if self.step == 2 and not after:
            raise Killed
        published = publish(self, keep)
        if self.step == 2:
            raise Killed
        return published

    monkeypatch.setattr(ckpt.CheckpointWriter, "publish", dying)
    with pytest.raises(Killed):
        run_cli(SPEC, "--output", run_dir, *fast(steps=2, checkpoint_every=1))
    monkeypatch.setattr(ckpt.CheckpointWriter, "publish", publish)
    assert [r["training/global_step"] for r in read_metrics(run_dir)] == [0, 1, 2]  # step 2's line came first
    assert ckpt.latest_checkpoint(run_dir).step == (2 if after else 1)


def test_a_driver_killed_before_a_publish_resumes_without_doubling_a_line(run_cli, tmp_path, monkeypatch):
    _killed_at_step_2_publish(run_cli, tmp_path, monkeypatch, after=False)
    code, out = run_cli(SPEC, "--output", tmp_path, *fast(steps=2, checkpoint_every=1))
    assert code == 0, out
    assert "resuming from" in out and "(step 1)" in out
    assert [r["training/global_step"] for r in read_metrics(tmp_path)] == [0, 1, 2]  # step 2's line once
    assert all(ckpt.verify(c) is None for c in ckpt.checkpoints(tmp_path))


def test_a_driver_killed_after_a_publish_keeps_the_line_and_a_damaged_checkpoint_falls_back(
        run_cli, tmp_path, monkeypatch):
    _killed_at_step_2_publish(run_cli, tmp_path, monkeypatch, after=True)
    # then step 2's model is cut short (a disk that lost it): found before Ray starts, step 1 used
    model = tmp_path / "checkpoints" / "step_2" / "actor" / "model.safetensors"
    _truncate(model)
    code, out = run_cli(SPEC, "--output", tmp_path, *fast(steps=2, checkpoint_every=1))
    assert code == 0, out
    assert f"warning: {model} is truncated" in " ".join(out.split())  # the console may wrap the line
    assert "resuming from" in out and "(step 1)" in out
    assert [r["training/global_step"] for r in read_metrics(tmp_path)] == [0, 1, 2]
    assert ckpt.verify(ckpt.latest_checkpoint(tmp_path)) is None


def test_disk_full_during_a_checkpoint_is_one_paragraph(run_cli, tmp_path, monkeypatch):
    def full(data, f, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", full)  # the driver's writes only: the workers are other processes
    code, out = run_cli(SPEC, "--output", tmp_path, *fast(steps=1))
    assert code == 1
    text = " ".join(out.split())
    assert "error: disk full while writing" in text and ".pt: free space on" in text and "keep_checkpoints" in text
    assert "Traceback" not in out
    assert not ckpt.checkpoints(tmp_path) and not list((tmp_path / "checkpoints").iterdir())
