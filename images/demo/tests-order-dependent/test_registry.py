import pytest

from calc import median

# Module state shared by the tests: the kind of leak that makes outcomes depend on order.
_SEEN: list[str] = []


def test_registry_starts_empty() -> None:
    assert _SEEN == [], f"state leaked from earlier tests: {_SEEN}"


class TestRegistry:
    @pytest.mark.parametrize("name", ["a", "b", "c::d"])
    def test_register(self, name: str) -> None:
        _SEEN.append(name)
        assert median([1, 2, 3]) == 2
