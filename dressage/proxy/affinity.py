"""Which proxy replica holds a prompt group: rendezvous (highest-random-weight) hashing (pure).

A session lives in one proxy's memory: its turns, its finalize and its record, and a group's
segment read (`GET /segments?instance_id=`) collects the records of every session of the group
from the proxy it asks. So every request of one group, whose id is the proxy's instance id,
goes to one replica: the replica whose hash of `(replica, group id)` is the highest
(`replica_for`). Hashing the group rather than each session keeps a group's segment read on one
replica, and it bounds what a replica's death costs to the groups it held: with sessions
hashed one by one, a group of 8 trajectories would have one on every replica of a small set,
and any replica lost would fail nearly every group in flight.

Rendezvous hashing keeps no ring: each key's replica depends only on the key and the replica
set, so every client (the trainer's, a separate rollout process) agrees without talking, and
removing a replica moves only the keys it held (each to its next-highest replica) while adding
one takes only the keys it now scores highest on. On a cluster the replicas are the addresses
of a headless Service (pod IPs, which change when a pod is replaced), so the client pins each
group to the replica it started on until its segment read (`dressage.proxy.client`): a
replaced replica's new address takes only groups started after it appeared.

Which replica commands an engine in a sharded pause or continue: `shard_of`, the same kind of
hash of the engine's URL alone. The replicas hold one engine set, so a shard `(i, n)` names the
same engines whichever replica is told it, and a shard whose replica does not answer can be
sent to another (`ProxyRolloutClient.pause`, `resume`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence


def _hash64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _score(replica: str, key: str) -> int:
    return _hash64(f"{replica}\0{key}")


def replica_for(key: str, replicas: Sequence[str]) -> str:
    """The replica of `replicas` that holds `key` (a group id): the highest-scoring one; ties,
    which need equal 64-bit hashes, go to the replica named first in sorted order."""
    if not replicas:
        raise ValueError("no proxy replica to route to")
    return max(sorted(replicas), key=lambda replica: _score(replica, key))


def shard_of(engine_url: str, count: int) -> int:
    """The shard, of `count`, that engine `engine_url` belongs to (a trailing `/` ignored):
    a hash of the URL, so every replica and every client agrees without talking."""
    if count < 1:
        raise ValueError(f"shard count must be >= 1, got {count}")
    return _hash64(engine_url.rstrip("/")) % count


def parse_replica_urls(value: str | Iterable[str]) -> tuple[str, ...]:
    """Proxy replica URLs from a comma-separated list (`DRESSAGE_PROXY_URLS`, `--proxy-url`) or
    a sequence: each stripped of a trailing `/`, in order. ValueError naming the fault for an
    empty list, an entry that is not an http(s) URL, or a URL named twice (a replica named
    twice would take twice its share)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    urls = [item.strip().rstrip("/") for item in items]
    urls = [url for url in urls if url]
    if not urls:
        raise ValueError("no proxy URL given")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"proxy URL {url!r} is not an http:// or https:// URL")
    seen: set[str] = set()
    for url in urls:
        if url in seen:
            raise ValueError(f"proxy URL {url} is named twice")
        seen.add(url)
    return tuple(urls)


DNS_SCHEME = "dns+"
"""`dns+http://HOST:PORT` names every address HOST resolves to, each as `http://ADDRESS:PORT`:
the proxy replicas behind a headless Service (its A records are the ready proxy pods)."""


def dns_target(value: str) -> tuple[str, str, int] | None:
    """`(scheme, host, port)` of a `dns+http(s)://HOST:PORT` replica source, else None.
    ValueError naming the fault for a malformed one."""
    if not value.startswith(DNS_SCHEME):
        return None
    rest = value[len(DNS_SCHEME) :].rstrip("/")
    scheme, sep, authority = rest.partition("://")
    if scheme not in ("http", "https") or not sep:
        raise ValueError(f"proxy URL {value!r}: dns+ needs http:// or https:// after it")
    host, colon, port = authority.rpartition(":")
    if not colon or not host or not port.isdigit() or "/" in authority:
        raise ValueError(f"proxy URL {value!r}: dns+{scheme}:// needs HOST:PORT and no path")
    return scheme, host, int(port)


def replica_urls_of(scheme: str, addresses: Iterable[str], port: int) -> tuple[str, ...]:
    """The replica URLs of resolved `addresses` (IPv6 ones bracketed), sorted, without
    duplicates (a resolver answers an address once per socket type)."""
    urls = {f"{scheme}://[{a}]:{port}" if ":" in a else f"{scheme}://{a}:{port}" for a in addresses}
    return tuple(sorted(urls))
