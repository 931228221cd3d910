"""Session-wide: start the background jobs of the selected slow self-contained modules (tests/background_jobs.py)
and run their tests last, when the jobs have had the rest of the session to finish."""

from __future__ import annotations

import background_jobs as background
import pytest


@pytest.hookimpl(trylast=True)  # after -k/-m/--deselect: only the jobs of tests that will run
def pytest_collection_modifyitems(session, config, items):
    if config.option.collectonly:
        return
    modules = [name for name in dict.fromkeys(getattr(getattr(item, "module", None), "__name__", "") for item in items)
               if background.has_job(name)]
    if not modules:
        return
    order = {name: i for i, name in enumerate(modules)}

    def waits(item) -> int:
        return order.get(getattr(getattr(item, "module", None), "__name__", ""), -1)

    items.sort(key=waits)  # stable: every other test keeps its place, first
    background.start(modules)


def pytest_sessionfinish(session, exitstatus):
    background.stop()
