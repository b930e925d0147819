"""Peewee models: the service's state, one module per resource.

``ALL_MODELS`` is in dependency order (referenced tables first); the migration
runner creates them in that order.
"""
from app.accounts.models import (
    ApiKey,
    CreditLedger,
    Customer,
    CustomerSso,
    GrantedScope,
    PortalRecoveryCode,
    PortalSession,
    PortalUser,
)
from app.activity.audit_models import AuditSink
from app.activity.models import ActivityEntry
from app.billing.models import IdempotencyRecord, QuotaMinute
from app.events.models import Event
from app.plumbing.models import BaseModel, iso, new_id, utcnow
from app.privacy.models import EngineDeletion, Suppression
from app.scans.models import BulkBatch, EngineCallback, FindingFeedback, Scan
from app.schema_version import SchemaVersion
from app.sources.models import Source, SourceMinute
from app.watches.models import Watch
from app.webhooks.models import DeliveryAttempt, WebhookDelivery, WebhookEndpoint

ALL_MODELS = [
    SchemaVersion,
    Customer,
    ApiKey,
    GrantedScope,
    PortalUser,
    PortalSession,
    PortalRecoveryCode,
    CustomerSso,
    CreditLedger,
    BulkBatch,
    Scan,
    QuotaMinute,
    IdempotencyRecord,
    WebhookEndpoint,
    WebhookDelivery,
    DeliveryAttempt,
    Suppression,
    ActivityEntry,
    FindingFeedback,
    EngineDeletion,
    Event,
    EngineCallback,
    Watch,
    AuditSink,
    Source,
    SourceMinute,
]

__all__ = [
    "ALL_MODELS", "ActivityEntry", "ApiKey", "AuditSink", "BaseModel", "BulkBatch", "CreditLedger", "Customer",
    "CustomerSso",
    "DeliveryAttempt",
    "EngineCallback", "EngineDeletion", "Event", "FindingFeedback", "GrantedScope",
    "IdempotencyRecord", "PortalRecoveryCode", "PortalSession", "PortalUser", "QuotaMinute", "Scan", "SchemaVersion",
    "Source", "SourceMinute", "Suppression", "Watch",
    "WebhookDelivery", "WebhookEndpoint", "iso", "new_id",
    "utcnow",
]
