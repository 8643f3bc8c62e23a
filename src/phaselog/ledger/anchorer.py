"""What automatic anchoring does once a judgement or a completed run is durable (D323).

:mod:`phaselog.ledger.autoanchor` decides *when* (the events, the setting) and imports nothing of
the ledger's services, because :mod:`phaselog.ledger.events` asks it before every emit; this module
is *how* — a ledger over the event's store, ``proofs.anchor`` to the witness — and registers itself
with it when :mod:`phaselog.ledger.facade` is imported (every Ledger). Its imports are deferred, so
loading the Ledger loads no proofs machinery.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from phaselog.ledger.autoanchor import ENV_TO, use

if TYPE_CHECKING:
    from phaselog.model.heads import Head
    from phaselog.stores.base import Store

__all__ = ["anchor_in"]


def anchor_in(store: Store, ticket_id: str, to: str, key: Path) -> list[Head]:
    """Anchor ``ticket_id`` of ``store`` to the witness ``to`` with the private key file ``key``."""
    from phaselog.ledger import proofs  # lazy: the proofs machinery only when it anchors
    from phaselog.ledger.services import Services  # lazy: as above
    from phaselog.ledger.witness import open_witness  # lazy: as above
    from phaselog.model.heads import load_private_key  # lazy: cryptography only when it signs

    witness = open_witness(to, field=ENV_TO)
    try:
        return proofs.anchor(Services(store), [ticket_id], witness, load_private_key(key))
    finally:
        witness.close()


use(anchor_in)
