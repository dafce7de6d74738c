"""Every Redis key the queue uses, and how times become scores.

With the default prefix ``jl``, a queue named ``<queue>`` keeps these keys, all under
the hash tag ``{q:<queue>}`` so that one queue lives in one cluster slot and each of
its scripts touches a single slot:

============================  ======  =================================================
key                           type    holds
============================  ======  =================================================
``jl:{q:<queue>}:meta``       string  the epoch this queue was created in
``jl:{q:<queue>}:ready:<p>``  zset    pending entries of priority ``p`` (0..9), scored
                                      by ready_at; ready and delayed entries share it,
                                      split by ``now``
``jl:{q:<queue>}:leased``     zset    leased entries, scored by lease deadline
``jl:{q:<queue>}:dead``       zset    dead-lettered entries, scored by when
``jl:{q:<queue>}:item``       hash    execution id -> the entry as last applied
                                      (msgpack ``QueueItem``)
``jl:{q:<queue>}:state``      hash    execution id -> ``<priority>|<lease id>|<at>``:
                                      what the worker side changed since the last apply
                                      (lease id empty when not leased, ``at`` in
                                      microseconds or empty when unchanged)
``jl:{q:<queue>}:ver``        hash    execution id -> version, kept after removal as
                                      the tombstone
``jl:{q:<queue>}:gone``       zset    tombstones, scored by removal time (for pruning)
``jl:{q:<queue>}:paused``     hash    the queue's pause as the log last set it:
                                      ``paused`` (``1`` or ``0``: what the lease script
                                      reads), ``version`` (the Queue aggregate's, the
                                      guard) and ``record`` (msgpack ``QueuePause``)
============================  ======  =================================================

Limits keep these keys beside them, under the same hash tag (``<k>``: a limit key;
``<m>``: ``c:<k>`` for a concurrency limit, ``r:<k>`` for a rate limit):

- ``:lim`` (hash): execution id -> the entry's limits (concurrency key, max, rate key,
  limit, per ms, joined by ``\\x1f``), for entries that have some;
- ``:lim:run:<k>`` (set): the entries leased under concurrency key ``k``;
- ``:lim:starts:<k>`` (zset): starts under rate key ``k`` (lease ids by the lease's
  time), trimmed to the window;
- ``:lim:closed:<m>`` (string, expires): until when (ms) a rebuild holds limit ``m``
  full, since what happened just before it is unknown (``LimitCloser``);
- ``:lim:wait:<m>`` (zset): entries set aside for limit ``m``, by priority band, then
  ready time;
- ``:lim:wake`` (zset): limits whose waiting entries get a look at the next lease, by
  when (0: at once);
- ``:lim:noted`` (hash): entries already reported as throttled;
- ``:lim:vals`` (hash): limit ``m`` -> ``<own value>|<per ms>``, the values its entries
  carry (a named limit's win).

Three global keys sit outside any queue's slot and are only touched by single commands
(or pipelines of them, never a script):

- ``jl:meta`` (hash): ``store_id``, ``epoch``, ``position`` of the whole queue store.
- ``jl:queues`` (set): every queue created since the last reset, and the mark
  ``:epoch:<epoch>`` that the reset adds (no queue name has a colon): a set without
  its mark lost its data. On a Redis Cluster each of these keys may lose its data on
  its own (one master lost), so a queue listed without its meta, or a set without the
  mark, is a loss as a missing ``jl:meta`` is.
- ``jl:limits`` (hash): the named limits, ``v:<name>`` -> version and ``r:<name>`` ->
  the record (msgpack ``NamedLimit``). The lease script cannot read it (another slot):
  the queue reads it and passes it in.

The scheduler's leader election keeps two keys in a slot of their own:
``jl:{leader}:lock`` (string: the leader's token, with the lease ttl) and
``jl:{leader}:epoch`` (string: the epoch the leader announced; the counter itself is
in the event store, which does not lose it).

Workers report themselves in ``jl:{workers}:info`` (hash: worker id -> JSON) and
``jl:{workers}:seen`` (zset: worker id by last heartbeat), and the queues they serve in
``jl:{workers}:queues`` (zset: queue name by the last heartbeat of a worker serving it).

Circuit breakers keep their state under ``jl:{breaker}:<handler>`` (pybreaker adds
``:state``, ``:fail_counter``, ``:success_counter`` and ``:opened_at``).

The API's budgets (``infra/budgets.py``) share the slot ``{budgets}``, so that the
budgets of one request are spent in one script: ``jl:{budgets}:rate:<name>`` (string,
expires when the budget is whole again: its TAT in microseconds) and
``jl:{budgets}:holds:<name>`` (zset: open long-poll tickets by deadline in ms). A name
is ``<kind>:<who>``, e.g. ``req:c:<credential digest>`` or ``req:a:<address>``.

The queue projection publishes on the channel ``jl:ready`` (pub/sub, not a key) the
names of the queues where runs became ready (one line each); idle workers subscribe.
The read models' follower publishes ``runs`` on ``jl:read-models`` after each page it
applied; the API's long-polls subscribe.

Scores are integer milliseconds since the Unix epoch (``jobledger.projections.times``);
the memory backend uses the same scores, and the same ``check_change``, so that both
backends order, time and refuse entries identically.
"""

from dataclasses import dataclass
from uuid import UUID

