"""Capture: asking a workload's XProf profiler server for a trace, a snapshot, or continuous profiling.

:mod:`~mldiag.adapters.profiler.xprof_server` speaks to one profiler server and names what
went wrong; :mod:`~mldiag.services.capture.targets` decides which addresses may be
contacted at all; :mod:`~mldiag.services.capture.tasks` is the unit of work (one target
of one capture request) and how its outcome lands in the session, the run and
the operation; :mod:`~mldiag.services.capture.execute` runs a task against a server.
The ``dispatch_capture`` function (:mod:`~mldiag.services.capture.dispatch`) executes
tasks for targets it can reach, the node agent (:mod:`~mldiag.agent.daemon`)
for those it cannot.
"""
