"""``switches.read``: ``os.environ.get``'s value on the hot path, set, unset and changed between
calls, on POSIX through os.environ's own mapping and elsewhere through ``os.environ.get``."""

from __future__ import annotations

import pytest

from mixpert.runtime import switches

NAME = "MIXPERT_TEST_SWITCH"


@pytest.mark.parametrize("posix", [True, False])
def test_read_follows_the_environment_as_it_changes(monkeypatch, posix) -> None:
    monkeypatch.setattr(switches, "_POSIX", posix)
    monkeypatch.delenv(NAME, raising=False)
    assert switches.read(NAME, "default") == "default"
    monkeypatch.setenv(NAME, "always")
    assert switches.read(NAME, "default") == "always"
    monkeypatch.setenv(NAME, "0")
    assert switches.read(NAME, "default") == "0"
    monkeypatch.setenv(NAME, "")
    assert switches.read(NAME, "default") == ""
    monkeypatch.delenv(NAME)
    assert switches.read(NAME, "1") == "1"
