"""Forwarding calls to brokers: the connections the proxy keeps to each broker (pool) and the
byte-for-byte relay of a call over one of them (relay)."""
