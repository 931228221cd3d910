"""A full disk at start (run.lock, plan.json and the spec's copy, history.jsonl) is a RunError naming the file,
its file system and the space left there, as for checkpoints (rlgraph/runtime/disk.py `writing`), not an
OSError traceback (issue 29 item 8: `lock.py os.pwrite ... Errno 28`, `commands/run.py write_text`)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rlgraph.api import spec_inputs
from rlgraph.runtime import history
from rlgraph.runtime.disk import filesystem, write_files
from rlgraph.runtime.errors import RunError
from rlgraph.runtime.lock import RunDirLock

DEV_FULL = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_when_the_lock_is_written_names_the_lock_file_and_the_free_space(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "pwrite", disk_full)
    lock = RunDirLock(tmp_path / "run")
    with pytest.raises(RunError) as refused:
        lock.acquire()
    message = str(refused.value)
    assert message.startswith(f"disk full while writing {tmp_path / 'run' / 'run.lock'}: free space on "
                              f"{filesystem(tmp_path)} (")
    assert " free there)" in message and "--output" in message
    monkeypatch.undo()
    with RunDirLock(tmp_path / "run"):  # the failed start let go of the lock
        pass


@DEV_FULL
def test_a_full_disk_when_plan_json_is_written_names_it(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".plan.json.tmp").symlink_to("/dev/full")  # every write to it: ENOSPC, as on a full disk
    with pytest.raises(RunError, match=rf"^disk full while writing {run_dir}/.plan.json.tmp: free space on "):
        write_files(run_dir, spec_inputs("{}", {str(tmp_path / "x.rl"): "rlgraph 1\n"}, str(tmp_path / "x.rl"), []))


def test_a_full_disk_when_the_spec_is_copied_names_the_copy(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    real = Path.write_text

    def full_for_the_spec(self, *args, **kwargs):
        return disk_full() if self.name == ".x.rl.tmp" else real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", full_for_the_spec)
    with pytest.raises(RunError, match=rf"^disk full while writing {run_dir}/spec/.x.rl.tmp: free space on "):
        write_files(run_dir, spec_inputs("{}", {str(tmp_path / "x.rl"): "rlgraph 1\n"}, str(tmp_path / "x.rl"), []))
    assert (run_dir / "plan.json").read_text() == "{}"


def test_a_full_disk_when_history_is_appended_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr(history, "open", disk_full, raising=False)
    with pytest.raises(RunError, match=rf"^disk full while writing {tmp_path}/history.jsonl: free space on "):
        history.append(tmp_path, {"event": "start"})
