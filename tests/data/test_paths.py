import pytest

from rlgraph.data import DataError, load_rows, resolve_data_path
from rlgraph.tasks import arith


def test_builtin_is_written_once_into_the_cache(tmp_cache):
    path = resolve_data_path("builtin:arith/val")
    assert path == str(tmp_cache / "data" / "arith-v1" / "val.parquet")
    assert load_rows(path) == arith.make_rows("val")
    mtime = (tmp_cache / "data" / "arith-v1" / "val.parquet").stat().st_mtime_ns
    assert resolve_data_path("builtin:arith/val") == path
    assert (tmp_cache / "data" / "arith-v1" / "val.parquet").stat().st_mtime_ns == mtime
    # Atomic write: only the finished file (and the lock) are left behind.
    assert sorted(p.name for p in (tmp_cache / "data" / "arith-v1").iterdir()) == [".val.parquet.lock", "val.parquet"]


def test_builtin_train_and_val_are_disjoint(tmp_cache):
    train = load_rows(resolve_data_path("builtin:arith/train"))
    val = load_rows(resolve_data_path("builtin:arith/val"))
    assert len(train) == 9500 and len(val) == 500
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in val}


@pytest.mark.parametrize(
    "name, message",
    [
        ("builtin:nope/train", "no built-in task 'nope'"),
        ("builtin:arith/test", "no split 'test'"),
        ("data/train.csv", "unsupported data file type '.csv'"),
        ("missing/train.parquet", "no such file"),
    ],
)
def test_bad_names(tmp_cache, name, message):
    with pytest.raises(DataError, match=message) as info:
        resolve_data_path(name)
    assert name in str(info.value) and info.value.file == name


def test_local_file_resolves_to_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "rows.jsonl").write_text('{"prompt": "1+1=", "reward_model": {"ground_truth": "2"}}\n')
    monkeypatch.chdir(tmp_path)
    assert resolve_data_path("rows.jsonl") == str(tmp_path / "rows.jsonl")
