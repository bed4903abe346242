"""Answers as text: the terminal's (the summary, a sweep's progress) and the published page's HTML.
Between `commands/` and `workflows/` (docs/architecture.md): a command asks a workflow for an
answer and hands it here to be printed."""
