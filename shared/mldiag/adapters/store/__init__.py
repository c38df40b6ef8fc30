"""Document stores: Cloud Firestore, and SQLite for the embedded default."""
