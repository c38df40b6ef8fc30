output "name" {
  description = "The viewer's Cloud Run service name."
  value       = google_cloud_run_v2_service.viewer.name
}

output "url" {
  description = "HTTPS URL of the viewer."
  value       = google_cloud_run_v2_service.viewer.uri
}

output "service_account_member" {
  description = "The viewer's account as an IAM member (it may read the profiles bucket)."
  value       = google_service_account.viewer.member
}
