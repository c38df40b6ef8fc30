"""The deterministic analyst's rules: metrics, a health snapshot and prioritised findings from the evidence.

Each rule names a cause, what it costs and the fix that fits the framework seen; the hardware model (peaks per
chip, rooflines, MFU) and the dtype and precision checks are rules like the others.
"""
