"""One module per harness command, its parser beside its work, and what several share (answer, flags, progress)."""
