"""One turn (SPEC §4): the activation's steps and the models they hand each other, the tool loop, the agent's own tools, pacing, transmit and its gates, the outbox."""
