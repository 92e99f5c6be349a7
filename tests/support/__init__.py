"""Helpers shared by the test modules: private Redis servers, free ports, polling."""
