"""Typed errors. Each class carries the ``error_code`` the CLI prints and its exit code.

Every error also inherits the matching builtin (as filelock's ``Timeout(TimeoutError)`` does),
so callers that only know Python's exceptions still catch the right thing.
"""

from __future__ import annotations

from typing import Any


class PhaselogError(Exception):
    """Base of every error phaselog raises on purpose."""

    error_code = "error"
    exit_code = 1

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context: dict[str, Any] = {k: v for k, v in context.items() if v is not None}

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON error object the CLI prints."""
        out: dict[str, Any] = {"success": False, "error": self.message, "error_code": self.error_code}
        out.update(self.context)
        return out


class UsageError(PhaselogError, ValueError):
    """The command line or API call is malformed (exit 2)."""

    error_code = "usage"
    exit_code = 2


class UnknownPhase(UsageError):
    """A phase name or ordinal is not part of the pipeline (exit 2)."""

    error_code = "unknown_phase"


class InvalidIdentifier(UsageError):
    """A ticket or run id breaks the identifier rules (exit 2)."""

    error_code = "invalid_id"


class InvalidRecord(PhaselogError, ValueError):
    """A record breaks an error-level validation rule; nothing was written."""

    error_code = "invalid"

    def __init__(self, message: str, *, errors: list[dict[str, str]] | None = None, **ctx: Any):
        super().__init__(message, errors=errors, **ctx)
        self.errors = errors or []


class NotFound(PhaselogError, KeyError):
    """No record matches."""

    error_code = "not_found"

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return self.message


class StoreNotFound(PhaselogError, LookupError):
    """The store does not exist (no root, database file or schema) and was opened for reading.

    Not a NotFound: "no such record" is an answer about a store that exists; this is not.
    """

    error_code = "store_not_found"


class AlreadyExists(PhaselogError, FileExistsError):
    """The attempt is taken; the existing record is untouched. Use the next attempt."""

    error_code = "already_exists"


class NotMonotonic(PhaselogError, ValueError):
    """An explicit attempt number is not above the phase's latest attempt."""

    error_code = "not_monotonic"


class Conflict(PhaselogError):
    """Another writer changed the phase between read and append; retry with fresh state."""

    error_code = "conflict"


class PipelineMismatch(PhaselogError, ValueError):
    """The run follows another pipeline than the one named."""

    error_code = "pipeline_mismatch"


class PipelineError(PhaselogError, ValueError):
    """A pipeline manifest is missing or malformed."""

    error_code = "pipeline_error"


class Corrupt(PhaselogError, ValueError):
    """Stored bytes cannot be read as a record (damaged, edited, truncated)."""

    error_code = "corrupt"


class TooLarge(Corrupt):
    """A file or value exceeds its size cap; it is refused before parsing."""

    error_code = "too_large"


class UnsupportedVersion(PhaselogError, ValueError):
    """A record's schema version has a newer major version than this phaselog reads."""

    error_code = "unsupported_version"


class StoreError(PhaselogError, OSError):
    """The store could not be read or written (permissions, disk, symlink hops)."""

    error_code = "io_error"


class MigrationNeeded(PhaselogError):
    """The store's schema is older than this phaselog; ``phaselog store migrate`` upgrades it."""

    error_code = "migration_needed"


class Prerequisite(PhaselogError, ValueError):
    """Earlier phases block this write (missing, failed, stale, rejected, unapproved)."""

    error_code = "prerequisite"


class OutcomeUnknown(StoreError):
    """The database stopped answering around a commit: the write may or may not be stored.

    Read it back (``phaselog read``/``list``) before writing again: a retry without ``--attempt``
    could otherwise record the same work twice.
    """

    error_code = "outcome_unknown"


class Fenced(PhaselogError):
    """A lease was taken over by another holder; this holder may no longer write (fencing token)."""

    error_code = "fenced"


class QueueRefused(UsageError):
    """The queue of runs cannot be used here (it needs a PostgreSQL store)."""

    error_code = "queue_refused"


class RunHeld(PhaselogError):
    """Another runner holds the run's lease (exit 75, EX_TEMPFAIL: try again later, or ``--wait``)."""

    error_code = "run_held"
    exit_code = 75


class PhaseFailed(PhaselogError):
    """A phase still failed after its retries; every attempt is recorded. Chained to the last cause."""

    error_code = "phase_failed"
    #: The run's RunResult (phaselog.runner), set by the runner.
    result: Any = None


class RunInterrupted(PhaselogError):
    """SIGINT or SIGTERM stopped the run; the attempt in progress was recorded as interrupted.

    The exit code is 128 + the signal number (130 for SIGINT, 143 for SIGTERM).
    """

    error_code = "interrupted"
    #: The run's RunResult (phaselog.runner), set by the runner.
    result: Any = None

    def __init__(self, message: str, *, signum: int, **context: object) -> None:
        super().__init__(message, signum=signum, **context)
        self.signum = signum
        self.exit_code = 128 + signum


class RecordingFailed(StoreError):
    """A phase succeeded but its checkpoint could not be recorded after retries (the store failed).

    ``payload`` and ``artifact_paths`` in the context keep what the phase produced.
    """

    error_code = "recording_failed"
