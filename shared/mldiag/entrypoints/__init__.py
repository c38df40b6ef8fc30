"""Thin entry points: the event handlers behind every function, the HTTP API, the console and the analysis worker."""
