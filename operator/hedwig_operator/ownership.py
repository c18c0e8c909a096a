"""Which Secrets the operator may use: those it made for the resource at hand, and the access
Secrets their owners bound to a pool; no other.

The operator writes Secrets by server-side apply with ``force``: every field it sets, it
takes, whoever held it. Pointed at a Secret that is not its own it would overwrite it: a
HedwigUser named ``<pool>-ca`` once made it write the user's certificate (and an owner
reference to the user) over the pool's hub CA, and the next reconciliation signed the hubs'
certificates with the user's key. Reading is as dangerous: a CA it did not make, found under
the CA's name, would be loaded and trusted; and a HubPool's ``spec.metadata.secretName``
naming any Secret of its namespace made the operator send that Secret's ``credentials`` to
whatever etcd the HubPool names, and mount the Secret into the pool's hubs, which did the same.

RBAC cannot draw this line. The Secrets a pool needs are named after pools and users the
operator learns at run time, while a rule's ``resourceNames`` is a fixed list (and ``create``
cannot be limited by name at all); a label selector restricts only ``list`` and ``watch``,
never ``get`` or ``patch``. A Role per pool would need the operator to create Roles, which
is more power, not less. So the operator keeps ``get``, ``create`` and ``patch`` on Secrets in
the namespaces it watches (never ``list``, ``watch`` or ``delete``), and checks each Secret
itself before it reads or writes it:

- A Secret it makes (a pool's CAs, the hubs' certificate, the ZooKeeper digest; a ``tls``
  user's certificate) must be absent, or controlled by the resource it serves: an owner
  reference with ``controller: true`` and that resource's kind and uid, which the operator
  writes on every Secret it makes. Anything else is refused (``SecretConflict``) and left as
  it is: only someone who may write Secrets in the namespace can make a Secret pass, and such
  a someone needs no operator to overwrite them.
- Names keep the two kinds apart in the first place: a user's Secret is
  ``<user>-user-tls`` (``builders.security.user_secret_name``), a suffix no pool Secret has.
- The access Secret a pool names must exist and carry the label
  ``hedwig.io/store-access-for: <pool>``, and must not be one the operator made (controlled
  by a HubPool or a HedwigUser). The label is its owner's consent: whoever may label a Secret
  may read it already, and a tenant who may only create HubPools can neither label a Secret
  nor make a pool of another name pass. Refused (``SecretNotBound``), the Secret is neither
  read by the operator nor mounted into the pool's hubs (the pool applies nothing).

A refusal is ``SecretRefusedError``: its reason becomes the resource's condition and a
Warning Event, and nothing is written until the Secret is removed or made right.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hedwig.errors import HedwigError
from hedwig_operator.builders.security import secret_data
from hedwig_operator.kube import KubeApi, ObjectRef
from hedwig_operator.resources import API_VERSION, LABEL_STORE_ACCESS, POOL_KIND, USER_KIND
from hedwig_operator.specs import AccessSecret, PoolSpec, UserSpec

# Condition reasons (and Event reasons) of refused Secrets.
SECRET_CONFLICT = "SecretConflict"
SECRET_NOT_BOUND = "SecretNotBound"


class SecretRefusedError(HedwigError):
    """A Secret the operator will not read or write; ``reason`` is the condition's reason."""

    def __init__(self, reason: str, namespace: str, name: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.namespace = namespace
        self.name = name
        self.message = message


@dataclass(frozen=True, slots=True)
class Owner:
    """The resource a Secret is made for, as its controlling owner reference names it."""

    kind: str
    name: str
    uid: str

    @classmethod
    def of_pool(cls, pool: PoolSpec) -> Owner:
        return cls(POOL_KIND, pool.name, pool.uid)

    @classmethod
    def of_user(cls, user: UserSpec) -> Owner:
        return cls(USER_KIND, user.name, user.uid)


def controller(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The object's controlling owner reference, if it has one."""
    for ref in (body.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref  # type: ignore[no-any-return]
    return None


def made_by_operator(body: Mapping[str, Any]) -> bool:
    """Whether a HubPool or a HedwigUser controls the object (the operator made it for one)."""
    ref = controller(body)
    return (
        ref is not None
        and ref.get("apiVersion") == API_VERSION
        and ref.get("kind") in (POOL_KIND, USER_KIND)
    )


def owned_data(
    body: Mapping[str, Any] | None, owner: Owner, namespace: str, name: str
) -> dict[str, bytes]:
    """The data of a Secret the operator makes for ``owner``: empty if there is none yet;
    ``SecretRefusedError`` if the Secret is not ``owner``'s."""
    if body is None:
        return {}
    ref = controller(body)
    if (
        ref is not None
        and owner.uid
        and ref.get("apiVersion") == API_VERSION
        and ref.get("kind") == owner.kind
        and ref.get("uid") == owner.uid
    ):
        return secret_data(body)
    held = (
        f"controlled by {ref.get('kind')} {ref.get('name')}"
        if ref is not None
        else "not made by the operator"
    )
    raise SecretRefusedError(
        SECRET_CONFLICT,
        namespace,
        name,
        f"Secret {namespace}/{name} exists and is {held}, not {owner.kind} {owner.name}: "
        "the operator neither reads nor overwrites it (delete or rename it to let the "
        "operator make its own)",
    )


async def read_owned(kube: KubeApi, namespace: str, name: str, owner: Owner) -> dict[str, bytes]:
    """``owned_data`` of the Secret as the API server has it now."""
    body = await kube.get(ObjectRef("v1", "Secret", namespace, name))
    return owned_data(body, owner, namespace, name)


def access_data(body: Mapping[str, Any] | None, secret: AccessSecret) -> dict[str, bytes]:
    """The data of the access Secret ``secret`` names, if its owner bound it to the pool;
    ``SecretRefusedError`` if it is missing, unbound, bound to another pool, or the
    operator's own."""
    where = f"Secret {secret.namespace}/{secret.name}"
    label = f"{LABEL_STORE_ACCESS}={secret.pool}"
    if body is None:
        problem = f"{where} does not exist (yet): create it with the label {label}"
    elif made_by_operator(body):
        problem = f"{where} is one the operator made, not an access Secret"
    else:
        bound = ((body.get("metadata") or {}).get("labels") or {}).get(LABEL_STORE_ACCESS)
        if bound == secret.pool:
            return secret_data(body)
        problem = (
            f"{where} is not bound to pool {secret.pool}: its owner labels it {label} to let "
            "the pool's hubs and the operator use it"
            + (f" (it is bound to {bound!r})" if bound else "")
        )
    raise SecretRefusedError(SECRET_NOT_BOUND, secret.namespace, secret.name, problem)


async def read_access(kube: KubeApi, secret: AccessSecret) -> dict[str, bytes]:
    """``access_data`` of the access Secret as the API server has it now."""
    body = await kube.get(ObjectRef("v1", "Secret", secret.namespace, secret.name))
    return access_data(body, secret)
