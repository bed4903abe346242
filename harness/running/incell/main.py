"""The verbs the harness starts a cell's process with, each handed to its protocol:

    python incell/__main__.py run SCENARIO RESULT_JSON   one scenario, this process (`scenario`)
    python incell/__main__.py serve [MODULE ...] [--preload-file JSON]
                                                         import MODULEs once, then fork per request (`server`)
    python incell/__main__.py zygote CONFIG_JSON         import torch once, then fork a `serve` per cell (`zygote`)
    python incell/__main__.py suite REQUEST_JSON         a pytest suite, this process (`suite`)
    python incell/__main__.py describe                   this interpreter's sys.path, prefix, executable (`zygote`)

Every one first takes the harness's lifeline (`lifeline`) and, where the harness asks for it,
shares the modules' bytecode with the other envs (`bytecode`).
"""

from __future__ import annotations

import json
import os
import sys

from . import lifeline
from .bytecode import BYTECODE_ENV, share_bytecode
from .scenario import limit_output, run_scenario
from .server import parse_entries, serve
from .zygote import describe, zygote


def main(argv: list[str]) -> int:
    lifeline.take()
    if os.environ.get(BYTECODE_ENV):
        share_bytecode(os.environ[BYTECODE_ENV])
    if len(argv) >= 3 and argv[0] == "run":
        lifeline.watch_in_thread()
        limit_output()
        return run_scenario(argv[1], argv[2])
    if len(argv) == 2 and argv[0] == "suite":
        lifeline.watch_in_thread()
        limit_output()
        from . import suite  # pytest's worker: loaded only where a suite runs

        with open(argv[1]) as fh:
            return suite.run_request(json.load(fh))
    if argv and argv[0] == "serve":
        return serve(parse_entries(argv[1:]))
    if len(argv) == 2 and argv[0] == "zygote":
        return zygote(argv[1])
    if argv and argv[0] == "describe":
        return describe()
    print(__doc__, file=sys.stderr)
    return 2
