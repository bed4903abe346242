"""The Streamlit dashboard: a thin layer over the reads of `harness/storage/` (see docs/dashboard.md)."""
