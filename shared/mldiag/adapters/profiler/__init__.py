"""The XProf profiler server, as a capture client sees it."""
