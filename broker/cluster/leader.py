"""Leader election (Pulsar's LeaderElectionService): one broker of the cluster is the leader.

The leader holds the EPHEMERAL node ``/loadbalance/leader`` with Pulsar's LeaderBroker JSON
(``{"brokerId": "<host>:<webport>", "serviceUrl": "http://host:port"}``), so leadership ends
with its metadata session. Every broker reads the node (the read arms a watch); when it
disappears (the leader closed, or its session expired) the others race to create it and the
store lets exactly one win.

A leader stops acting as leader as soon as its connection to the store drops (as Curator's
LeaderLatch does on SUSPENDED), not when its session is presumed lost: ZooKeeper expires the
session a whole session timeout after it last heard from the broker, while the broker notices
the silence only after two thirds of it and presumes the session lost a full timeout later, so
another broker could lead for seconds before a leader that waited for SessionLost stopped. Back
within the session (Reconnected), or in a new one, the election runs again: a leader whose node
lived on leads again, the others follow whoever holds it.

Leader-only work hangs on the election as periodic tasks (:meth:`LeaderElection.add_task`):
they start when this broker becomes leader and are cancelled when it stops being one.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    CreateOption,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    release_at_close,
)

__all__ = ["LEADER_PATH", "LeaderBroker", "LeaderElection", "LeaderState"]

log = logging.getLogger(__name__)

# Pulsar's LeaderElectionService.LOADBALANCE_LEADER_PATH.
LEADER_PATH = "/loadbalance/leader"


@dataclass(frozen=True)
class LeaderBroker:
    """Pulsar's LeaderBroker: the leader's cluster name and its web service URL."""

    broker_id: str
    service_url: str

    def to_json(self) -> bytes:
        return json.dumps(
            {"brokerId": self.broker_id, "serviceUrl": self.service_url}, sort_keys=True
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> LeaderBroker:
        data = json.loads(raw)
        return cls(broker_id=str(data.get("brokerId", "")), service_url=str(data["serviceUrl"]))

    def as_json(self) -> dict[str, str]:
        """The admin API's answer (GET /admin/v2/brokers/leaderBroker)."""
        return {"brokerId": self.broker_id, "serviceUrl": self.service_url}


class LeaderState(enum.Enum):
    """Pulsar's LeaderElectionState, plus the broker's own lifecycle around it."""

    STOPPED = "stopped"  # not started yet, or closed
    NO_LEADER = "no_leader"  # electing, or the session is lost: no leader known
    FOLLOWER = "follower"  # another broker leads (``leader`` names it)
    LEADER = "leader"  # this broker leads: its leader-only tasks run


LeaderTask = Callable[[], Awaitable[object]]  # what it returns is ignored


@dataclass(frozen=True)
class _PeriodicTask:
    name: str
    interval_s: float
    run: LeaderTask


