"""Settings read from the environment, in one place.

``MLDIAG_BACKEND=embedded`` (the default) keeps everything under
``MLDIAG_DATA_DIR``; ``MLDIAG_BACKEND=gcp`` uses Firestore, Cloud Storage and
Pub/Sub, or their emulators when the standard ``FIRESTORE_EMULATOR_HOST``,
``PUBSUB_EMULATOR_HOST`` and ``STORAGE_EMULATOR_HOST`` variables are set.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from mldiag.domain.errors import InvalidArgument, invalid_argument
from mldiag.domain.topics import (
    ANALYSIS_EVENTS,
    ANALYSIS_REQUESTS,
    CAPTURE_REQUESTS,
    HOST_ANALYSIS_REQUESTS,
    MAINTENANCE_TICKS,
    MONITORING_ALERTS,
)
from mldiag.domain.sizes import parse_size

# The bucket's object notifications as Cloud Storage publishes them (the devstack's storage emulator, mldiag up's
# bucket watcher).
BUCKET_NOTIFICATIONS = "bucket-notifications"
DEAD_LETTER_SUFFIX = "-dead-letter"
SDK_CAPABILITY_CONTEXT = b"mldiag sdk capability v1"
TOPICS = (ANALYSIS_REQUESTS, HOST_ANALYSIS_REQUESTS, CAPTURE_REQUESTS, MONITORING_ALERTS, MAINTENANCE_TICKS,
          ANALYSIS_EVENTS)
# Where a dead letter goes when even the dead-letter recorder keeps failing on it.
UNRECORDED_DEAD_LETTERS = "unrecorded-dead-letters"


def dead_letter_topic(topic: str) -> str:
    return topic + DEAD_LETTER_SUFFIX


# Routing, as data: which function each trigger feeds (the handlers are in mldiag.entrypoints.handlers).

# Functions Terraform wires to the profiles bucket with an Eventarc finalize trigger.
BUCKET_TRIGGERED = ("register_session",)

# Which function each topic pushes to; Terraform and the devstack create exactly these subscriptions.
TOPIC_SUBSCRIBERS: dict[str, str] = {
    ANALYSIS_REQUESTS: "analyze_session",
    HOST_ANALYSIS_REQUESTS: "analyze_host",
    MAINTENANCE_TICKS: "maintenance",
    CAPTURE_REQUESTS: "dispatch_capture",
    MONITORING_ALERTS: "on_alert",
    ANALYSIS_EVENTS: "deliver_notifications",
    **{dead_letter_topic(topic): "record_dead_letter" for topic in TOPICS},
}

# What mldiag up subscribes besides: work that the cloud does without a function (a BigQuery subscription).
EMBEDDED_SUBSCRIBERS: dict[str, str] = {ANALYSIS_EVENTS: "record_fleet"}

# Every function, by the name its handler, its folder under functions/ and its archived events carry.
FUNCTIONS = (*BUCKET_TRIGGERED, *dict.fromkeys(TOPIC_SUBSCRIBERS.values()))


def sdk_capability(api_token: str, sdk_secret: str = "") -> str:
    """The secret of the SDK's capability URL: ``sdk_secret``, else derived from ``api_token`` ("" without)."""
    if sdk_secret or not api_token:
        return sdk_secret
    return hmac.new(api_token.encode(), SDK_CAPABILITY_CONTEXT, hashlib.sha256).hexdigest()


