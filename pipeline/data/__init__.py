"""The shard data contract: schema, atomic writer, validated reader."""

from pipeline.data.schema import SCHEMA, SCHEMA_VERSION, shard_path

__all__ = ["SCHEMA", "SCHEMA_VERSION", "shard_path"]
