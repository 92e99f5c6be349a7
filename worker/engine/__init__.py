"""The fulfilment engine, free of Celery: loading and calling the agent, its
results, the claim and heartbeat, the I/O calls, the reaper, the
fulfilment's log line and metrics, and the in-process dispatcher."""