class LeaderElection:
    """This broker's part in the election, and the leader role's periodic tasks.

    One owner per piece of state: ``state`` and ``leader`` change only in :meth:`_elect`,
    :meth:`_on_session_event` and :meth:`close`.
    """

    def __init__(self, store: MetadataStore, me: LeaderBroker) -> None:
        self.store = store
        self.me = me
        self._me_json = me.to_json()
        self.state = LeaderState.STOPPED
        self.leader: LeaderBroker | None = None
        self._tasks: list[_PeriodicTask] = []
        self._running: list[asyncio.Task[None]] = []  # the periodic tasks, while leader
        # Every task this election started and that has not finished yet, including periodic
        # tasks cancelled when leadership ended (a cancelled task runs on until its next
        # await): close waits on all of them.
        self._unfinished: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()  # one election at a time

    @property
    def is_leader(self) -> bool:
        return self.state is LeaderState.LEADER

    def add_task(self, name: str, interval_s: float, run: LeaderTask) -> None:
        """Run ``run`` every ``interval_s`` while this broker is the leader (a failing run is
        logged; the next one runs on time). Started at once when already leader."""
        task = _PeriodicTask(name, interval_s, run)
        self._tasks.append(task)
        if self.is_leader:
            self._running.append(self._start_task(task))

    async def start(self) -> None:
        """Take part in the election (the first one is over when this returns)."""
        self.store.register_listener(self._on_notification)
        self.store.register_session_listener(self._on_session_event)
        self.state = LeaderState.NO_LEADER
        await self._elect()

    async def _elect(self) -> None:
        """Become leader if the node is free, else follow whoever holds it.

        The state is checked again after every await: close() cancels an election, but a
        cancellation can be lost when the store's answer arrives at the same moment (Python
        3.11's asyncio.wait_for returns the answer then), and a closed broker must not lead.
        """
        async with self._lock:
            while self.state is not LeaderState.STOPPED:
                found = await self.store.get(LEADER_PATH)  # arms the watch
                if self.state is LeaderState.STOPPED:
                    return
                if found is not None:
                    if found.value == self._me_json:  # ours (a session presumed lost lived on)
                        self._lead()
                    else:
                        self._follow(LeaderBroker.from_json(found.value))
                    return
                try:
                    await self.store.put(LEADER_PATH, self._me_json, -1, CreateOption.EPHEMERAL)
                except BadVersionError:
                    continue  # another broker was first: read its data
                # Loop to read our own node back: that arms the watch on it too.

    def _lead(self) -> None:
        self.leader = self.me
        if self.state is LeaderState.LEADER:
            return
        self.state = LeaderState.LEADER
        log.info("this broker (%s) is the leader", self.me.broker_id)
        self._running = [self._start_task(task) for task in self._tasks]

    def _follow(self, leader: LeaderBroker) -> None:
        self._stop_leading()
        self.state = LeaderState.FOLLOWER
        if leader != self.leader:
            log.info("the leader is %s", leader.broker_id)
        self.leader = leader

    def _stop_leading(self) -> None:
        """Cancel the leader-only tasks (close waits for them to finish)."""
        if self.state is LeaderState.LEADER:
            log.info("this broker (%s) is no longer the leader", self.me.broker_id)
        running, self._running = self._running, []
        for task in running:
            task.cancel()

    def _track(self, task: asyncio.Task[None]) -> asyncio.Task[None]:
        self._unfinished.add(task)
        task.add_done_callback(self._unfinished.discard)
        return task

    def _start_task(self, task: _PeriodicTask) -> asyncio.Task[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(task.interval_s)
                try:
                    await task.run()
                except MetadataStoreError as exc:  # the store is away: the next run retries
                    log.warning("leader task %s failed: %s", task.name, exc)
                except Exception:
                    log.exception("leader task %s failed", task.name)

        return self._track(
            asyncio.get_running_loop().create_task(loop(), name=f"leader: {task.name}")
        )

    # ------------------------------------------------------------ store events

    def _on_notification(self, notification: Notification) -> None:
        if notification.path != LEADER_PATH or self.state is LeaderState.STOPPED:
            return
        if notification.type is NotificationType.DELETED:
            self._stop_leading()
            self.state = LeaderState.NO_LEADER
            self.leader = None
        self._spawn_election()

    def _on_session_event(self, event: SessionEvent) -> None:
        if self.state is LeaderState.STOPPED:
            return
        if event is SessionEvent.SESSION_LOST or (
            event is SessionEvent.CONNECTION_LOST and self.is_leader
        ):
            # Another broker may lead as soon as the node expires: stop at once.
            self._stop_leading()
            self.state = LeaderState.NO_LEADER
            self.leader = None
        elif event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._spawn_election()

    def _spawn_election(self) -> None:
        async def run() -> None:
            try:
                await self._elect()
            except MetadataStoreError as exc:
                # The connection is down: its return runs the election again.
                log.warning("leader election failed: %s", exc)

        self._track(asyncio.get_running_loop().create_task(run(), name="leader election"))

    async def close(self) -> None:
        """Stop the tasks and give up leadership at once, so another broker takes over without
        waiting for this broker's session to end."""
        was_leader = self.is_leader
        self._stop_leading()
        self.state = LeaderState.STOPPED
        self.leader = None
        unfinished = list(self._unfinished)
        for task in unfinished:
            if not task.cancelling():  # one cancelled already is left to wind down
                task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        if was_leader:
            await release_at_close(self.store, "leadership", self._give_up)

    async def _give_up(self) -> None:
        found = await self.store.get(LEADER_PATH)
        if found is not None and found.value == self._me_json:
            await self.store.delete(LEADER_PATH, found.version)
