output "control_plane_url" {
  description = "The API: DIAGON_BASE_URL for the official SDK, MLDIAG_API_URL for the `mldiag` CLI (the audience of its callers' ID tokens)."
  value       = local.control_plane_url
  precondition {
    condition     = startswith(local.control_plane_url, "https://${module.function["control_plane"].name}-")
    error_message = "The control plane's deterministic URL no longer follows its service name."
  }
}

output "sdk_base_url" {
  description = "DIAGON_BASE_URL for workloads that call the API without an ID token: the capability URL (null without `sdk_secret`; see README: workloads under a domain-restricted org policy)."
  value       = var.sdk_secret == "" ? null : "${local.control_plane_url}/sdk/${var.sdk_secret}"
  sensitive   = true
}

output "profiles_gcs_path" {
  description = "Where workloads write profiles: the SDK's `gcs_path` (runs go under `<path>/<run>/plugins/profile/<session>/`)."
  value       = local.profiles_path
}

output "bucket" {
  description = "Profiles bucket name (MLDIAG_BUCKET)."
  value       = module.profiles.name
}

output "firestore_database" {
  description = "Firestore database id (MLDIAG_FIRESTORE_DATABASE)."
  value       = module.firestore.name
}

output "xprof_viewer_url" {
  description = "XProf viewer's Cloud Run URL (null when no viewer is deployed); browsers reach it as the dashboard links do, through xprof_viewer_proxy_command or xprof_viewer.browser_url."
  value       = try(module.xprof_viewer[0].url, null)
}

output "xprof_viewer_proxy_command" {
  description = "Run this where the browser is (you need roles/run.invoker on the viewer) and the dashboard links open: it serves the IAM-only viewer on the localhost port they name. Null without a viewer."
  value       = try("gcloud run services proxy ${module.xprof_viewer[0].name} --project ${var.project_id} --region ${var.region} --port ${local.xprof_viewer_proxy_port}", null)
}

output "topics" {
  description = "Work topics and their dead-letter topics."
  value       = { for topic, queue in module.queue : topic => queue.dead_letter_topic }
}

output "unrecorded_dead_letters_subscription" {
  description = "Pull subscription holding dead letters the recorder could not take."
  value       = google_pubsub_subscription.unrecorded_dead_letters.name
}

output "alert_notification_channel" {
  description = "Notification channel to add to alerting policies that should trigger captures."
  value       = google_monitoring_notification_channel.alerts.id
}

output "function_service_accounts" {
  description = "Each function's own service account."
  value       = { for name, function in module.function : name => function.service_account_email }
}

output "workload_environment" {
  description = "Environment for a workload using the official SDK against this deployment: the SDK calls the node agent on its own node (`mldiag agent --sdk-port 8790`, as the DaemonSet and the GCE script run it), which forwards with an ID token; with `sdk_secret`, `sdk_base_url` is the other DIAGON_BASE_URL."
  value = {
    DIAGON_BASE_URL = "http://127.0.0.1:8790"
    MLDIAG_API_URL  = local.control_plane_url
  }
}

output "agent_configmap" {
  description = "The node agent's deployment settings as the Kubernetes ConfigMap `mldiag/mldiag-agent` that scripts/deploy/mldiag-agent-daemonset.yaml reads: `terraform output -raw agent_configmap | kubectl apply -f -`."
  value = yamlencode({
    apiVersion = "v1"
    kind       = "ConfigMap"
    metadata   = { name = "mldiag-agent", namespace = "mldiag" }
    data       = local.agent_settings
  })
}

output "analysis_events" {
  description = "The notifications out (CloudEvents: analyses finished, monitored events opened and closed): the topic and its dead-letter topic, `projects/P/topics/T`, for subscriptions of your own."
  value = {
    topic             = module.queue["analysis-events"].topic_id
    dead_letter_topic = "projects/${var.project_id}/topics/${module.queue["analysis-events"].dead_letter_topic}"
  }
}

output "service_agents" {
  description = "Emails of the service agents this deployment provisions and grants to (pubsub, scheduler, monitoring, eventarc), known once each exists: name them in grants of your own."
  value       = local.service_agents
}

output "fleet_table" {
  description = "The fleet records' BigQuery table, `project.dataset.fleet_records` (null with `fleet.enabled = false`)."
  value       = try(google_pubsub_subscription.fleet_records[0].bigquery_config[0].table, null)
}
