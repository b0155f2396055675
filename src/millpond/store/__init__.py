"""The state store: levelled, block-indexed SSTs on object storage, numbered manifest versions,
compaction, pins and garbage collection, with memory and local-disk caches in front."""
