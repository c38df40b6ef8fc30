"""Adapters: one module per outside system a port is implemented for."""
