"""Workload monitoring: step-time metrics in (API and OTLP), alerts in, and automatic capture on a slowdown."""
