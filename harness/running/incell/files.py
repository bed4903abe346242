"""A JSON file written at once: a scenario's result, a server's lists, a parked server's card."""

from __future__ import annotations

import json
import os
from typing import Any


def write_json(path: str, data: Any) -> None:
    """Write `data` at `path` at once (a reader sees the old file or the new one); the temporary
    name is this process's, so that processes writing one file at once never share it."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as fh:
        json.dump(data, fh)
    os.replace(tmp, path)
