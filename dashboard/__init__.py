"""The Streamlit dashboard: a thin layer over the query functions in `harness.storage.store` (see docs/dashboard.md)."""
