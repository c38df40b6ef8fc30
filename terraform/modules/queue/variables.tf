variable "project_id" {
  description = "Project that owns the topics and subscriptions."
  type        = string
}

variable "topic" {
  description = "Topic name, as the code publishes to it (see `mldiag.config`)."
  type        = string
  validation {
    condition     = can(regex("^[a-zA-Z][a-zA-Z0-9._~%+-]{2,254}$", var.topic)) && !startswith(lower(var.topic), "goog")
    error_message = "Topic names are 3-255 characters, start with a letter and do not start with 'goog'."
  }
}

variable "name_prefix" {
  description = "Put before the names of the topics and subscriptions (not before the topic in push URLs, which the code reads), where deployments share a project; the publishers add it too (MLDIAG_TOPIC_PREFIX)."
  type        = string
  default     = ""
  validation {
    condition     = can(regex("^([a-z][a-z0-9-]*-)?$", var.name_prefix))
    error_message = "name_prefix is empty or lowercase letters, digits and '-', ending in '-'."
  }
}

variable "dead_letter_suffix" {
  description = "Suffix of the dead-letter topic name (`mldiag.config.DEAD_LETTER_SUFFIX`)."
  type        = string
  default     = "-dead-letter"
}

variable "consumer" {
  description = "Function that consumes the topic: its name (the subscription is `<name>-<topic>`, as the devstack names it), its URL, the account whose OIDC token authenticates the push, and the ack deadline (the function's timeout, at most 600 s)."
  type = object({
    name                 = string
    url                  = string
    invoker_email        = string
    ack_deadline_seconds = number
  })
  validation {
    condition     = var.consumer.ack_deadline_seconds >= 10 && var.consumer.ack_deadline_seconds <= 600
    error_message = "consumer.ack_deadline_seconds must be between 10 and 600."
  }
}

variable "dead_letter_consumer" {
  description = "Function that records what lands on the dead-letter topic (same shape as `consumer`)."
  type = object({
    name                 = string
    url                  = string
    invoker_email        = string
    ack_deadline_seconds = number
  })
  validation {
    condition     = var.dead_letter_consumer.ack_deadline_seconds >= 10 && var.dead_letter_consumer.ack_deadline_seconds <= 600
    error_message = "dead_letter_consumer.ack_deadline_seconds must be between 10 and 600."
  }
}

variable "unrecorded_topic_id" {
  description = "Topic (`projects/P/topics/T`) that receives dead letters the recorder could not take."
  type        = string
}

variable "pubsub_service_agent" {
  description = "Email of the project's Pub/Sub service agent, which forwards messages to dead-letter topics."
  type        = string
}

variable "publishers" {
  description = "Members allowed to publish to the topic (granted on the topic only), `{key = member}` (keys known at plan time)."
  type        = map(string)
  default     = {}
}

variable "delivery" {
  description = "Redelivery and retention: attempts before dead-lettering (5-100), exponential backoff bounds, and how long topics and subscriptions keep messages."
  type = object({
    max_delivery_attempts = optional(number, 5)
    minimum_backoff       = optional(string, "10s")
    maximum_backoff       = optional(string, "600s")
    message_retention     = optional(string, "604800s")
  })
  default = {}
  validation {
    condition     = var.delivery.max_delivery_attempts >= 5 && var.delivery.max_delivery_attempts <= 100
    error_message = "Pub/Sub accepts max_delivery_attempts between 5 and 100."
  }
  validation {
    condition     = alltrue([for d in [var.delivery.minimum_backoff, var.delivery.maximum_backoff, var.delivery.message_retention] : can(regex("^[0-9]+s$", d))])
    error_message = "Backoffs and retention are durations in seconds, like \"10s\"."
  }
}

variable "labels" {
  description = "Labels on topics and subscriptions."
  type        = map(string)
  default     = {}
}
