"""Analysis runners: where an analysis job runs, in a child process of its own (tests run jobs on a thread of their
own process: tests/in_process_analysis_runner.py)."""
