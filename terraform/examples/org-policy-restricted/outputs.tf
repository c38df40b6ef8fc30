output "control_plane_url" {
  description = "The API: the node agent's upstream, MLDIAG_API_URL for the CLI (the audience of every ID token)."
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
