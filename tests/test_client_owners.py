"""The client's owner index answers as the plain mapping it replaces, however it is changed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hedwig.client.owners import Owners
from hedwig.client.routes import RouteKey, SubscriptionRoute

HUBS = ["h1:1", "h2:1", "h3:1"]
KEYS: list[RouteKey] = ["a", "b", "c"]
KEYS += [SubscriptionRoute(t, s) for t in ("a", "b") for s in ("s1", "s2")]

_ops = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(KEYS), st.sampled_from(HUBS)),
    st.tuples(st.just("setdefault"), st.sampled_from(KEYS), st.sampled_from(HUBS)),
    st.tuples(st.just("pop"), st.sampled_from(KEYS), st.just("")),
    st.tuples(st.just("drop_hub"), st.just(""), st.sampled_from(HUBS)),
    st.tuples(st.just("drop_routes"), st.sampled_from(["a", "b", "c"]), st.sampled_from(HUBS)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ops, max_size=40))
def test_the_index_agrees_with_a_plain_mapping_walked_in_full(
    ops: list[tuple[str, RouteKey, str]],
) -> None:
    owners, model = Owners(), dict[RouteKey, str]()
    for op, key, hub in ops:
        if op == "set":
            owners.set(key, hub)
            model[key] = hub
        elif op == "setdefault":
            owners.setdefault(key, hub)
            model.setdefault(key, hub)
        elif op == "pop":
            assert owners.pop(key) == model.pop(key, None)
        elif op == "drop_hub":
            owners.drop_hub(hub)
            model = {k: h for k, h in model.items() if h != hub}
        else:  # drop_routes: key is a topic here
            assert isinstance(key, str)
            owners.drop_routes(key, hub)
            model = {
                k: h
                for k, h in model.items()
                if not (isinstance(k, SubscriptionRoute) and k.topic == key and h == hub)
            }
        assert len(owners) == len(model)
        assert all(owners.get(k) == model.get(k) for k in KEYS)
    # Nothing is left indexed under a hub or topic once its entries are gone.
    for hub in HUBS:
        owners.drop_hub(hub)
    assert len(owners) == 0 and not owners._by_hub and not owners._routes_of


def test_forgetting_a_hub_keeps_every_other_hubs_topics() -> None:
    owners = Owners()
    for i in range(100_000):
        owners.set(f"t{i}", HUBS[i % 2])
    owners.set("lone", HUBS[2])
    owners.drop_hub(HUBS[2])
    assert owners.get("lone") is None and len(owners) == 100_000
    assert len(owners._by_hub[HUBS[0]]) == 50_000
