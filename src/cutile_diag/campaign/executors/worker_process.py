"""A local worker process of ``campaign --executor local --gpus N``: ``python -m
cutile_diag.campaign.executors.worker_process FD GUARD``, started by ``local.ProcessPool`` with
``CUDA_VISIBLE_DEVICES`` set to its one GPU.  It talks to the driver over the socket ``FD``, one
JSON message per frame: it sends ``info`` once, then for every ``run`` it gets, a ``record`` per
ledger record (and waits for the ``ack`` that the driver has written it), ``say`` progress lines
and the ``outcome``.  It exits when the driver closes the socket."""
from __future__ import annotations

import json
import os
import sys
import threading
import time
from multiprocessing.connection import Connection

from .handover import ACK_WAIT_S, LoopWorker


class _Channel:
    def __init__(self, fd: int):
        self.conn = Connection(fd)
        self.lock = threading.Lock()        # the loop may echo from more than one thread
        self.acked = 0

    def send(self, **msg) -> None:
        data = json.dumps(msg, default=str).encode()
        with self.lock:
            self.conn.send_bytes(data)

    def recv(self) -> dict:
        return json.loads(self.conn.recv_bytes())

    def wait_ack(self, n: int) -> None:
        """Until the driver has written ``n`` records of this job (or ACK_WAIT_S has passed)."""
        end = time.monotonic() + ACK_WAIT_S
        while self.acked < n and self.conn.poll(max(0.0, end - time.monotonic())):
            msg = self.recv()
            if msg.get("op") == "ack":
                self.acked = msg["n"]


def main(argv: list[str]) -> int:
    """Serve ``run`` messages on the socket ``argv[0]`` until the driver closes it: run each loop, handing its records
    over one at a time; 0."""
    fd, guard = int(argv[0]), argv[1]
    ch = _Channel(fd)
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    worker = LoopWorker(guard, [vis] if vis else [])
    ch.send(op="info", **worker.info())
    while True:
        try:
            msg = ch.recv()
        except (EOFError, OSError):
            return 0                        # the driver closed the socket (or died)
        if msg.get("op") != "run":
            continue
        ch.acked, sent = 0, [0]

        def hand_over(rel: str, record: dict) -> None:
            sent[0] += 1
            ch.send(op="record", rel=rel, record=record)
            ch.wait_ack(sent[0])

        outcome = worker.run_loop(msg["job"], msg.get("resume_from"), hand_over,
                                  echo=lambda line: ch.send(op="say", text=line))
        ch.send(op="outcome", outcome=outcome)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
