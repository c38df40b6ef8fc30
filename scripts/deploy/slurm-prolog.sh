#!/usr/bin/env bash
# Slurm prolog (slurm.conf: Prolog=/etc/slurm/mldiag-prolog.sh, PrologFlags=Alloc):
# starts the mldiag node agent for the job on every node it is allocated, in the
# background, so that the job's processes are captured on request. Its twin,
# slurm-epilog.sh, stops it when the job ends.
#
# A job opts in through its comment, the one job field a prolog can read:
#   sbatch --comment=mldiag-run=<run id> ...
# Jobs without it are left alone. Site settings come from /etc/mldiag/agent.env
# (MLDIAG_API_URL, MLDIAG_API_TOKEN or MLDIAG_AUTH_AUDIENCE, MLDIAG_BACKEND,
# MLDIAG_PROJECT, MLDIAG_LOCATION; optional MLDIAG_PROFILER_PORTS, default 9999,
# and MLDIAG_AGENT_BIN). The job's processes call jax.profiler.start_server(port).
set -euo pipefail

[[ -n "${SLURM_JOB_ID:-}" ]] || exit 0
comment="${SLURM_JOB_COMMENT:-$(scontrol show job -o "${SLURM_JOB_ID}" 2>/dev/null | grep -o 'Comment=[^ ]*' || true)}"
run="$(sed -n 's/.*mldiag-run=\([A-Za-z0-9._-]*\).*/\1/p' <<<"${comment}")"
[[ -n "${run}" ]] || exit 0   # the job did not ask for profiling

if [[ -r /etc/mldiag/agent.env ]]; then
  set -a
  # shellcheck source=/dev/null
  source /etc/mldiag/agent.env
  set +a
fi

# This node's index in the job: its position in the allocation's node list (the order of SLURM_NODEID).
node="${SLURMD_NODENAME:-$(hostname -s)}"
node_index="$(scontrol show hostnames "${SLURM_JOB_NODELIST:-${node}}" | grep -nx "${node}" | cut -d: -f1 || true)"
node_index="$(( ${node_index:-1} - 1 ))"

agent_bin="${MLDIAG_AGENT_BIN:-/opt/mldiag/bin/mldiag}"
state_dir=/run/mldiag-agent
scratch_dir="/var/tmp/mldiag-agent/${SLURM_JOB_ID}"
mkdir -p "${state_dir}" "${scratch_dir}"
chmod 1777 "${scratch_dir}"   # the job's processes (the job's user) write their profiles here

port_args=()
for port in ${MLDIAG_PROFILER_PORTS:-9999}; do
  port_args+=(--port "${port}")
done
if [[ -n "${MLDIAG_SDK_PORT:-}" ]]; then   # one job per node: the SDK's local door, DIAGON_BASE_URL=http://127.0.0.1:PORT
  port_args+=(--sdk-port "${MLDIAG_SDK_PORT}")
fi

setsid "${agent_bin}" agent \
  --machine-learning-run "${run}" \
  --node-index "${node_index}" \
  --hostname "${node}" \
  --name "${node}-job${SLURM_JOB_ID}" \
  --scratch-dir "${scratch_dir}" \
  "${port_args[@]}" \
  </dev/null >>"/var/log/mldiag-agent-${SLURM_JOB_ID}.log" 2>&1 &
echo $! >"${state_dir}/${SLURM_JOB_ID}.pid"
exit 0   # a failing prolog drains the node: profiling must never do that
