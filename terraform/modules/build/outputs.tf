# The outputs wait for the grants, so a function built with them never races its permissions.

output "sources_bucket" {
  description = "Bucket for the source archives."
  value       = module.sources.iam_ready
}

output "service_account_id" {
  description = "Build service account, `projects/P/serviceAccounts/EMAIL` (what build_config.service_account takes)."
  value       = google_service_account.build.id
  depends_on = [
    google_artifact_registry_repository_iam_member.build_writer,
    google_project_iam_member.build_logs,
    google_project_iam_member.build_function_sources,
    module.sources,
  ]
}

output "docker_repository" {
  description = "Artifact Registry repository for the images, `projects/P/locations/L/repositories/R`."
  value       = google_artifact_registry_repository.images.id
  depends_on  = [google_artifact_registry_repository_iam_member.build_writer]
}
