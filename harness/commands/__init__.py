"""One module per harness command (and answer, which every face reads through): I/O around the analysis."""
