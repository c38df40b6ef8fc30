"""Local hosts, never shipped in a function's bundle: ``mldiag up``, the bucket watcher, the XProf viewer, the devstack and the demo."""
