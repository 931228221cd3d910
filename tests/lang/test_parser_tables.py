"""rlgraph/lang/parser.py keeps lark's parser tables in the cache folder: a spec parses the same from built and
from loaded tables, comments included; a damaged file is built again; no cache folder, no file, same parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlgraph.lang import parser
from rlgraph.lang.formatter import without_spans
from rlgraph.lang.parser import parse_text

ROOT = Path(__file__).resolve().parents[2]
SPEC = (ROOT / "specs" / "ppo_arith.rl").read_text()
COMMENTED = "# a comment the formatter keeps\n" + SPEC + "\n# and one at the end\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh cache folder, and the tables built again in this process before and after the test."""
    monkeypatch.setenv("RLGRAPH_CACHE", str(tmp_path / "cache"))
    parser._lark.cache_clear()
    yield tmp_path / "cache"
    parser._lark.cache_clear()


def parsed(text: str):
    spec, diagnostics = parse_text(text, "t.rl")
    assert not diagnostics, diagnostics
    return without_spans(spec), [c.text for c in spec.comments]


def tables(cache: Path) -> list[Path]:
    return sorted((cache / "grammar").glob("*.lark"))


def test_a_spec_parses_the_same_from_built_and_from_loaded_tables(cache):
    built = parsed(COMMENTED)
    files = tables(cache)
    assert len(files) == 1 and files[0].stat().st_size > 0  # written by the first build
    written = files[0].read_bytes()
    parser._lark.cache_clear()  # the next parse loads the tables from the file
    assert parsed(COMMENTED) == built
    assert files[0].read_bytes() == written  # loaded, not built and written again
    # the comments came through lark's callback both times
    assert built[1][0] == "# a comment the formatter keeps" and built[1][-1] == "# and one at the end"


def test_a_damaged_tables_file_is_built_again(cache):
    built = parsed(SPEC)
    (file,) = tables(cache)
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])  # cut short, as by a killed writer
    parser._lark.cache_clear()
    assert parsed(SPEC) == built
    parser._lark.cache_clear()
    assert parsed(SPEC) == built  # and the file it wrote again loads
    assert file.stat().st_size > 0


def test_without_a_cache_folder_the_tables_are_built_each_time(tmp_path, monkeypatch, cache):
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    monkeypatch.setenv("RLGRAPH_CACHE", str(not_a_folder))  # the cache folder cannot be made under a file
    parser._lark.cache_clear()
    assert parsed(SPEC)[0] == parsed(SPEC)[0]
    assert not_a_folder.read_text() == ""
