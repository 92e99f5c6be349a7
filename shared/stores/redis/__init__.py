"""The Redis task store: the store, its Lua scripts, its listing indexes, its event listener,
its push state and the naming of its faults."""
