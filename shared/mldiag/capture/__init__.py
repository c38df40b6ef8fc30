"""Capture: asking a workload's XProf profiler server for a trace, a snapshot, or continuous profiling.

:mod:`~mldiag.capture.profiler` speaks to one profiler server and names what
went wrong; :mod:`~mldiag.capture.targets` decides which addresses may be
contacted at all; :mod:`~mldiag.capture.tasks` is the unit of work (one target
of one capture request) and how its outcome lands in the session, the run and
the operation; :mod:`~mldiag.capture.execute` runs a task against a server.
The ``dispatch_capture`` function (:mod:`~mldiag.capture.dispatch`) executes
tasks for targets it can reach, the node agent (:mod:`~mldiag.capture.agent`)
for those it cannot.
"""
