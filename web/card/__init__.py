"""The agent card: built from the settings and skills, and served in each wire version."""
