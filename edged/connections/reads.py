"""Socket reads in slices of at most 64 KB, for the NATS connections (clients and leafnodes).

nats-server's read buffer stops growing at 64 KB. Read at once, a pipelining client's whole window
(1000 PUBs, 200 KB, which the event loop takes in one read once TCP autotuning has grown the window)
would be parsed, stored and committed as one block while the client waits for all its acks; in 64 KB
slices the commit of one overlaps the parsing of the next, and their acks go out as each commits.
"""

from __future__ import annotations

import asyncio

READ_SIZE = 65536
# One buffer for every connection: the loop reads one socket at a time, and `buffer_updated` copies the
# bytes out before anything else runs.
_READ_BUF = memoryview(bytearray(READ_SIZE))


class SlicedReads(asyncio.BufferedProtocol):
    """A protocol whose transport reads into the shared buffer and hands each slice to `data_received`
    (which the protocol defines, and which other layers, such as a WebSocket shim, call directly)."""

    def data_received(self, data: bytes) -> None:
        raise NotImplementedError

    def get_buffer(self, sizehint: int) -> memoryview:
        return _READ_BUF

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_READ_BUF[:nbytes].tobytes())
