"""The training loop, measured from the raw trace events of one host.

Steps and their warm-up, slow-step groups, the host functions' own time, a Python loop that reads each launch
back, and the attribution of every instant of the steady loop to one named cause: one pass over the events gives
a host's :class:`HostEvidence`.
"""
