output "name" {
  description = "Deployed function (and Cloud Run service) name."
  value       = google_cloudfunctions2_function.this.name
}

output "url" {
  description = "HTTPS URL of the function."
  value       = google_cloudfunctions2_function.this.service_config[0].uri
}

output "service_account_email" {
  description = "The function's own service account."
  value       = google_service_account.function.email
}

output "service_account_member" {
  description = "The function's account as an IAM member, `serviceAccount:EMAIL`."
  value       = google_service_account.function.member
}

output "push_invoker_email" {
  description = "Account whose OIDC token push subscriptions present (null without pubsub_push)."
  value       = var.pubsub_push ? google_service_account.push[0].email : null
}

output "timeout_seconds" {
  description = "Request timeout, which push subscriptions use as their ack deadline."
  value       = var.resources.timeout_seconds
}

output "source_object" {
  description = "Object holding the deployed source archive (its name carries the archive's MD5)."
  value       = google_storage_bucket_object.source.name
}
