"""The RQ side of prefeed: queues, job functions (ids in, summaries out) and the pre-fork worker."""
