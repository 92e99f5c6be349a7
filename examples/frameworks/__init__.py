"""Example agents written with a framework, served as they are."""
