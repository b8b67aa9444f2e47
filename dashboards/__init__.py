"""envcheck's Streamlit dashboard, shipped in the wheel as ``envcheck.dashboards``.

The folder stays at the top of the repository (next to ``probes/`` and ``images/``); setuptools
maps it to ``envcheck.dashboards`` (``package-dir`` in pyproject.toml), for a wheel and for the
editable install alike, so the pages import their shared helpers by package name and
``envcheck dashboard`` finds ``app.py`` wherever envcheck is installed.
"""
