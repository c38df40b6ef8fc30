"""A lookup's gradient applied to the whole table: an embedding table rewritten every step for a batch's rows.

The gradient of a gather (``jnp.take``, an embedding layer) is a scatter-add of
the looked-up rows' gradients into zeros as large as the table. An optimizer that
takes it as a dense array then zeroes, scatters into, reads and writes arrays of
the table's size every step (its moments too), though only the looked-up rows
changed: the cost grows with the table, not the batch. Measured on a TPU v5e, SGD
on a 262,144 x 512 bf16 table with 4,096 rows looked up a step took 0.52 less of
the loop with only those rows updated in place; on a CPU, 0.83.

The kernels counted are the scatters into a constant-initialised array that their
updates fill less than ``SPARSE``, and every other kernel of the same programs
that reads or writes an array of that size, the lookups (gathers) aside; what an
update of the looked-up rows alone saves is their time, less the share of it the
rows themselves take (the scatters' updates per element).
"""

from __future__ import annotations

import math

from mldiag.analysis.evidence import DenseTableUpdates
from mldiag.analysis.host_evidence import HostEvidence, OpTime
from mldiag.analysis.rules.kernel_groups import costliest
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

SPARSE = 1 / 8  # a scatter's updates per element of its array under which most of the gradient stays zero
# Share of the loop an update of the looked-up rows alone would save at which the dense one is a P0 / P1 / P2.
PRIORITIES = ((0.5, Priority.P0), (0.25, Priority.P1), (0.05, Priority.P2))
MAX_KERNELS_QUOTED = 3


def _table_sized(host: HostEvidence,
                 works: list[KernelWork]) -> tuple[tuple[int, ...], float, list[tuple[OpTime, KernelWork]]]:
    """The shape of the largest table whose lookup's gradient the host's programs scatter into zeros, the
    scatters' updates per element, and the timed kernels that scatter into, read or write arrays of that size;
    ((), 0, []) where none does."""
    timed = matched_kernels(host, works)
    launched = {work.module for _, work in timed}
    scatters = [work for work in works if work.module in launched and work.scatters_into_constant
                and 0 < work.updates_per_element < SPARSE]
    if not scatters:
        return (), 0.0, []
    table = max((work.scatters_into_constant for work in scatters), key=math.prod)
    programs = {work.module for work in scatters if work.scatters_into_constant == table}
    fill = max(work.updates_per_element for work in scatters if work.scatters_into_constant == table)
    kernels = [(op, work) for op, work in timed if work.module in programs and (
        work.scatters_into_constant == table
        or (work.largest_elements == math.prod(table) and "gather" not in work.ops))]
    return table, fill, kernels


def dense_table_updates(hosts: list[HostEvidence],
                        works: list[KernelWork]) -> tuple[DenseTableUpdates, Finding] | None:
    """A lookup's gradient made as large as its table and applied whole, on the host where updating only the
    looked-up rows would save the most: the time it takes and its finding."""
    def find(host: HostEvidence) -> tuple[list[tuple[OpTime, KernelWork]], float, tuple[tuple[int, ...], float]]:
        table, fill, kernels = _table_sized(host, works)
        return kernels, sum(op.share_of_busy for op, _ in kernels) * (1 - fill) * host.loop_busy(), (table, fill)

    costly = costliest(hosts, find, PRIORITIES)
    if costly is None:
        return None
    group, priority = costly
    host, saved, kernels, (table, fill) = group.host, group.share_of_loop, group.kernels, group.detail
    rows = f"{table[0]:,} rows" + (f" of {math.prod(table[1:]):,}" if len(table) > 1 else "")
    per = host.per()
    share, ms = group.share_of_device, group.ms_per_step
    dense = DenseTableUpdates(host=host.host, table_shape=list(table), updates_per_element=fill, ms_per_step=ms,
                              share_of_device=share, saved_share_of_loop=saved, kernels=group.names)
    return dense, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"A lookup's gradient applied to a whole table of {rows}: {share:.0%} of device time for the "
              f"{fill:.1%} of it the step looked up",
        what=("The gradient of a gather (an embedding lookup, jnp.take) is scattered into zeros as large as the "
              f"table ({rows}), and the update then reads and writes the whole table every step, "
              f"though the step's rows are {fill:.1%} of it: the cost grows with the table, not the batch."),
        evidence=[f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
                  f"{describe([work])}, kernel {quoted(op.name)}" for op, work in kernels[:MAX_KERNELS_QUOTED]]
        + [f"{len(kernels)} kernels zero, scatter into, read or write arrays of the table's size ({rows}): "
           f"{ms:.2f} ms per {per}, {share:.1%} of device op time; the scatter's updates fill {fill:.1%} of it"],
        impact=f"Updating only the looked-up rows would take about {saved:.0%} off the loop.",
        fix=("Update only the rows the step looked up: take the gradient with respect to the gathered rows "
             "(jax.value_and_grad of the loss over table[ids], not over the table) and apply it in place with "
             "table.at[ids].add(-lr * row_grads) on a donated table (donate_argnums); with Adam, keep the moments "
             "of those rows only (a lazy or sparse Adam) or accept the dense moments' cost knowingly. In PyTorch, "
             "nn.Embedding(sparse=True) with torch.optim.SparseAdam; in TensorFlow, keep the tf.IndexedSlices "
             "gradient (no tf.convert_to_tensor of it) so the optimizer updates rows."),
    )
