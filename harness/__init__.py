"""Version-matrix compatibility harness for the Hugging Face fine-tuning stack."""

from __future__ import annotations

__version__ = "0.1.0"
