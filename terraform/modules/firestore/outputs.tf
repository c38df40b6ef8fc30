output "name" {
  description = "Database id (what `MLDIAG_FIRESTORE_DATABASE` takes)."
  value       = google_firestore_database.this.name
}

output "id" {
  description = "Database resource name, `projects/P/databases/D`."
  value       = google_firestore_database.this.id
}

output "indexes" {
  description = "Composite index resource names by key."
  value       = { for key, index in google_firestore_index.this : key => index.name }
}
