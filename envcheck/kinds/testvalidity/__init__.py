"""The ``tests`` probe: negative and positive controls, reruns, JUnit reports."""
