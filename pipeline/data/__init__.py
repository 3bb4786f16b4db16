"""The data contracts between stages: the dataset folder, the shard schema and its metadata (atomic
writer, validated reader, the scan that picks each execution's attempt) and the launch ledger."""
