"""``TransactionAttempt``: which transaction a batch is, and which emission of it (seed 002)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class TransactionAttempt:
    """A transaction id and an attempt id.

    The transaction id is the batch's txid: the same on every replay of the batch (also after
    a restart or a lost checkpoint), one more for every batch. The attempt id differs on
    every emission of the batch (an in-place retry, a restart), so tuples of an earlier
    emission can never be taken for the current one.

    Example:
        >>> a = TransactionAttempt(7, 1234)
        >>> a.get_transaction_id(), a.get_attempt_id()
        (7, 1234)
    """

    transaction_id: int
    attempt_id: int

    def get_transaction_id(self) -> int:
        """The txid (Storm's ``getTransactionId``)."""
        return self.transaction_id

    def get_attempt_id(self) -> int:
        """The id of this emission of the batch (Storm's ``getAttemptId``)."""
        return self.attempt_id

    def __str__(self) -> str:
        return f"{self.transaction_id}:{self.attempt_id}"
