"""The store contract and what every store shares: the spec, turning a spec
into a store, the wiring, the two-method adapter, following a task's events,
wake-ups, listings and the per-process notice listener.

Importing it loads no backend: each lives in `shared.stores`, loaded when a
spec names it."""
