"""Peewee models: the service's state, one module per resource.

``ALL_MODELS`` is in dependency order (referenced tables first); the migration
runner creates them in that order.
"""
from app.models.accounts import (
    ApiKey,
    CreditLedger,
    Customer,
    CustomerSso,
    PortalRecoveryCode,
    PortalSession,
    PortalUser,
)
from app.models.activity import ActivityEntry
from app.models.audit import AuditSink
from app.models.base import BaseModel, iso, new_id, utcnow
from app.models.events import Event
from app.models.privacy import EngineDeletion, Suppression
from app.models.scans import BulkBatch, EngineCallback, FindingFeedback, IdempotencyRecord, QuotaMinute, Scan
from app.models.schema_version import SchemaVersion
from app.models.sources import Source, SourceMinute
from app.models.watches import Watch
from app.models.webhooks import DeliveryAttempt, WebhookDelivery, WebhookEndpoint

ALL_MODELS = [
    SchemaVersion,
    Customer,
    ApiKey,
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
    "EngineCallback", "EngineDeletion", "Event", "FindingFeedback",
    "IdempotencyRecord", "PortalRecoveryCode", "PortalSession", "PortalUser", "QuotaMinute", "Scan", "SchemaVersion",
    "Source", "SourceMinute", "Suppression", "Watch",
    "WebhookDelivery", "WebhookEndpoint", "iso", "new_id",
    "utcnow",
]
