import socket

from calc import mean

# A documentation host (RFC 2606); the sandbox has no network, so nothing is ever sent.
RATES_HOST = ("api.example.com", 443)


def test_mean_of_live_rates() -> None:
    """Fetches live data in a unit test: works on a laptop, fails in an offline sandbox."""
    with socket.create_connection(RATES_HOST, timeout=2):
        pass
    assert mean([1.0, 3.0]) == 2.0
