"""What a command and the dashboard share: answering, explaining, the text of a change. Between
`commands/` (flags in, text out) and `running/`, `storage/`, `inputs/` (docs/architecture: layers)."""