from jobledger.projections.queue.backend import PRIORITIES

DEFAULT_PREFIX = "jl"

_GLOB_SPECIALS = frozenset("*?[]\\")


def _glob_escape(text: str) -> str:
    return "".join(f"\\{c}" if c in _GLOB_SPECIALS else c for c in text)


@dataclass(frozen=True, slots=True)
class QueueKeys:
    """The keys of one queue (see the module docstring)."""

    base: str

    @property
    def meta(self) -> str:
        return f"{self.base}:meta"

    @property
    def leased(self) -> str:
        return f"{self.base}:leased"

    @property
    def dead(self) -> str:
        return f"{self.base}:dead"

    @property
    def item(self) -> str:
        return f"{self.base}:item"

    @property
    def state(self) -> str:
        return f"{self.base}:state"

    @property
    def ver(self) -> str:
        return f"{self.base}:ver"

    @property
    def gone(self) -> str:
        return f"{self.base}:gone"

    @property
    def paused(self) -> str:
        return f"{self.base}:paused"

    @property
    def lim(self) -> str:
        return f"{self.base}:lim"

    @property
    def lim_wake(self) -> str:
        return f"{self.base}:lim:wake"

    @property
    def lim_noted(self) -> str:
        return f"{self.base}:lim:noted"

    @property
    def lim_vals(self) -> str:
        return f"{self.base}:lim:vals"

    def lim_run(self, key: str) -> str:
        return f"{self.base}:lim:run:{key}"

    def lim_starts(self, key: str) -> str:
        return f"{self.base}:lim:starts:{key}"

    def lim_closed(self, member: str) -> str:
        return f"{self.base}:lim:closed:{member}"

    def lim_wait(self, member: str) -> str:
        return f"{self.base}:lim:wait:{member}"

    def ready(self, priority: int) -> str:
        return f"{self.base}:ready:{priority}"

    @property
    def ready_by_priority(self) -> list[str]:
        """``ready:0`` .. ``ready:9``: index = priority, the order the scripts expect."""
        return [self.ready(p) for p in range(len(PRIORITIES))]

    def all(self) -> list[str]:
        fixed = [self.meta, self.leased, self.dead, self.item, self.state, self.ver, self.gone]
        fixed += [self.paused, self.lim, self.lim_wake, self.lim_noted, self.lim_vals]
        # The per-key limit sets are found by a reset's scan of the queue pattern.
        return fixed + self.ready_by_priority


@dataclass(frozen=True, slots=True)
class Keys:
    """The key names under one prefix; tenants and tests isolate by prefix."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        # A brace in the prefix would become the hash tag of every key and put all
        # queues in one slot.
        if not self.prefix or "{" in self.prefix or "}" in self.prefix:
            raise ValueError(f"invalid Redis key prefix {self.prefix!r}")

    @property
    def meta(self) -> str:
        return f"{self.prefix}:meta"

    @property
    def queues(self) -> str:
        return f"{self.prefix}:queues"

    @property
    def limits(self) -> str:
        return f"{self.prefix}:limits"

    @property
    def leader(self) -> str:
        """The leader lock: holds the leader's token, expires after the lease ttl."""
        return f"{self.prefix}:{{leader}}:lock"

    @property
    def leader_epoch(self) -> str:
        """The epoch the leader announced (same slot as the lock, for one script)."""
        return f"{self.prefix}:{{leader}}:epoch"

    @property
    def workers(self) -> str:
        """Live workers: worker id -> what it last reported (JSON)."""
        return f"{self.prefix}:{{workers}}:info"

    @property
    def workers_seen(self) -> str:
        """Live workers by last heartbeat (ms), to drop the ones that stopped beating."""
        return f"{self.prefix}:{{workers}}:seen"

    @property
    def queues_served(self) -> str:
        """Queues by the last heartbeat of a worker serving them (seconds), kept after
        the workers left, so a queue nobody serves says since when."""
        return f"{self.prefix}:{{workers}}:queues"

    def progress(self, execution_id: UUID) -> str:
        """The latest progress a running execution reported (JSON), for live views;
        it expires by itself, so a run that ended without a word leaves nothing."""
        return f"{self.prefix}:progress:{execution_id}"

    def breaker(self, handler: str) -> str:
        """The namespace of a handler's circuit breaker (its keys are named under it)."""
        return f"{self.prefix}:{{breaker}}:{handler}"

    def budget(self, name: str) -> str:
        """A rate budget of the API's callers: its TAT in microseconds."""
        return f"{self.prefix}:{{budgets}}:rate:{name}"

    def budget_holds(self, name: str) -> str:
        """A caller's open holds (long-polls): ticket -> deadline in ms."""
        return f"{self.prefix}:{{budgets}}:holds:{name}"

    def work_ready(self) -> str:
        """The channel that says on which queues runs became ready (``WorkSignal``)."""
        return f"{self.prefix}:ready"

    def read_models_moved(self) -> str:
        """The channel that says the read models applied a page (waits look again)."""
        return f"{self.prefix}:read-models"

    def queue(self, queue: str) -> QueueKeys:
        return QueueKeys(f"{self.prefix}:{{q:{queue}}}")

    @property
    def queue_pattern(self) -> str:
        """A SCAN pattern for every queue key under this prefix, and no other prefix's."""
        return f"{_glob_escape(self.prefix)}:{{q:*"
