"""`train.loggers`: each step's metrics reach TensorBoard, wandb (offline) and MLflow (a file store) as well as
metrics.jsonl, read back with each tool's own reader; `check` and pre-flight refuse what cannot work."""

from __future__ import annotations

import json
import struct
import time

import pytest

from rlgraph.lang.schema import LOGGERS
from rlgraph.runtime import loggers as loggers_module
from rlgraph.runtime.errors import PreflightError
from rlgraph.runtime.metrics import MetricsWriter
from rlgraph.runtime.preflight import preflight

from .helpers import SPECS, plan_from_spec

STEPS = [
    {"training/global_step": 0, "val/score/mean": 0.25, "val/score/mean@4": 0.5},
    {"training/global_step": 1, "critic/score/mean": 0.5, "timing_s/step": 1.5, "note": "text is not a scalar"},
    {"training/global_step": 2, "critic/score/mean": 0.75, "timing_s/step": 1.25},
]


def write_steps(run_dir, loggers) -> MetricsWriter:
    writer = MetricsWriter(run_dir, keep_up_to_step=None, loggers=loggers)
    for record in STEPS:
        writer.write(record)
    writer.close()
    return writer


def test_the_spec_and_the_runtime_know_the_same_loggers():
    assert LOGGERS == tuple(loggers_module.LOGGERS)


def test_check_refuses_a_name_that_is_not_a_logger():
    from rlgraph.compiler import compile_spec

    compilation = compile_spec(str(SPECS / "grpo_arith.rl"), ["train.loggers=[console, tensorbord]"])
    assert [(d.code, d.message) for d in compilation.diagnostics] == [
        ("wrong-type", "wrong value for `loggers`: expected one of `console`, `tensorboard`, `wandb`, `mlflow`")]


def test_tensorboard_gets_every_scalar_at_its_step(tmp_path):
    pytest.importorskip("tensorboard", reason="the tensorboard logger needs the test extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    write_steps(tmp_path, ("console", "tensorboard"))
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert scalars == {"val/score/mean": [(0, 0.25)], "val/score/mean@4": [(0, 0.5)],
                       "critic/score/mean": [(1, 0.5), (2, 0.75)], "timing_s/step": [(1, 1.5), (2, 1.25)]}
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3  # always written as well


def test_without_loggers_only_metrics_jsonl_is_written(tmp_path):
    write_steps(tmp_path, ())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_the_loggers_are_read_from_the_runs_plan_json(tmp_path):
    """As `rlgraph run` does it: plan.json is in the run directory before the loop makes its writer."""
    pytest.importorskip("tensorboard", reason="the tensorboard logger needs the test extra")
    (tmp_path / "plan.json").write_text(json.dumps({"train": {"loggers": ["tensorboard"]}}))
    write_steps(tmp_path, None)
    assert any((tmp_path / "tensorboard").iterdir())


def wandb_history(run_file) -> list[dict[str, str]]:
    """The history records of an offline run's .wandb file, once wandb's writer has written its last record."""
    deadline = time.monotonic() + 120
    while True:  # wandb's own process writes the file; the run's exit record comes last, when it is complete
        kinds, history = wandb_records(run_file)
        if "exit" in kinds or time.monotonic() > deadline:
            return history
        time.sleep(0.2)


def wandb_records(run_file) -> tuple[set[str], list[dict[str, str]]]:
    """The record kinds and the history records of an offline run's .wandb file (a LevelDB-style log of protobuf
    records: a 7-byte header, then 32 KiB blocks of chunks, each a crc32, a length, a type: full/first/middle/last)."""
    from wandb.proto import wandb_internal_pb2

    data = run_file.read_bytes()
    if len(data) < 7:  # not written yet
        return set(), []
    assert data[:4] == b":W&B"
    pos, pending, history, kinds = 7, b"", [], set()
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a chunk header is padding
            pos += 32768 - pos % 32768
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if pos + 7 + length > len(data):  # a chunk still being written
            break
        pending, pos = pending + data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind in (1, 4):  # full, or the last chunk of a record
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            kinds.add(record.WhichOneof("record_type"))
            if record.WhichOneof("record_type") == "history":
                history.append({item.key or "/".join(item.nested_key): item.value_json for item in record.history.item})
    return kinds, history


def test_wandb_offline_gets_every_scalar_at_its_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb logger needs the wandb extra: pip install 'rlgraph[wandb]'")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "rlgraph-test")
    write_steps(tmp_path, ("wandb",))
    (run_file,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    steps = [{k: float(v) for k, v in h.items() if not k.startswith("_")} | {"step": int(h["_step"])}
             for h in wandb_history(run_file)]
    assert steps == [{"val/score/mean": 0.25, "val/score/mean@4": 0.5, "step": 0},
                     {"critic/score/mean": 0.5, "timing_s/step": 1.5, "step": 1},
                     {"critic/score/mean": 0.75, "timing_s/step": 1.25, "step": 2}]


def test_mlflow_file_store_gets_every_scalar_at_its_step(tmp_path, monkeypatch):
    pytest.importorskip("mlflow", reason="the mlflow logger needs the mlflow extra: pip install 'rlgraph[mlflow]'")
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "store").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "rlgraph-test")
    (tmp_path / "run-7").mkdir()
    write_steps(tmp_path / "run-7", ("mlflow",))
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rlgraph-test").experiment_id])
    assert run.info.run_name == "run-7" and run.info.status == "FINISHED"
    history = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
               for key in run.data.metrics}
    assert history == {"val/score/mean": [(0, 0.25)], "val/score/mean_at_4": [(0, 0.5)],
                       "critic/score/mean": [(1, 0.5), (2, 0.75)], "timing_s/step": [(1, 1.5), (2, 1.25)]}


def test_preflight_refuses_a_logger_whose_package_is_missing_naming_the_extra(monkeypatch):
    # a package name nothing provides, in place of wandb: the check looks for it as it would for wandb
    monkeypatch.setitem(loggers_module.LOGGERS, "wandb", ("rlgraph_absent_package", "wandb"))
    plan = plan_from_spec(SPECS / "grpo_arith.rl", "train.loggers=[console, wandb]")
    with pytest.raises(PreflightError) as refused:
        preflight(plan, starting_locally=False)
    assert str(refused.value) == ("train.loggers names wandb, but the rlgraph_absent_package package is not "
                                  "installed: pip install 'rlgraph[wandb]'")


def test_a_failing_logger_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    pytest.importorskip("mlflow", reason="the mlflow logger needs the mlflow extra: pip install 'rlgraph[mlflow]'")
    import shutil

    store = tmp_path / "store"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    writer = MetricsWriter(tmp_path, keep_up_to_step=None, loggers=("mlflow",))
    writer.write(STEPS[0])
    shutil.rmtree(store)  # the tracking store goes away mid-run, as a server that stops answering would
    for record in STEPS[1:]:
        writer.write(record)
    writer.close()
    assert "warning: logger mlflow failed (" in capsys.readouterr().err
    assert writer.loggers.loggers == {} and len(writer.records) == 3
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 3
