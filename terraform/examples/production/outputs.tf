output "control_plane_url" {
  description = "DIAGON_BASE_URL for workloads, MLDIAG_API_URL for the CLI."
  value       = module.mldiag.control_plane_url
}

output "profiles_gcs_path" {
  description = "The SDK's gcs_path: where workloads write profiles."
  value       = module.mldiag.profiles_gcs_path
}

output "xprof_viewer_url" {
  description = "The XProf viewer."
  value       = module.mldiag.xprof_viewer_url
}

output "alert_notification_channel" {
  description = "Add this channel to alerting policies that should trigger captures."
  value       = module.mldiag.alert_notification_channel
}
