"""envcheck's dashboard: fleet health, one environment, the quarantine list, data sources.

    envcheck dashboard [--port 8501] [--database URL] [--api-url URL]

or ``streamlit run dashboards/serve.py`` (what ``envcheck dashboard`` runs: this app with the
page-recovery script in every page; ``streamlit run dashboards/app.py`` serves it without;
installed, both are in ``envcheck/dashboards/`` in site-packages) with
``ENVCHECK_DATABASE_URL`` (default: the local SQLite store) and, to quarantine and release
from the Quarantine page, ``ENVCHECK_API_URL`` plus ``ENVCHECK_API_TOKEN`` /
``ENVCHECK_API_TOKEN_FILE`` (or a token typed in the session).
Reads go through :mod:`envcheck.dashboard.cached` (cached, paginated); there is no SQL here.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from envcheck.dashboard import cached as data
from envcheck.dashboards import envcheck_ui as ui
from envcheck.store.database import redact

HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="envcheck", page_icon=None,
                   layout="wide")

pages = [
    st.Page(HERE / "views" / "fleet.py", title="Fleet",
            url_path="fleet", default=True),
    st.Page(HERE / "views" / "environment.py", title="Environment",
            url_path=ui.ENV_PAGE),
    st.Page(HERE / "views" / "quarantine.py", title="Quarantine",
            url_path="quarantine"),
    st.Page(HERE / "views" / "data_sources.py", title="Data sources",
            url_path="data-sources"),
]
page = st.navigation(pages)

with st.sidebar:
    st.caption(f"Store: `{redact(data.database_url())}`")
    if st.button("Refresh", icon=":material/refresh:", help="read the store again"):
        st.cache_data.clear()

page.run()
