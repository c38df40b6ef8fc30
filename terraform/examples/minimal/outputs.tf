output "control_plane_url" {
  description = "DIAGON_BASE_URL for workloads, MLDIAG_API_URL for the CLI."
  value       = module.mldiag.control_plane_url
}

output "profiles_gcs_path" {
  description = "The SDK's gcs_path: where workloads write profiles."
  value       = module.mldiag.profiles_gcs_path
}

output "agent_configmap" {
  description = "The GKE node agent's ConfigMap: terraform output -raw agent_configmap | kubectl apply -f - (scripts/deploy/README.md)."
  value       = module.mldiag.agent_configmap
}
