variable "project_id" {
  description = "Project that builds and runs the functions."
  type        = string
}

variable "project_number" {
  description = "Number of the project (it names the bucket Cloud Functions copies sources into)."
  type        = string
}

variable "region" {
  description = "Region of the sources bucket and the image repository (the functions' region)."
  type        = string
}

variable "prefix" {
  description = "Prefix of resource names."
  type        = string
}

variable "sources_bucket_name" {
  description = "Globally unique name of the bucket that holds the function source archives."
  type        = string
}

variable "source_retention_days" {
  description = "Days images are kept beyond the images_kept most recent per function. Source archives are not aged out: each is deleted when the next replaces it."
  type        = number
  default     = 30
  validation {
    condition     = var.source_retention_days >= 1
    error_message = "source_retention_days must be at least 1."
  }
}

variable "images_kept" {
  description = "Most recent image versions always kept per function, whatever their age."
  type        = number
  default     = 5
  validation {
    condition     = var.images_kept >= 1
    error_message = "images_kept must be at least 1."
  }
}

variable "labels" {
  description = "Labels on the bucket and the repository."
  type        = map(string)
  default     = {}
}
