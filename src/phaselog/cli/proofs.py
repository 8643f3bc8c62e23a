"""Provable history: ``keys init``, ``anchor``, ``prove`` (``verify --against`` is in cli.state).

Each command imports the proofs machinery (and the ``cryptography`` package) only when it runs,
so ``phaselog --help`` does not load them. docs/anchoring.md explains heads, witnesses and proofs.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import click

from phaselog.cli._render import table
from phaselog.cli._scaffold import CONTEXT, Call, Result, cli, command, in_section
from phaselog.model.errors import UsageError

DEFAULT_KEY = "phaselog-anchor.key"


def need_crypto() -> None:
    """UsageError (not a traceback) when the ``cryptography`` package is missing."""
    if importlib.util.find_spec("cryptography") is None:
        raise UsageError(
            "signing and checking heads needs the cryptography package: pip install 'phaselog[proofs]'",
            field="--key",
            rule="dependency",
        )


@cli.group("keys", context_settings=CONTEXT)
def keys() -> None:
    """Ed25519 keys that sign the heads `anchor` writes to a witness.

    \b
    Example:
      phaselog keys init --out ~/.config/phaselog/anchor.key
    """


in_section(keys, "Proofs")


@command(keys, "init", store=False, correlation=False)
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    default=DEFAULT_KEY,
    show_default=True,
    help="The private key file (mode 0600; the public key goes to FILE.pub). Keep it out of the store.",
)
def keys_init(call: Call, out: str) -> Result:
    """Make an Ed25519 key pair: a private key (PEM, 0600) and FILE.pub; never overwrites either.

    \b
    Example:
      phaselog keys init --out ~/.config/phaselog/anchor.key
    """
    need_crypto()
    from phaselog.model.heads import make_key_pair  # lazy: cryptography only for the commands that sign

    private, public, key_id = make_key_pair(Path(out))
    data = {"private_key": str(private), "public_key": str(public), "key_id": key_id}
    return Result(
        data, lambda d: table([[k, d[k]] for k in ("private_key", "public_key", "key_id")], ["field", "value"])
    )


@command(cli, "anchor", section="Proofs")
@click.option("--ticket-id", help="The ticket whose head to anchor.")
@click.option("--all", "all_tickets", is_flag=True, help="Every ticket of the store.")
@click.option(
    "--to",
    "to",
    required=True,
    help="The witness: a directory (a git repository: a commit per anchoring), or another store's URL "
    "(sqlite:///…, postgresql://…, file:///…).",
)
@click.option("--key", required=True, type=click.Path(dir_okay=False, exists=True), help="The private key (keys init).")
def anchor(call: Call, ticket_id: str | None, all_tickets: bool, to: str, key: str) -> Result:
    """Sign each ticket's current head (size, Merkle root) and append it to a witness.

    Later, `verify --against DIR` checks that today's history still extends every head.

    \b
    Example:
      phaselog anchor --ticket-id PROJ-1234 --to /mnt/witness --key anchor.key
      phaselog anchor --all --to /mnt/witness --key anchor.key
      phaselog anchor --all --to sqlite:///mnt/witness/heads.db --key anchor.key
    """
    if (ticket_id is None) == (not all_tickets):
        raise UsageError("give --ticket-id T or --all (one of them)", field="--ticket-id", rule="one_of")
    need_crypto()
    from phaselog.ledger import proofs  # lazy: the proofs machinery only for these commands
    from phaselog.ledger.witness import open_witness  # lazy: as above
    from phaselog.model.heads import load_private_key  # lazy: cryptography only for the commands that sign

    ledger = call.ledger
    tickets = ledger.store.tickets() if all_tickets else [ticket_id or ""]
    witness = open_witness(to, field="--to")
    try:
        heads = proofs.anchor(ledger, tickets, witness, load_private_key(key))
    finally:
        witness.close()
    data: dict[str, Any] = {"witness": to, "heads": [h.to_json() for h in heads]}
    return Result(
        data,
        lambda d: table(
            [[h["ticket_id"], h["size"], h["root"][:16], h["at"]] for h in d["heads"]],
            ["ticket", "size", "root", "at"],
            title=f"anchored {len(d['heads'])} head(s) to {d['witness']}",
        ),
    )


@command(cli, "prove", section="Proofs")
@click.option("--ticket-id", required=True)
@click.argument("ref", metavar="RUN:PHASE:ATTEMPT[:SEQ]")
@click.option("--size", type=int, help="Prove it in the first N entries (an anchored head's size); default: all.")
@click.option(
    "--key", type=click.Path(dir_okay=False, exists=True), help="Also sign a head of that tree with this key."
)
def prove(call: Call, ticket_id: str, ref: str, size: int | None, key: str | None) -> Result:
    """Print an inclusion proof of one checkpoint (or progress event) in the ticket's Merkle tree.

    Check it offline with phaselog.model.merkle.verify_inclusion (standalone; docs/anchoring.md).

    \b
    Example:
      phaselog prove --ticket-id PROJ-1234 nightly-1:implement:2
    """
    from phaselog.ledger import proofs  # lazy: the proofs machinery only for these commands

    signer = None
    if key is not None:
        need_crypto()
        from phaselog.model.heads import load_private_key  # lazy: cryptography only when signing

        signer = load_private_key(key)
    data = proofs.prove(call.ledger, ticket_id, ref, size=size, key=signer)
    return Result(
        data,
        lambda d: table(
            [[d["leaf_index"], d["tree_size"], d["root"][:16], len(d["audit_path"])]],
            ["leaf", "size", "root", "path"],
            title=f"{d['entry']['kind']} {d['entry']['hash'][:16]} of {d['ticket_id']}",
        ),
    )


def verify_against(call: Call, against: str, key: str | None) -> Result:
    """`verify --against WITNESS [--key PUBKEY]`: every anchored head against today's history."""
    need_crypto()
    from phaselog.ledger import proofs  # lazy: the proofs machinery only for these commands
    from phaselog.ledger.witness import open_witness  # lazy: as above
    from phaselog.model.heads import load_public_key  # lazy: cryptography only for the commands that check

    public = None
    if key is not None:
        try:
            public = load_public_key(Path(key).read_bytes(), source=f"--key {key}")
        except OSError as exc:
            raise UsageError(f"--key {key}: cannot be read ({exc.strerror})", field="--key", rule="key") from None
    witness = open_witness(against, field="--against")
    try:
        report = proofs.verify_against(call.ledger, witness, public)
    finally:
        witness.close()
    return Result(
        report,
        lambda d: table(
            [[p["ticket_id"] or "", p["line"], p["rule"], p["message"]] for p in d["problems"]],
            ["ticket", "line", "rule", "problem"],
            title=f"checked {d['heads_checked']} head(s): " + ("ok" if d["ok"] else f"{len(d['problems'])} problem(s)"),
            empty="",
        ),
        exit_code=0 if report["ok"] else 1,
        error=f"verify --against found {len(report['problems'])} problem(s)",
        error_code="corrupt",
    )
