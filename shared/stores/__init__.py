"""The task stores, one module or folder per backend; the contract is `shared.store.contract`."""
