"""Hand-made attributions of a loop's time, shaped as the schema says, for the tests of what consumes them.

:func:`input_bound_attribution` is the shape of the committed ``input_bound`` loop (ten steps of a small jit
MLP behind a 40 ms data loader): mostly host work on the training thread, a little device compute.
"""

from __future__ import annotations

from mldiag.analysis import Analysis
from mldiag.analysis.host_evidence import Attribution, TimeCause, TimePart

LOOP_MS = 483.8
INPUT_BOUND_PARTS = (  # cause, name, thread, share of the loop, useful
    (TimeCause.HOST_WORK, "data_loading", "python3", 0.8215, False),
    (TimeCause.DEVICE_COMPUTE, "dot", "", 0.1182, True),
    (TimeCause.DISPATCH, "PjitFunction(train_step)", "python3", 0.0311, False),
    (TimeCause.DEVICE_COMPUTE, "convert", "", 0.0137, False),
    (TimeCause.COMPILATION, "jit_train_step", "python3", 0.0094, False),
    (TimeCause.UNTRACED, "", "", 0.0061, False),
)


def attribution(parts=INPUT_BOUND_PARTS, loop_ms: float = LOOP_MS, steps: int = 10) -> Attribution:
    return Attribution(loop_ms=loop_ms, steps=steps, parts=[
        TimePart(cause=cause, name=name, thread=thread, ms=round(share * loop_ms, 3), share=share, useful=useful)
        for cause, name, thread, share, useful in parts])


def input_bound_attribution() -> Attribution:
    return attribution()


def with_attribution(analysis: Analysis, made: Attribution | None) -> Analysis:
    """A copy of ``analysis`` whose first host carries ``made`` (``None``: a host whose loop was not attributed)."""
    copied = analysis.model_copy(deep=True)
    copied.hosts[0].attribution = made
    return copied
