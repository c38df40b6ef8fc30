output "topic" {
  description = "Work topic name."
  value       = google_pubsub_topic.work.name
}

output "topic_id" {
  description = "Work topic id, `projects/P/topics/T`."
  value       = google_pubsub_topic.work.id
}

output "dead_letter_topic" {
  description = "Dead-letter topic name."
  value       = google_pubsub_topic.dead_letter.name
}

output "dead_letter_topic_id" {
  description = "Dead-letter topic id, `projects/P/topics/T`, for other subscriptions of the work topic to dead-letter to."
  value       = google_pubsub_topic.dead_letter.id
}

output "subscriptions" {
  description = "Push subscription names: `work` (to the consumer) and `dead_letter` (to the recorder)."
  value       = { for kind, subscription in google_pubsub_subscription.push : kind => subscription.name }
}
