variable "project_id" {
  description = "Project that owns the bucket."
  type        = string
}

variable "name" {
  description = "Globally unique bucket name."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9][a-z0-9_.-]{1,61}[a-z0-9]$", var.name)) && !startswith(var.name, "goog")
    error_message = "Bucket names are 3-63 lowercase letters, digits, '-', '_' or '.', start and end alphanumeric, and do not start with 'goog'."
  }
}

variable "location" {
  description = "Bucket location: a region (recommended: the functions' region), a dual-region or a multi-region."
  type        = string
}

variable "storage_class" {
  description = "Default storage class of new objects."
  type        = string
  default     = "STANDARD"
  validation {
    condition     = contains(["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"], var.storage_class)
    error_message = "storage_class must be STANDARD, NEARLINE, COLDLINE or ARCHIVE."
  }
}

variable "force_destroy" {
  description = "Let `terraform destroy` delete the bucket with its objects."
  type        = bool
  default     = false
}

variable "versioning" {
  description = "Keep noncurrent object versions (pair with a lifecycle rule that deletes them)."
  type        = bool
  default     = false
}

variable "soft_delete_retention_days" {
  description = "Days deleted objects stay restorable (0 turns soft delete off; otherwise 7 to 90)."
  type        = number
  default     = 7
  validation {
    condition     = var.soft_delete_retention_days == 0 || (var.soft_delete_retention_days >= 7 && var.soft_delete_retention_days <= 90)
    error_message = "soft_delete_retention_days must be 0 or between 7 and 90."
  }
}

variable "kms_key_name" {
  description = "Cloud KMS key for default encryption (CMEK), `projects/P/locations/L/keyRings/R/cryptoKeys/K`; null for Google-managed keys. The Cloud Storage service agent is granted the key."
  type        = string
  default     = null
  validation {
    condition     = var.kms_key_name == null || can(regex("^projects/[^/]+/locations/[^/]+/keyRings/[^/]+/cryptoKeys/[^/]+$", var.kms_key_name))
    error_message = "kms_key_name must look like projects/P/locations/L/keyRings/R/cryptoKeys/K."
  }
}

variable "access_log_bucket" {
  description = "Bucket that receives usage logs of this one; null for none."
  type        = string
  default     = null
}

variable "lifecycle_rules" {
  description = "Object lifecycle rules, in the order given."
  type = list(object({
    action = object({
      type          = string
      storage_class = optional(string)
    })
    condition = object({
      age                        = optional(number)
      matches_prefix             = optional(list(string))
      matches_storage_class      = optional(list(string))
      with_state                 = optional(string)
      num_newer_versions         = optional(number)
      days_since_noncurrent_time = optional(number)
    })
  }))
  default = []
  validation {
    condition     = alltrue([for rule in var.lifecycle_rules : contains(["Delete", "SetStorageClass", "AbortIncompleteMultipartUpload"], rule.action.type)])
    error_message = "Each lifecycle rule action type must be Delete, SetStorageClass or AbortIncompleteMultipartUpload."
  }
}

variable "eventarc_source" {
  description = "Let Eventarc triggers deliver this bucket's object events (grants the Cloud Storage service agent roles/pubsub.publisher on the project)."
  type        = bool
  default     = false
}

variable "iam" {
  description = "Bucket-level grants, `{key = {role, member, condition}}`, the condition an optional IAM condition `{title, expression}`. Keys are labels known at plan time (members may be computed, such as a new service account)."
  type = map(object({
    role      = string
    member    = string
    condition = optional(object({ title = string, expression = string }))
  }))
  default = {}
  validation {
    condition     = alltrue([for grant in values(var.iam) : !contains(["roles/owner", "roles/editor", "roles/viewer"], grant.role)])
    error_message = "Primitive roles (owner, editor, viewer) are not allowed."
  }
}

variable "labels" {
  description = "Labels on the bucket."
  type        = map(string)
  default     = {}
}
