"""The API's resources: runs, profiler targets and sessions, operations, and the official SDK's self-hosted contract."""
