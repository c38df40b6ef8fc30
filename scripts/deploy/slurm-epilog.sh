#!/usr/bin/env bash
# Slurm epilog (slurm.conf: Epilog=/etc/slurm/mldiag-epilog.sh): stops the node
# agent slurm-prolog.sh started for this job and removes its scratch folder.
set -euo pipefail

[[ -n "${SLURM_JOB_ID:-}" ]] || exit 0
pid_file="/run/mldiag-agent/${SLURM_JOB_ID}.pid"
if [[ -r "${pid_file}" ]]; then
  pid="$(cat "${pid_file}")"
  kill -TERM "${pid}" 2>/dev/null || true   # the agent stops after its current poll
  for _ in $(seq 1 20); do
    kill -0 "${pid}" 2>/dev/null || break
    sleep 0.5
  done
  kill -KILL "${pid}" 2>/dev/null || true
  rm -f "${pid_file}"
fi
rm -rf "/var/tmp/mldiag-agent/${SLURM_JOB_ID}"
exit 0
