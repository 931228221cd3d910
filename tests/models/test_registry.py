import subprocess
import sys

import pytest

from rlgraph.models import ModelNotFoundError, builtin_model_folder, resolve_model_path
from rlgraph.models.build_arith_gpt import MODEL_VERSION


def test_a_local_folder_is_returned_absolute(tmp_path, monkeypatch):
    (tmp_path / "my-model").mkdir()
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path("my-model") == str(tmp_path / "my-model")


@pytest.mark.parametrize(
    "name, message",
    [
        ("Qwen/Qwen2.5-0.5B", "never downloads"),
        ("builtin:nope", "no built-in model builtin:nope; the built-in models are: builtin:arith-gpt"),
    ],
)
def test_unknown_models(name, message):
    with pytest.raises(ModelNotFoundError, match=message.replace(".", r"\.")):
        resolve_model_path(name)


def test_a_file_is_not_a_model(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelNotFoundError, match="it is a file"):
        resolve_model_path(str(tmp_path / "model.safetensors"))


def test_builtin_lives_in_the_cache_and_is_built_once(arith_gpt_dir):
    assert arith_gpt_dir == builtin_model_folder("arith-gpt")
    assert arith_gpt_dir.name == f"arith-gpt-v{MODEL_VERSION}" and arith_gpt_dir.parent.name == "models"
    stamp = (arith_gpt_dir / "rlgraph_build.json").stat().st_mtime_ns
    assert resolve_model_path("builtin:arith-gpt") == str(arith_gpt_dir)
    assert (arith_gpt_dir / "rlgraph_build.json").stat().st_mtime_ns == stamp
    leftovers = [p.name for p in arith_gpt_dir.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []  # no half-built temporary folders


def test_importing_the_packages_loads_neither_torch_nor_transformers():
    code = (
        "import sys, rlgraph.models, rlgraph.data, rlgraph.tasks.arith;"
        "rlgraph.models.ModelNotFoundError; rlgraph.data.DataError; rlgraph.data.resolve_data_path;"
        "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_builds_atomically_and_once(tmp_path, monkeypatch):
    from rlgraph.models import registry

    calls = []

    def build(out):
        calls.append(out)
        out.mkdir()
        (out / "config.json").write_text("{}")
        if len(calls) == 1:
            raise RuntimeError("interrupted")  # a failed build leaves nothing behind
        (out / "rlgraph_build.json").write_text("{}")

    monkeypatch.setenv("RLGRAPH_CACHE", str(tmp_path))
    monkeypatch.setitem(registry.BUILTIN_MODELS, "fake", registry.BuiltinModel("fake-v1", build, "a test double"))
    with pytest.raises(RuntimeError, match="interrupted"):
        resolve_model_path("builtin:fake")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".fake-v1.lock"]

    assert resolve_model_path("builtin:fake") == str(tmp_path / "models" / "fake-v1")
    assert resolve_model_path("builtin:fake") == str(tmp_path / "models" / "fake-v1")
    assert len(calls) == 2 and calls[1].parent == tmp_path / "models" and calls[1].name.startswith(".fake-v1.tmp-")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == [".fake-v1.lock", "fake-v1"]
