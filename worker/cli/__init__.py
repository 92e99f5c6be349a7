"""`toolnexus-serve`: the command that starts every role, and its `db` subcommands."""
