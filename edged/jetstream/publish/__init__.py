"""What a publish into a stream can be beyond one message: PubAcks, atomic and fast batches, counters, schedules, and the config rules of those features."""
