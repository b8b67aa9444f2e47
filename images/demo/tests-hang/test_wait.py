import time


def test_waits_for_a_server() -> None:
    """Polls for a server that never comes up, with no timeout of its own."""
    while True:
        time.sleep(1)
