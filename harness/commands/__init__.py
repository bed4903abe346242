"""One module per harness command: its parser, one workflow called (`workflows/`), the answer
printed (`render/`); `flags` holds what several share."""
