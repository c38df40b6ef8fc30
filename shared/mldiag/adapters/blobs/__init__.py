"""Blob stores: Cloud Storage, and local folders as buckets with signed share links."""
