"""What ``envcheck dashboard`` serves: the dashboard's script (``app.py`` here, or the one
``$ENVCHECK_DASHBOARD_SCRIPT`` names) as Streamlit's ASGI app, every page of it carrying
envcheck's recovery script (:mod:`envcheck.dashboard.page_recovery`: a page whose parts failed
to load, as a browser on the engine's host sees while containers come and go, reloads them).

    streamlit run dashboards/serve.py

``streamlit run`` finds ``app`` below and serves it as it serves a plain script.
"""

from __future__ import annotations

import os
from pathlib import Path

from starlette.middleware import Middleware
from streamlit.starlette import App

from envcheck.dashboard.page_recovery import PageRecovery

SCRIPT_ENV = "ENVCHECK_DASHBOARD_SCRIPT"

app = App(os.environ.get(SCRIPT_ENV) or Path(__file__).resolve().parent / "app.py",
          middleware=[Middleware(PageRecovery)])
