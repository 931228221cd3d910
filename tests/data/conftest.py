import pytest


@pytest.fixture(scope="session")
def char_tokenizer():
    from rlgraph.models.char_tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLGRAPH_CACHE", str(cache))
    return cache
