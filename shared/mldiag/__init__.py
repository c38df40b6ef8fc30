"""mldiag: a self-hostable control plane for managed XProf profiling of ML workloads."""

__version__ = "0.1.0"