class Settings(BaseModel):
    """Every knob of a deployment. Build with :meth:`from_env`."""

    backend: Literal["embedded", "gcp"] = "embedded"
    data_dir: Path = Field(default_factory=lambda: Path.home() / ".mldiag")
    project: str = "local-project"
    location: str = "local"
    bucket: str = "mldiag-profiles"
    firestore_database: str = "(default)"
    fleet_dataset: str = Field(default="mldiag_fleet", pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,1023}$")  # BigQuery
    api_url: str = "http://127.0.0.1:8080"
    api_token: str = ""
    # The official SDK's self-hosted client sends no credentials: with a token or an audience set,
    # it reaches the ``/v1`` routes through ``/sdk/<secret>`` (derived from the token when empty).
    sdk_secret: str = Field(default="", pattern=r"^([A-Za-z0-9_-]{32,})?$")
    # What Alertmanager, Grafana and Cloud Monitoring send to the alert webhooks (bearer token or basic auth
    # password). Kept out of repr, which tracebacks and test reports print.
    alert_token: str = Field(default="", repr=False)
    # Put before every Pub/Sub topic name the code publishes to, where deployments share a project.
    topic_prefix: str = Field(default="", pattern=r"^([a-z][a-z0-9-]*-)?$")
    # Buckets a run's storage path may point into, besides ``bucket``.
    owned_buckets: list[str] = Field(default_factory=list)
    # Cloud mode: the audience clients mint their Google ID tokens for (the function's URL), and the
    # others a token may carry instead: those Cloud Run also admits in front of it, such as the
    # gcloud CLI's OAuth client, whose tokens are a person's `gcloud auth print-identity-token`.
    auth_audience: str = ""
    auth_other_audiences: list[str] = Field(default_factory=list)
    # Embedded share links: the HMAC key (generated under the data dir when empty).
    share_key: str = ""
    cluster_id: str = "default"
    xprof_viewer_url: str = ""
    log_format: Literal["json", "console"] = "json"
    max_delivery_attempts: int = Field(default=5, ge=1, le=100)
    settle_seconds: float = Field(default=30.0, ge=0)
    # mldiag up's stand-in for Cloud Scheduler (which ticks every minute): results should come sooner locally.
    maintenance_interval_seconds: float = Field(default=15.0, gt=0)
    max_profile_bytes: int = Field(default=20 * 1024**3, gt=0)
    # Alerts beyond this many monitored events of one run are counted and dropped, not stored.
    max_monitored_events_per_run: int = Field(default=1000, ge=1)
    event_retention_days: float = Field(default=30.0, gt=0)
    # The analysis: who reasons over the evidence, and for how long one may run.
    reasoner: Literal["offline", "vertex"] = "offline"
    vertex_model: str = "gemini-2.5-flash"
    vertex_location: str = "global"
    vertex_endpoint: str = ""  # a private or proxied Vertex AI endpoint; Google's by default
    analysis_timeout_seconds: float = Field(default=480.0, gt=0)
    # A session with at least this many host files is analysed one host per function instance, then merged.
    fan_out_min_hosts: int = Field(default=2, ge=2)
    # The analysis's memory ceiling (e.g. "8GiB"); unset, a share of what the machine or function has available.
    analysis_memory_ceiling_bytes: int | None = Field(default=None, gt=0)
    # Notifications out: the deployment's default destinations (a run may name its own).
    notify_webhook_url: str = ""
    notify_webhook_secret: str = ""
    notify_webhook_mode: Literal["binary", "structured"] = "binary"
    notify_slack_url: str = ""
    notify_pagerduty_routing_key: str = Field(default="", pattern=r"^[A-Za-z0-9]{0,64}$")
    pagerduty_events_url: str = "https://events.pagerduty.com"
    # Lets notifications reach loopback and private addresses (a receiver on the same machine or network).
    notify_allow_private: bool = False
    # The key notification secrets are stored encrypted under (generated under the data dir when empty and embedded).
    notify_encryption_key: str = Field(default="", repr=False)

    @field_validator("analysis_memory_ceiling_bytes", mode="before")
    @classmethod
    def _memory_size(cls, value: object) -> object:
        return parse_size(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _webhook_is_signed(self) -> Settings:
        if self.notify_webhook_url and not self.notify_webhook_secret:
            raise ValueError("MLDIAG_NOTIFY_WEBHOOK_URL needs MLDIAG_NOTIFY_WEBHOOK_SECRET: every webhook request "
                             "is signed")
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        values = {
            "backend": env.get("MLDIAG_BACKEND"),
            "data_dir": env.get("MLDIAG_DATA_DIR"),
            "project": env.get("MLDIAG_PROJECT") or env.get("GOOGLE_CLOUD_PROJECT"),
            "location": env.get("MLDIAG_LOCATION"),
            "bucket": env.get("MLDIAG_BUCKET"),
            "firestore_database": env.get("MLDIAG_FIRESTORE_DATABASE"),
            "fleet_dataset": env.get("MLDIAG_FLEET_DATASET"),
            "api_url": env.get("MLDIAG_API_URL"),
            "api_token": env.get("MLDIAG_API_TOKEN"),
            "sdk_secret": env.get("MLDIAG_SDK_SECRET"),
            "alert_token": env.get("MLDIAG_ALERT_TOKEN"),
            "topic_prefix": env.get("MLDIAG_TOPIC_PREFIX"),
            "owned_buckets": [b.strip() for b in env.get("MLDIAG_OWNED_BUCKETS", "").split(",") if b.strip()],
            "auth_audience": env.get("MLDIAG_AUTH_AUDIENCE"),
            "auth_other_audiences": [a.strip() for a in env.get("MLDIAG_AUTH_OTHER_AUDIENCES", "").split(",")
                                     if a.strip()],
            "share_key": env.get("MLDIAG_SHARE_KEY"),
            "cluster_id": env.get("MLDIAG_CLUSTER_ID"),
            "xprof_viewer_url": env.get("MLDIAG_XPROF_VIEWER_URL"),
            "log_format": env.get("MLDIAG_LOG_FORMAT"),
            "max_delivery_attempts": env.get("MLDIAG_MAX_DELIVERY_ATTEMPTS"),
            "settle_seconds": env.get("MLDIAG_SETTLE_SECONDS"),
            "maintenance_interval_seconds": env.get("MLDIAG_MAINTENANCE_INTERVAL_SECONDS"),
            "max_profile_bytes": env.get("MLDIAG_MAX_PROFILE_BYTES"),
            "max_monitored_events_per_run": env.get("MLDIAG_MAX_MONITORED_EVENTS_PER_RUN"),
            "event_retention_days": env.get("MLDIAG_EVENT_RETENTION_DAYS"),
            # google-genai's own variables (Terraform sets them) select Vertex AI too.
            "reasoner": env.get("MLDIAG_REASONER")
            or ("vertex" if env.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("true", "1") else None),
            "vertex_model": env.get("MLDIAG_VERTEX_MODEL"),
            "vertex_location": env.get("MLDIAG_VERTEX_LOCATION") or env.get("GOOGLE_CLOUD_LOCATION"),
            "vertex_endpoint": env.get("MLDIAG_VERTEX_ENDPOINT"),
            "analysis_timeout_seconds": env.get("MLDIAG_ANALYSIS_TIMEOUT_SECONDS"),
            "fan_out_min_hosts": env.get("MLDIAG_FAN_OUT_MIN_HOSTS"),
            "analysis_memory_ceiling_bytes": env.get("MLDIAG_ANALYSIS_MEMORY_CEILING"),
            "notify_webhook_url": env.get("MLDIAG_NOTIFY_WEBHOOK_URL"),
            "notify_webhook_secret": env.get("MLDIAG_NOTIFY_WEBHOOK_SECRET"),
            "notify_webhook_mode": env.get("MLDIAG_NOTIFY_WEBHOOK_MODE"),
            "notify_slack_url": env.get("MLDIAG_NOTIFY_SLACK_URL"),
            "notify_pagerduty_routing_key": env.get("MLDIAG_NOTIFY_PAGERDUTY_ROUTING_KEY"),
            "pagerduty_events_url": env.get("MLDIAG_PAGERDUTY_EVENTS_URL"),
            "notify_allow_private": env.get("MLDIAG_NOTIFY_ALLOW_PRIVATE"),
            "notify_encryption_key": env.get("MLDIAG_NOTIFY_ENCRYPTION_KEY"),
        }
        try:
            return cls.model_validate({k: v for k, v in values.items() if v})
        except ValidationError as error:
            raised = invalid_argument(error)
            raise InvalidArgument(f"bad environment setting: {raised}") from None

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / "mldiag.sqlite3"

    @property
    def fleet_path(self) -> Path:
        """The embedded fleet table: a file of its own, so a query never waits on the documents' write lock."""
        return self.data_dir / "fleet.sqlite3"

    @property
    def scratch_dir(self) -> Path | None:
        """Where analyses keep their private copies: under the data dir on the embedded backend (so that a
        restart finds what a crash left there), the system's temporary folder in the cloud."""
        return self.data_dir / "scratch" if self.backend == "embedded" else None

    @property
    def accepted_audiences(self) -> tuple[str, ...]:
        """Every audience a Google ID token may carry in cloud mode (none outside it)."""
        if not self.auth_audience:
            return ()
        return tuple(dict.fromkeys([self.auth_audience, *self.auth_other_audiences]))

    @property
    def bucket_uri(self) -> str:
        return f"gs://{self.bucket}"

    @property
    def storage_buckets(self) -> tuple[str, ...]:
        """The buckets a run's storage path may point into: the deployment's own."""
        return tuple(dict.fromkeys([self.bucket, *self.owned_buckets]))

    @property
    def sdk_capability(self) -> str:
        """The secret path segment of ``/sdk/<secret>/v1/...`` ("" when none is configured).

        ``MLDIAG_SDK_SECRET`` when set, else derived from the API token, so that an
        operator who sets the token has nothing more to keep; a leaked capability
        does not reveal the token.
        """
        return sdk_capability(self.api_token, self.sdk_secret)
