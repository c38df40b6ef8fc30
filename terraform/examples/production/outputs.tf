output "control_plane_url" {
  description = "The API: the node agent's upstream, MLDIAG_API_URL for the CLI (the audience of every ID token)."
  value       = module.mldiag.control_plane_url
}

output "profiles_gcs_path" {
  description = "The SDK's gcs_path: where workloads write profiles."
  value       = module.mldiag.profiles_gcs_path
}

output "xprof_viewer_url" {
  description = "The XProf viewer's Cloud Run URL; browsers open it through xprof_viewer_proxy_command."
  value       = module.mldiag.xprof_viewer_url
}

output "alert_notification_channel" {
  description = "Add this channel to alerting policies that should trigger captures."
  value       = module.mldiag.alert_notification_channel
}

output "workload_environment" {
  description = "A workload's environment for the official SDK: DIAGON_BASE_URL is the node agent on its node."
  value       = module.mldiag.workload_environment
}

output "sdk_base_url" {
  description = "DIAGON_BASE_URL without the node agent: the capability URL (null unless sdk_secret is set)."
  value       = module.mldiag.sdk_base_url
  sensitive   = true
}

output "agent_configmap" {
  description = "The GKE node agent's ConfigMap: terraform output -raw agent_configmap | kubectl apply -f - (scripts/deploy/README.md)."
  value       = module.mldiag.agent_configmap
}

output "xprof_viewer_proxy_command" {
  description = "Run it where the browser is: the dashboard links open through it (the viewer admits only ID tokens)."
  value       = module.mldiag.xprof_viewer_proxy_command
}
