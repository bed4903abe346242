"""Keep credentials out of everything the harness stores.

Scenarios may need `HF_TOKEN` to reach a real checkpoint, so the child still receives it; but
its value is masked in captured output, tracebacks, messages and the environment record.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SECRET_NAME = re.compile(r"(^HF_TOKEN$|_TOKEN$|_KEY$|_SECRET$|^TOKEN$|PASSWORD)", re.IGNORECASE)
MASK = "***"
#: Values shorter than this are not masked: masking "1" would shred every number in a log.
MIN_SECRET_LENGTH = 4


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def secret_values(environ: Mapping[str, str]) -> list[str]:
    """Every secret value, longest first so a value containing another is masked whole."""
    values = {v for k, v in environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LENGTH}
    return sorted(values, key=len, reverse=True)


def mask(text: str, secrets: list[str]) -> str:
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    return text


def redact_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment as stored: secret names kept (useful to know it was set), values masked."""
    return {k: (MASK if is_secret_name(k) else v) for k, v in sorted(environ.items())}
