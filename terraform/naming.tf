# The names that keep several deployments in one project apart. Functions, accounts,
# buckets and the scheduler job carry var.prefix themselves. The Pub/Sub topics and
# subscriptions, whose bare names the code uses (mldiag.config), carry `<prefix>-` unless
# the prefix is the default, so a default deployment keeps the names the devstack and the
# docs use; the code adds the same prefix when it publishes (MLDIAG_TOPIC_PREFIX), and push
# URLs keep the bare names, which is what the functions read the topic from.

locals {
  name_prefix        = var.prefix == "mldiag" ? "" : "${var.prefix}-"
  firestore_database = coalesce(var.firestore.name, var.prefix)
}
