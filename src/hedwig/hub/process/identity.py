"""A hub's stable id, kept in its data directory.

Ledger ensembles name replicas by hub id rather than by address, as BookKeeper separates a
bookie's id from its address: a hub that comes back with its data on another address (a pod
rescheduled without a stable name, ``hedwig dev up`` on new ports, a changed advertised name)
keeps serving the replicas it holds, and other hubs find it through the registry, where it
publishes its id next to its address.

The id is written once, next to the replicas, the first time a hub starts on an empty
directory. A hub told its id (``hub_id``) on a directory that holds another one refuses to
start: the replicas there belong to a different hub, and serving them under another name would
let two hubs claim one replica (BookKeeper checks its cookie for the same reason).
"""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path

from hedwig.errors import UsageError

ID_FILE = "hub-id"
# Never a HOST:PORT (no colon): an id is never mistaken for a hub's address, in the registry,
# the logs or a command's arguments.
_VALID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def valid_hub_id(text: str) -> bool:
    return _VALID.fullmatch(text) is not None


def load_hub_id(data_dir: str | os.PathLike[str], wanted: str | None = None) -> str:
    """The id of the hub whose replicas are in ``data_dir``, created if the directory has none.

    ``wanted``: the id the hub was configured with (e.g. its pod's name); it must match the
    directory's, or is written there if the directory has none yet.
    """
    if wanted is not None and not valid_hub_id(wanted):
        raise UsageError(
            f"hub_id {wanted!r}: letters, digits, '.', '_' and '-', at most 63, no colon"
        )
    path = Path(data_dir) / ID_FILE
    try:
        stored = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        stored = None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read this hub's id from {path}: {exc}") from exc
    if stored is not None:
        if not valid_hub_id(stored):
            raise UsageError(f"{path} holds no valid hub id ({stored!r})")
        if wanted is not None and wanted != stored:
            raise UsageError(
                f"the data directory {data_dir} belongs to hub {stored!r}, not {wanted!r}: "
                "its replicas are that hub's; give this hub its own directory"
            )
        return stored
    new = wanted or f"hub-{secrets.token_hex(6)}"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(ID_FILE + ".tmp")
    with open(tmp, "w", encoding="ascii") as f:
        f.write(new + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return new
