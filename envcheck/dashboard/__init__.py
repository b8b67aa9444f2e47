"""What the Streamlit dashboard reads: analytics as plain functions over the store, one module
per page (``fleet``, ``environment``, ``quarantine``, ``data_sources``), importable without
Streamlit; ``cached`` holds the thin ``st.cache_data`` wrappers the pages call."""
