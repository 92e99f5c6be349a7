"""What a process tells an operator and how it starts: logs, metrics, traces,
request ids, the garbage-collector policy and the start-up checks."""
