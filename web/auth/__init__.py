"""Who is calling: bearer tokens and JWTs, mapped to the principal that owns tasks."""
