variable "project_id" {
  description = "Project to deploy mldiag into."
  type        = string
}

variable "region" {
  description = "Region of the deployment, e.g. us-central1."
  type        = string
}

variable "kms_key_name" {
  description = "Cloud KMS key in the region that encrypts the profiles bucket."
  type        = string
}

variable "access_log_bucket" {
  description = "Bucket that receives the profiles bucket's usage logs."
  type        = string
}

variable "firestore_location" {
  description = "Firestore location, e.g. nam5 for a US multi-region."
  type        = string
  default     = "nam5"
}

variable "operators" {
  description = "Members who use the CLI and open the viewer, e.g. group:ml-platform@example.com."
  type        = list(string)
}

variable "workload_members" {
  description = "Service accounts the training and serving workloads run as."
  type        = list(string)
}

variable "vpc_connector" {
  description = "Serverless VPC Access connector into the workloads' network, projects/P/locations/R/connectors/C."
  type        = string
}

variable "xprof_image" {
  description = "XProf viewer image, built from modules/xprof-viewer/image."
  type        = string
}

variable "analysis_events_endpoint" {
  description = "HTTPS endpoint of a service of your own that receives every analysis-events CloudEvent (Pub/Sub push). Empty: no such subscription."
  type        = string
  default     = ""
}

variable "analysis_events_push_account" {
  description = "Service account whose OIDC token authenticates the push to analysis_events_endpoint."
  type        = string
  default     = ""
}

variable "sdk_secret" {
  description = "Empty (the default): workloads' SDK calls go through the node agent with an ID token. Set (e.g. `openssl rand -hex 32`): they may also call `sdk_base_url` without credentials, which grants allUsers the invoker role, refused under domain-restricted sharing (README.md)."
  type        = string
  default     = ""
  sensitive   = true
}
