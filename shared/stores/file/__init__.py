"""The file store: one `<id>.json` per task in a directory, its event log and
push records beside it."""
