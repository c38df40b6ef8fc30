"""``mldiag demo``: a real JAX job captured in all four ways against ``mldiag up``, every capture analysed.

:mod:`~mldiag.demo.walkthrough` is the tour, :mod:`~mldiag.demo.workload` the
training job it steers, :mod:`~mldiag.demo.processes` the child processes.
Needs the ``demo`` extra (JAX on CPU and the official SDK).
"""
