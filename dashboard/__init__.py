"""The Streamlit dashboard: a thin layer over the query functions in `harness.store` (see docs/dashboard.md)."""
