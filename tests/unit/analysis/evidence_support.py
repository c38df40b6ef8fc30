"""Evidence made by hand for unit tests: traces built event by event (read exactly as a profile file's events
are), and the analyst run on hand-written host evidence and tool results."""

from __future__ import annotations

import numpy as np

from mldiag.analysis.evidence import ProfileInput, ToolResult, ToolStatus
from mldiag.analysis.host_evidence import DeviceKind, HostEvidence
from mldiag.analysis.loop.raw_events import _evidence, _Line, _Trace, _with_modules
from mldiag.analysis.rules.analyst import assess

MS = 1_000_000
Events = list[tuple[str, int, int]]


class TraceBuild:
    """A trace from named events: ``host`` lines, each device's compute ``lanes``, markers, steps lines."""

    def __init__(self, kind: DeviceKind = DeviceKind.CPU):
        self.trace = _Trace(device_kind=kind, device_type=kind.value.upper())
        self.ids: dict[str, int] = {}

    def _line(self, name: str, events: Events, modules: np.ndarray | None = None) -> _Line:
        ids = [self.ids.setdefault(event, len(self.ids)) for event, _, _ in events]
        self.trace.names = list(self.ids)
        return _Line(name, np.array([s for _, s, _ in events], dtype=np.int64),
                     np.array([e for _, _, e in events], dtype=np.int64), np.array(ids, dtype=np.int64), modules)

    def host(self, events: Events, *, markers: tuple[str, ...] = (), thread: str = "python") -> TraceBuild:
        self.trace.host_lines.append(self._line(thread, events))
        self.trace.markers |= {self.ids[m] for m in markers}
        return self

    def lane(self, device: str, events: Events, name: str = "Stream #1",
             programs: list[str | None] | None = None) -> TraceBuild:
        """A compute lane; ``programs``, where given, names the program each event runs as the XLA CPU client's
        lanes do (None: the event names none, as the thunk executor's run that encloses a program's ops)."""
        modules = None
        if programs is not None:
            for program in programs:
                if program is not None and program not in self.trace.modules:
                    self.trace.modules.append(program)
            modules = np.array([self.trace.modules.index(p) if p else -1 for p in programs], dtype=np.int64)
        line = self._line(f"{device}/{name}", events, modules)
        self.trace.lanes.setdefault(device, []).append(line if modules is None else _with_modules(line))
        return self

    def device_steps(self, device: str, events: Events) -> TraceBuild:
        self.trace.device_steps[device] = self._line("Steps", events)
        return self

    def program_runs(self, device: str, events: Events) -> TraceBuild:
        self.trace.program_runs[device] = self._line("XLA Modules", events)
        return self

    def evidence(self, tmp_path) -> HostEvidence:
        path = tmp_path / "host.xplane.pb"
        path.write_bytes(b"x")
        self.trace.names = list(self.ids)
        return _evidence(path, self.trace)


def analysis_of(host: HostEvidence):
    return assess(hosts=[host], tools=[], hlo_issues={}, versions={}, seconds=0.0,
                  profile=ProfileInput(source="s", session="s", files=[host.file], bytes=1))


def jit_calls(name: str, starts: list[int], length: int) -> Events:
    """JAX's dispatch: an outer PjitFunction event with its duplicate nested inside, per call."""
    return [event for start in starts for event in (
        (f"PjitFunction({name})", start, start + length), (f"PjitFunction({name})", start + 1, start + length - 1))]


def tool(name: str, data) -> ToolResult:
    return ToolResult(name=name, status=ToolStatus.OK, seconds=0.0, data=data)


def assessed(*hosts: HostEvidence, tools=(), hlo_issues=None, programs=None, kernels=None):
    return assess(hosts=list(hosts), tools=list(tools), hlo_issues=hlo_issues or {}, versions={}, seconds=0.0,
                  profile=ProfileInput(source="s", session="s", files=["h.xplane.pb"], bytes=1),
                  hlo_programs=programs, hlo_kernels=kernels)


def allocations(*modules: tuple[str, float]) -> ToolResult:
    return tool("get_peak_allocations", {
        "summary": {"top_modules": [{"module_name": n, "total_hbm_mib": mib} for n, mib in modules]},
        "modules": [{"module_name": n, "total_hbm_mib": mib, "top_buffers": [{"instruction": "dot.1", "size_mib": mib}]}
                    for n, mib in modules]})


# A kernel that looks rows up by a matmul with a one-hot matrix of 8192 classes (jax.nn.one_hot(ids) @ table).
ONE_HOT_LOOKUP = """HloModule jit_lookup

%fused_one_hot (p.1: s32[64]) -> pred[64,8192] {
  %p.1 = s32[64]{0} parameter(0)
  %b.2 = s32[64,8192]{1,0} broadcast(%p.1), dimensions={0}
  %iota.3 = s32[64,8192]{1,0} iota(), iota_dimension=1
  ROOT %eq.4 = pred[64,8192]{1,0} compare(%b.2, %iota.3), direction=EQ
}

%fused_lookup (p.5: s32[64], p.6: bf16[8192,128]) -> bf16[64,128] {
  %p.5 = s32[64]{0} parameter(0)
  %p.6 = bf16[8192,128]{1,0} parameter(1)
  %one_hot.7 = pred[64,8192]{1,0} fusion(%p.5), kind=kLoop, calls=%fused_one_hot
  %c.8 = bf16[64,8192]{1,0} convert(%one_hot.7)
  ROOT %dot.9 = bf16[64,128]{1,0} dot(%c.8, %p.6), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (ids.1: s32[64], table.2: bf16[8192,128]) -> bf16[64,128] {
  %ids.1 = s32[64]{0} parameter(0)
  %table.2 = bf16[8192,128]{1,0} parameter(1)
  ROOT %fusion = bf16[64,128]{1,0} fusion(%ids.1, %table.2), kind=kOutput, calls=%fused_lookup
}
"""
