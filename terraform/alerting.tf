# Cloud Monitoring alerts reach on_alert through a Pub/Sub notification channel on the
# monitoring-alerts topic: add this channel to any alerting policy (for instance a duty
# cycle drop) and each incident becomes a capture of the affected run.

resource "google_monitoring_notification_channel" "alerts" {
  project      = var.project_id
  display_name = "mldiag: capture on alert"
  description  = "Incidents sent here make mldiag capture a profile of the affected run."
  type         = "pubsub"
  labels = {
    topic = module.queue["monitoring-alerts"].topic_id
  }
  user_labels = local.labels
}

# The notification service agent (service_agents.tf) publishes the incidents; the grant is on
# this topic only.
resource "google_pubsub_topic_iam_member" "monitoring_alerts_publisher" {
  project = var.project_id
  topic   = module.queue["monitoring-alerts"].topic
  role    = "roles/pubsub.publisher"
  member  = "serviceAccount:${local.service_agents.monitoring}"
}
