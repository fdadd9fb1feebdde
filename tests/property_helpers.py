"""What the property tests of the readers share (``tests/test_reader_properties*.py``):
Hypothesis strategies of garbage JSON and text, and the check that a reader gives a
fedpath error or a valid result (their ``folder`` fixture is in
``tests/conftest.py``). Importing this module skips the importing test module when
Hypothesis (the dev extra) is missing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from fedpath import errors

#: what a reader may raise: fedpath's own errors, nothing else
FEDPATH_ERRORS = errors.FedpathError

#: each example rewrites files in one folder of the session: no function-scoped
#: fixture is shared across examples
REUSES_FOLDER = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

#: any JSON value, nested a little
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
#: text that is often almost right: JSON-ish and YAML-ish punctuation mixed in
TEXT = st.text(
    st.characters(codec="utf-8") | st.sampled_from(list('{}[]:,"\n\t -=#&*!|>')),
    max_size=200,
)


def outcome(read: Callable[[], Any]) -> Any:
    """``read()``'s result, or None when it raised a fedpath error (one line);
    any other exception fails the test."""
    try:
        return read()
    except FEDPATH_ERRORS as err:
        assert str(err), "a fedpath error with no message"
        return None


def _write(path: Path, data: str | bytes) -> Path:
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path
