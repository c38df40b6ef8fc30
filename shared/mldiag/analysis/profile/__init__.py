"""Reading a profile: the ``XSpace`` wire format, a session's files, time slices and the trace names that matter.

Nothing here judges a profile; it reads what the profiler wrote, event by event, without an object per event.
"""
