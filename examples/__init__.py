"""Example agents and skills, used by the default configuration and the tests."""
