"""Durable execution on DBOS (ARCHITECTURE §3–§4): dispatch and its queues, the workflows and their typed steps, executors and their recovery, the control socket, channel leases."""
