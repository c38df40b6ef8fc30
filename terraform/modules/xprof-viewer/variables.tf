variable "project_id" {
  description = "Project that runs the viewer."
  type        = string
}

variable "region" {
  description = "Region of the Cloud Run service."
  type        = string
}

variable "prefix" {
  description = "Prefix of the service and service account names."
  type        = string
}

variable "image" {
  description = "Container image of `image/Dockerfile`: its entrypoint takes `xprof`'s flags and starts on a log directory that is still empty."
  type        = string
}

variable "bucket" {
  description = "The profiles bucket the viewer reads (it is granted roles/storage.objectViewer on it)."
  type        = string
}

variable "logdir" {
  description = "Profile root the viewer lists, `gs://BUCKET/PREFIX`."
  type        = string
  validation {
    condition     = startswith(var.logdir, "gs://")
    error_message = "logdir must be a gs:// URL."
  }
}

variable "ingress" {
  description = "INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  type        = string
  default     = "INGRESS_TRAFFIC_ALL"
  validation {
    condition     = contains(["INGRESS_TRAFFIC_ALL", "INGRESS_TRAFFIC_INTERNAL_ONLY", "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"], var.ingress)
    error_message = "ingress must be INGRESS_TRAFFIC_ALL, INGRESS_TRAFFIC_INTERNAL_ONLY or INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER."
  }
}

variable "invoker_members" {
  description = "Members who may open the viewer (roles/run.invoker on the service)."
  type        = list(string)
  default     = []
}

variable "cpu" {
  description = "vCPUs per instance."
  type        = string
  default     = "2"
}

variable "memory" {
  description = "Memory per instance; large profiles need several GiB."
  type        = string
  default     = "4Gi"
}

variable "concurrency" {
  description = "Concurrent requests per instance."
  type        = number
  default     = 20
}

variable "max_instances" {
  description = "Instance cap (the minimum is 0)."
  type        = number
  default     = 3
}

variable "labels" {
  description = "Labels on the service."
  type        = map(string)
  default     = {}
}
