"""Every test in tests/models carries the ``models`` marker: ``-m "not models"`` deselects
the zoo."""

import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/models/" in item.nodeid.replace("\\", "/") or item.nodeid.startswith("models/"):
            item.add_marker(pytest.mark.models)
