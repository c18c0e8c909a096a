"""Status codes a hub answers with, and the one exception class registered for each.

Codes are part of the wire format (``docs/protocol.md``): never renumber, only add. A client
that receives a code it does not know raises the base ``ServerError`` with that code.
"""

from __future__ import annotations

from enum import IntEnum

from hedwig.errors import HedwigError


class Status(IntEnum):
    OK = 0
    NOT_RESPONSIBLE_FOR_TOPIC = 1
    BAD_VERSION = 2
    NO_SUCH_SUBSCRIPTION = 3
    SUBSCRIPTION_EXISTS = 4
    MESSAGE_TOO_LARGE = 5
    INVALID_TOPIC = 6
    INVALID_REQUEST = 7
    SERVICE_UNAVAILABLE = 8
    TOPIC_MOVING = 9
    SUBSCRIPTION_BUSY = 10
    UNSUPPORTED_VERSION = 11
    INTERNAL_ERROR = 12
    MESSAGES_UNAVAILABLE = 13
    LEDGER_FENCED = 14
    NO_SUCH_ENTRY = 15


class ServerError(HedwigError):
    """A hub answered with a non-OK status. ``detail`` carries the owner for redirects."""

    status: Status | int = Status.INTERNAL_ERROR
    retriable = False

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status
        self.detail = detail


class NotResponsibleError(ServerError):
    """The hub does not own the topic; ``owner`` is where to go, if known."""

    status = Status.NOT_RESPONSIBLE_FOR_TOPIC
    retriable = True

    @property
    def owner(self) -> str | None:
        return self.detail


class BadVersionError(ServerError):
    status = Status.BAD_VERSION
    retriable = True


class NoSuchSubscriptionError(ServerError):
    status = Status.NO_SUCH_SUBSCRIPTION


class SubscriptionExistsError(ServerError):
    status = Status.SUBSCRIPTION_EXISTS


class MessageTooLargeError(ServerError):
    status = Status.MESSAGE_TOO_LARGE


class InvalidTopicStatusError(ServerError):
    status = Status.INVALID_TOPIC


class InvalidRequestError(ServerError):
    status = Status.INVALID_REQUEST


class ServiceUnavailableError(ServerError):
    status = Status.SERVICE_UNAVAILABLE
    retriable = True


class TopicMovingError(ServerError):
    """The topic is being handed over; ``detail`` names the destination when known."""

    status = Status.TOPIC_MOVING
    retriable = True


class SubscriptionBusyError(ServerError):
    status = Status.SUBSCRIPTION_BUSY


class UnsupportedVersionError(ServerError):
    status = Status.UNSUPPORTED_VERSION


class InternalServerError(ServerError):
    status = Status.INTERNAL_ERROR
    retriable = True


class MessagesUnavailableError(ServerError):
    """The requested messages were collected by retention; ``detail`` is the first kept seq."""

    status = Status.MESSAGES_UNAVAILABLE


class LedgerFencedStatusError(ServerError):
    """A storage replica refused an add: the ledger was fenced by a recovering hub."""

    status = Status.LEDGER_FENCED


class NoSuchEntryStatusError(ServerError):
    status = Status.NO_SUCH_ENTRY


_BY_STATUS: dict[int, type[ServerError]] = {
    cls.status: cls
    for cls in (
        NotResponsibleError,
        BadVersionError,
        NoSuchSubscriptionError,
        SubscriptionExistsError,
        MessageTooLargeError,
        InvalidTopicStatusError,
        InvalidRequestError,
        ServiceUnavailableError,
        TopicMovingError,
        SubscriptionBusyError,
        UnsupportedVersionError,
        InternalServerError,
        MessagesUnavailableError,
        LedgerFencedStatusError,
        NoSuchEntryStatusError,
    )
}


def error_for_status(status: int, message: str, detail: str | None = None) -> ServerError:
    """The exception a client raises for an ERROR frame."""
    cls = _BY_STATUS.get(status, ServerError)
    return cls(message, status=status, detail=detail)
