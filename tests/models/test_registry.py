import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlgraph.models import CorruptModelError, ModelNotFoundError, builtin_model_folder, resolve_model_path
from rlgraph.models.registry import BUILTIN_MODELS

REPO = Path(__file__).resolve().parents[2]


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


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_shipped_files_match_their_pinned_hashes(name):
    folder = builtin_model_folder(name)
    assert folder.parent == REPO / "rlgraph" / "models" / "weights"
    shipped = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    assert shipped == dict(BUILTIN_MODELS[name].sha256)  # every file pinned, none missing
    assert resolve_model_path(f"builtin:{name}") == str(folder)


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_the_docs_state_the_pinned_weights(name):
    weights = BUILTIN_MODELS[name].sha256["model.safetensors"]
    assert weights in (REPO / "README.md").read_text()
    assert weights in (REPO / "docs" / "results.md").read_text()


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.write_bytes(f.read_bytes()[:-1] + b"x"), "has sha256 [0-9a-f]{64}, not the pinned bb0b9324"),
    (lambda f: f.unlink(), "is missing"),
])
def test_a_damaged_builtin_fails_with_a_clear_message(tmp_path, monkeypatch, damage, message):
    from rlgraph.models import registry

    copy = tmp_path / "rlgraph" / "models" / "weights"
    shutil.copytree(registry.WEIGHTS_DIR / "arith-gpt", copy / "arith-gpt")
    damage(copy / "arith-gpt" / "model.safetensors")
    monkeypatch.setattr(registry, "WEIGHTS_DIR", copy)
    with pytest.raises(CorruptModelError, match="builtin:arith-gpt is damaged: .*model.safetensors " + message) as err:
        resolve_model_path("builtin:arith-gpt")
    assert "git checkout -- rlgraph/models/weights/arith-gpt/model.safetensors" in str(err.value)


def test_importing_the_packages_loads_neither_torch_nor_transformers():
    code = (
        "import sys, rlgraph.models, rlgraph.data, rlgraph.tasks.arith;"
        "rlgraph.models.ModelNotFoundError; rlgraph.data.DataError; rlgraph.data.resolve_data_path;"
        "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
