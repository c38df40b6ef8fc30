output "name" {
  description = "Bucket name."
  value       = google_storage_bucket.this.name
}

output "url" {
  description = "`gs://` URL of the bucket."
  value       = google_storage_bucket.this.url
}

output "location" {
  description = "Bucket location, upper case as Cloud Storage reports it."
  value       = google_storage_bucket.this.location
}

output "iam_ready" {
  description = "The bucket name, available once every grant in `iam` exists (use it to order dependants after the grants)."
  value       = google_storage_bucket.this.name
  depends_on  = [google_storage_bucket_iam_member.this]
}

output "event_source" {
  description = "The bucket name, available once Eventarc may deliver its events (with eventarc_source)."
  value       = google_storage_bucket.this.name
  depends_on  = [google_project_iam_member.storage_agent_publisher]
}
