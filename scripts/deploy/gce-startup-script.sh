#!/usr/bin/env bash
# Compute Engine startup script: installs the mldiag node agent and runs it as a
# systemd service that captures this VM's training processes on request.
#
#   gcloud compute instances create VM ... \
#     --metadata-from-file=startup-script=scripts/deploy/gce-startup-script.sh \
#     --metadata=mldiag-run=RUN,mldiag-api-url=URL,mldiag-package=PIP_SPEC,mldiag-location=LOCATION,mldiag-node-index=0,mldiag-profiler-ports=9999
#
# The VM's service account needs roles/run.invoker on the control plane and
# roles/storage.objectCreator on the profiles bucket. mldiag-package is what pip
# installs (a wheel, or git+https://... of this repository); mldiag-location is
# the control plane's location (default: the VM's region); the profiler ports
# are space-separated (default 9999).
set -euo pipefail

metadata() {
  curl -fsS -H "Metadata-Flavor: Google" \
    "http://metadata.google.internal/computeMetadata/v1/$1" 2>/dev/null || true
}

run="$(metadata instance/attributes/mldiag-run)"
api_url="$(metadata instance/attributes/mldiag-api-url)"
package="$(metadata instance/attributes/mldiag-package)"
if [[ -z "${run}" || -z "${api_url}" || -z "${package}" ]]; then
  echo "mldiag: set the mldiag-run, mldiag-api-url and mldiag-package metadata attributes to enable the agent" >&2
  exit 0
fi
node_index="$(metadata instance/attributes/mldiag-node-index)"
ports="$(metadata instance/attributes/mldiag-profiler-ports)"
location="$(metadata instance/attributes/mldiag-location)"
project="$(metadata project/project-id)"
zone="$(metadata instance/zone)"
region="${zone##*/}"
region="${region%-*}"

install_dir=/opt/mldiag
if [[ ! -x "${install_dir}/bin/mldiag" ]]; then
  python3 -m venv "${install_dir}"
  "${install_dir}/bin/pip" install --quiet "${package}"
fi

scratch_dir=/var/tmp/mldiag-agent
mkdir -p "${scratch_dir}" /etc/mldiag
chmod 1777 "${scratch_dir}"

port_args=""
for port in ${ports:-9999}; do
  port_args+=" --port ${port}"
done

cat >/etc/mldiag/agent.env <<ENV
MLDIAG_BACKEND=gcp
MLDIAG_PROJECT=${project}
MLDIAG_LOCATION=${location:-${region}}
MLDIAG_API_URL=${api_url}
MLDIAG_AUTH_AUDIENCE=${api_url}
ENV

cat >/etc/systemd/system/mldiag-agent.service <<UNIT
[Unit]
Description=mldiag node agent (XProf capture on request)
After=network-online.target
Wants=network-online.target

[Service]
EnvironmentFile=/etc/mldiag/agent.env
ExecStart=${install_dir}/bin/mldiag agent --machine-learning-run ${run} --node-index ${node_index:-0} --scratch-dir ${scratch_dir} --sdk-port 8790${port_args}
Restart=always
RestartSec=5
DynamicUser=yes
ReadWritePaths=${scratch_dir}

[Install]
WantedBy=multi-user.target
UNIT

systemctl daemon-reload
systemctl enable --now mldiag-agent.service
