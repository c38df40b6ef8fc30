"""Analysis runners: where an analysis job runs, in a child process of its own or, for tests, in this one."""
