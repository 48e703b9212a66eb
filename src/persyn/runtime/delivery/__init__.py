"""Getting what a turn produced to whoever waits for it: the outbox and its deliverer, the live bus
(ARCHITECTURE §5: streams and outbox wake-ups across processes, in process or over Redis, and the relay
both share), and the lease that gives each chat network one connecting process."""
