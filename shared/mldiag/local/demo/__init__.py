"""``mldiag demo``: a real JAX job captured in all four ways against ``mldiag up``, every capture analysed.

:mod:`~mldiag.local.demo.walkthrough` is the tour, :mod:`~mldiag.local.demo.workload` the
training job it steers, :mod:`~mldiag.local.demo.processes` the child processes.
Needs the ``demo`` extra (JAX on CPU and the official SDK).
"""
