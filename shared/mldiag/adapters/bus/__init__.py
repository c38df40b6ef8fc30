"""Message buses: Pub/Sub, and the embedded in-process bus with Pub/Sub's delivery contract."""
