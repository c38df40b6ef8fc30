variable "project_id" {
  description = "Project that owns the database."
  type        = string
}

variable "name" {
  description = "Database id. A named database keeps mldiag apart from a project's `(default)` database."
  type        = string
  validation {
    condition     = var.name == "(default)" || can(regex("^[a-z][a-z0-9-]{2,61}[a-z0-9]$", var.name))
    error_message = "Database ids are 4-63 lowercase letters, digits or '-', start with a letter, or \"(default)\"."
  }
}

variable "location_id" {
  description = "Firestore location: a region (e.g. us-central1) or a multi-region (nam5, eur3)."
  type        = string
}

variable "point_in_time_recovery" {
  description = "Keep 7 days of point-in-time recovery versions."
  type        = bool
  default     = false
}

variable "deletion_protection" {
  description = "Refuse to delete the database (and abandon it on `terraform destroy`)."
  type        = bool
  default     = true
}

variable "kms_key_name" {
  description = "Cloud KMS key for the database (CMEK; the Firestore service agent must hold it); null for Google-managed keys."
  type        = string
  default     = null
}

variable "composite_indexes" {
  description = "Composite indexes, `{key = {collection, fields = [{field_path, order}]}}`, order ASCENDING or DESCENDING."
  type = map(object({
    collection = string
    fields = list(object({
      field_path = string
      order      = string
    }))
  }))
  default = {}
  validation {
    condition     = alltrue([for index in values(var.composite_indexes) : length(index.fields) >= 2])
    error_message = "A composite index has at least two fields."
  }
  validation {
    condition     = alltrue(flatten([for index in values(var.composite_indexes) : [for f in index.fields : contains(["ASCENDING", "DESCENDING"], f.order)]]))
    error_message = "Field order must be ASCENDING or DESCENDING."
  }
}

variable "ttl_fields" {
  description = "Timestamp fields whose time expires their documents, `{key = {collection, field}}`."
  type = map(object({
    collection = string
    field      = string
  }))
  default = {}
}

variable "users" {
  description = "Members granted roles/datastore.user on this database only, `{key = member}` (keys known at plan time)."
  type        = map(string)
  default     = {}
}
