"""What the Streamlit dashboard reads: plain functions over the store."""
