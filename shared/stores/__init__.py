"""The built-in task stores, one module or folder per backend."""
