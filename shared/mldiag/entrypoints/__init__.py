"""Thin entry points: the event handlers behind every function, the HTTP API and the console."""
