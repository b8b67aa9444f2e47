"""Giving freed heap memory back: a call that never fails, wherever it runs."""

from __future__ import annotations

import pytest

from envcheck.core import memory


def test_give_back_answers_whether_it_returned_memory() -> None:
    garbage = [bytes(1_000) for _ in range(10_000)]  # some heap to free
    del garbage
    assert memory.give_back() in (True, False)


def test_without_malloc_trim_it_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_malloc_trim", lambda: None)
    assert memory.give_back() is False
