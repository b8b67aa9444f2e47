"""The dashboard's pages, one Streamlit script each; ``app.py`` registers them by file."""
