"""XProf's tools run in-process on one session, their OpStats merged across slices, and the HLO they return.

The memory budget the conversions reserve from lives here too, since they are what costs memory.
"""
