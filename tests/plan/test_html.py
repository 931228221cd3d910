"""`--format html`: one self-contained page; rendered by headless Chromium, it shows every role and device."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess

import pytest

from rlgraph.plan.html import render_html

from .helpers import FIXTURES, REPO

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


def _plan(path):
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan

    return build_plan(compile_spec(str(path)))


def _expected(plan):
    roles = [r.name for r in plan.roles]
    devices = [f"{p.name}/{node}/{device}" for p in plan.pools for node in range(p.nodes)
               for device in range(p.devices_per_node)]
    return roles, devices


@pytest.mark.parametrize("path", [FIXTURES / "rm_2x8.rl", REPO / "specs" / "ppo_arith.rl"], ids=lambda p: p.name)
def test_page_is_self_contained_and_lists_everything(path):
    plan = _plan(path)
    page = render_html(plan)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page
    for forbidden in ("<script", "<link", "<iframe", "<img", "@import"):
        assert forbidden not in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?https?:""", page) and "url(http" not in page
    roles, devices = _expected(plan)
    for device in devices:
        assert f'data-device="{device}"' in page
    for role in roles:
        assert f'data-role="{role}"' in page
    for call in plan.calls:
        assert f'data-call="{call.id}"' in page


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", *args],
        capture_output=True, text=True, timeout=180)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_screenshot_in_headless_chromium(tmp_path):
    plan = _plan(FIXTURES / "rm_2x8.rl")
    page = tmp_path / "plan.html"
    page.write_text(render_html(plan), encoding="utf-8")
    png = tmp_path / "plan.png"
    done = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,1000", page.as_uri())
    assert png.exists(), done.stderr[-2000:]
    data = png.read_bytes()
    assert _png_size(data) == (1400, 1000)
    assert len(data) > 30_000, "the screenshot is (nearly) blank"

    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    roles, devices = _expected(plan)
    assert "Step dataflow" in dom and "<svg" in dom
    for device in devices:
        assert f'data-device="{device}"' in dom, device
    for role in roles:
        assert f'data-role="{role}"' in dom and f">{role} <" in dom, role
