output "url" {
  description = "HTTPS URL of the viewer."
  value       = google_cloud_run_v2_service.viewer.uri
}

output "service_account_member" {
  description = "The viewer's account as an IAM member; grant it read access to the profiles."
  value       = google_service_account.viewer.member
}
