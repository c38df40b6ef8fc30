"""The node agent (``mldiag agent``): captures the profiler servers of its own node and forwards the SDK's calls."""
