"""Notifications: deliver the event feed to webhooks and commands, at least once, in order per run.

A service beside the guard, over the ledger's feed (:mod:`phaselog.ledger.feed`) and the guard
storage of the stores (where its lease, cursors and dead letters live). ``phaselog notify`` is its
command (:mod:`phaselog.cli.notify`); docs/notifications.md, "Delivering: phaselog notify".

    config.py       the configuration file: rules, destinations, retries; checked before anything runs
    transports.py   one attempt: a signed webhook POST (urllib), or a command; body templates
    state.py        the lease, cursors and dead letters, in the store's guard storage (D215)
    deliverer.py    the loop: lanes per rule, per-run order, backoff, dead letters (D216)
"""

from phaselog.notify.config import Config, Rule, load_config, parse_config
from phaselog.notify.deliverer import Deliverer, Stats, status
from phaselog.notify.state import DeliveryState
from phaselog.notify.transports import DeliveryFailed, sign

__all__ = [
    "Config",
    "Deliverer",
    "DeliveryFailed",
    "DeliveryState",
    "Rule",
    "Stats",
    "load_config",
    "parse_config",
    "sign",
    "status",
]
