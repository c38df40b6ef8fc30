# One work queue: a topic, its dead-letter topic, and push subscriptions that deliver them.
#
# Delivery uses push subscriptions we own rather than Eventarc Pub/Sub triggers: Eventarc
# creates and manages its own subscription, so it cannot carry a dead-letter policy, a
# backoff of our choosing or a retention that Terraform keeps in place. Here the
# subscription pushes to the function's URL with an OIDC token of a dedicated invoker
# account, retries with exponential backoff, and after `max_delivery_attempts` moves the
# message to `<topic>-dead-letter`. A second subscription pushes that topic to the
# dead-letter recorder; what even the recorder cannot take ends in the unrecorded topic.
#
# The push URL carries `/projects/P/topics/T` so functions-framework, which turns the
# push body into a CloudEvent, gives it the source `//pubsub.googleapis.com/projects/P/topics/T`;
# T is the name the code knows, without `name_prefix`, which only the resources carry.

locals {
  dead_letter_topic = "${var.topic}${var.dead_letter_suffix}"
  deliveries = {
    work = {
      topic       = google_pubsub_topic.work.id
      topic_name  = var.topic
      consumer    = var.consumer
      dead_letter = google_pubsub_topic.dead_letter.id
    }
    dead_letter = {
      topic       = google_pubsub_topic.dead_letter.id
      topic_name  = local.dead_letter_topic
      consumer    = var.dead_letter_consumer
      dead_letter = var.unrecorded_topic_id
    }
  }
  pubsub_agent = "serviceAccount:${var.pubsub_service_agent}"
}

resource "google_pubsub_topic" "work" {
  # checkov:skip=CKV_GCP_83:Queue messages are work items (ids and object paths), not profile data; Google-managed encryption applies. CMEK covers the profiles bucket.
  project                    = var.project_id
  name                       = "${var.name_prefix}${var.topic}"
  message_retention_duration = var.delivery.message_retention
  labels                     = var.labels
}

resource "google_pubsub_topic" "dead_letter" {
  # checkov:skip=CKV_GCP_83:Queue messages are work items (ids and object paths), not profile data; Google-managed encryption applies. CMEK covers the profiles bucket.
  project                    = var.project_id
  name                       = "${var.name_prefix}${local.dead_letter_topic}"
  message_retention_duration = var.delivery.message_retention
  labels                     = var.labels
}

resource "google_pubsub_subscription" "push" {
  for_each                   = local.deliveries
  project                    = var.project_id
  name                       = "${var.name_prefix}${each.value.consumer.name}-${each.value.topic_name}"
  topic                      = each.value.topic
  ack_deadline_seconds       = each.value.consumer.ack_deadline_seconds
  message_retention_duration = var.delivery.message_retention
  # Messages with an ordering key (a run's alert opening, then closing) arrive in order;
  # the rest are unaffected.
  enable_message_ordering = true
  labels                  = var.labels

  push_config {
    push_endpoint = "${each.value.consumer.url}/projects/${var.project_id}/topics/${each.value.topic_name}"
    oidc_token {
      service_account_email = each.value.consumer.invoker_email
      audience              = each.value.consumer.url
    }
  }

  retry_policy {
    minimum_backoff = var.delivery.minimum_backoff
    maximum_backoff = var.delivery.maximum_backoff
  }

  dead_letter_policy {
    dead_letter_topic     = each.value.dead_letter
    max_delivery_attempts = var.delivery.max_delivery_attempts
  }

  # Never delete the subscription for inactivity (the default is after 31 quiet days).
  expiration_policy {
    ttl = ""
  }
}

resource "google_pubsub_topic_iam_member" "publishers" {
  for_each = var.publishers
  project  = var.project_id
  topic    = google_pubsub_topic.work.name
  role     = "roles/pubsub.publisher"
  member   = each.value
}

# Dead-lettering is done by the Pub/Sub service agent: it must publish to the dead-letter
# topic and acknowledge on the source subscription.
resource "google_pubsub_topic_iam_member" "dead_letter_forwarding" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "dead_letter_forwarding" {
  for_each     = google_pubsub_subscription.push
  project      = var.project_id
  subscription = each.value.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}
