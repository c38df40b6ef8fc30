# The Firestore queries mldiag makes that need a composite index, and the TTL policy.
#
# - Resource lists (mldiag.services.repository.Repository.list): `_parent == P` ordered by
#   `createTime`, ascending (internal walks) and descending (the API's default order), in
#   each resource collection.
# - A run by its display name (the CLI's `--machine-learning-run NAME`): `_parent == P` and
#   `displayName == N`, newest first; Firestore merges the parent index with this one.
# - The console's runs by phase (`?phase=`): `_parent == P` and `runPhase == X`, newest first.
# - A session's comparison baseline (mldiag.analysis.comparison.find_baseline): `_parent`,
#   `analysis.state` and `autoCaptured` equal to values, newest first.
# - The event archive (mldiag.services.event_archive.EventArchive.list, `mldiag events list|replay`):
#   `function`, `type` and/or `outcome` equal to a value, over a `firstReceived` range,
#   newest first. Firestore merges these indexes to serve two or three equalities at once.
# Every other query the code makes filters or orders on a single field, which Firestore's
# automatic single-field indexes serve. tests/unit/terraform walks every query the code
# builds and checks each is served by these indexes. An API list with a user's `filter` or `orderBy` on
# other fields needs its own index: Firestore refuses it with FAILED_PRECONDITION and a
# link that creates it. The emulator enforces no indexes, so only a real project shows this.

locals {
  resource_collections = ["machineLearningRuns", "profilerTargets", "profilerSessions", "monitoredEvents", "operations"]
  event_archive        = "events"

  firestore_indexes = merge(
    merge([
      for collection in local.resource_collections : {
        for order in ["ASCENDING", "DESCENDING"] : "${collection}-by-parent-${lower(order)}" => {
          collection = collection
          fields = [
            { field_path = "_parent", order = "ASCENDING" },
            { field_path = "createTime", order = order },
          ]
        }
      }
    ]...),
    {
      "machineLearningRuns-by-display-name" = {
        collection = "machineLearningRuns"
        fields = [
          { field_path = "displayName", order = "ASCENDING" },
          { field_path = "createTime", order = "DESCENDING" },
        ]
      }
      "machineLearningRuns-by-parent-and-display-name" = { # a run named by its display name (find_named)
        collection = "machineLearningRuns"
        fields = [
          { field_path = "_parent", order = "ASCENDING" },
          { field_path = "displayName", order = "ASCENDING" },
          { field_path = "createTime", order = "ASCENDING" },
        ]
      }
      "machineLearningRuns-by-phase" = {
        collection = "machineLearningRuns"
        fields = [
          { field_path = "_parent", order = "ASCENDING" },
          { field_path = "runPhase", order = "ASCENDING" },
          { field_path = "createTime", order = "DESCENDING" },
        ]
      }
      "profilerSessions-baselines" = {
        collection = "profilerSessions"
        fields = [
          { field_path = "_parent", order = "ASCENDING" },
          { field_path = "analysis.state", order = "ASCENDING" },
          { field_path = "autoCaptured", order = "ASCENDING" },
          { field_path = "createTime", order = "DESCENDING" },
        ]
      }
    },
    {
      for field in ["function", "type", "outcome"] : "${local.event_archive}-by-${field}" => {
        collection = local.event_archive
        fields = [
          { field_path = field, order = "ASCENDING" },
          { field_path = "firstReceived", order = "DESCENDING" },
        ]
      }
    },
  )

  # Archived events carry `expireAt`, a Timestamp (last received + var.event_retention_days); Firestore
  # deletes them within about a day after it passes. Only the embedded store queries
  # `expireAt` (it prunes by hand), so the field is left out of indexing.
  firestore_ttl_fields = {
    events = { collection = local.event_archive, field = "expireAt" }
  }
}
